"""promptfoo's Nunjucks templating in prompts (#32): filters, if and for, sandboxed, a missing var named as for
plain {{ name }} templates."""

from __future__ import annotations

import re

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import read_config
from webui.batch.run.prompts import parse_csv, render

VARS = {"name": " ada ", "items": '["a", "b"]', "obj": '{"k": 1, "deep": {"x": "y"}}', "n": "3"}


@pytest.mark.parametrize("template, expected", [
    ("{{ name | trim | upper }}!", "ADA!"),
    ("{{ name | lower | trim }}", "ada"),
    ("{{ items | join(', ') }} ({{ items | length }})", "a, b (2)"),
    ("{{ missing | default('n/a') }}", "n/a"),
    ("{{ obj.k }} {{ obj.deep.x }}", "1 y"),
    ("{{ obj }}", '{"k": 1, "deep": {"x": "y"}}'),  # a JSON var printed is its text
    ("{{ n | dump }} {{ items | dump }}", '"3" ["a", "b"]'),
    ("{% for i in items %}<{{ i }}>{% endfor %}", "<a><b>"),
    ("{% if n == '3' %}three{% else %}other{% endif %}{# a comment #}", "three"),
    ("{% if missing is defined %}x{% endif %}end\n", "end\n"),  # the trailing newline is kept
    ("{{ name }}", " ada "),  # a plain placeholder as before
])
def test_nunjucks_filters_and_tags(template, expected):
    assert render(template, VARS) == expected


@pytest.mark.parametrize("template, said", [
    ("{{ nope | upper }}", "row 2: the template uses {{nope}}, but the row has no 'nope' variable; variables: name"),
    ("{% if %}x{% endif %}", "row 2: template line 1: Expected an expression"),
    ("{{ name.__class__.__mro__ }}", "row 2: template: access to attribute '__class__' of 'str' object is unsafe"),
    ("{{ obj.zz | upper }}", "row 2: template: 'JSON object' has no attribute 'zz'"),
    ("{% for x in nope %}{% endfor %}", "the row has no 'nope' variable"),
])
def test_what_a_template_gets_wrong_is_named(template, said):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        render(template, VARS, where="row 2")


def test_a_promptfoo_suite_renders_nunjucks_in_prompts_and_vars(tmp_path):
    config = ("prompts:\n  - |-\n    {% for c in cities %}{{ loop.index }}. {{ c | upper }}\n    {% endfor %}{{ q }}\n"
              "tests:\n  - vars: {cities: [[Paris], [Rome]], who: ada, q: 'Hi {{ who | title }}'}")
    _, (row,), _ = read_config(config, tmp_path)
    assert row.text == '1. ["PARIS"]\n2. ["ROME"]\nHi Ada'  # a list of lists is one var (promptfoo), a list here


def test_a_csv_template_may_be_nunjucks():
    (row,) = parse_csv("city\nparis\n", "{{ city | capitalize }}?")
    assert row.text == "Paris?"


@pytest.mark.parametrize("filters, said", [
    ("{shout: file://shout.py}", "nunjucksFilters.shout: file://shout.py: custom filters are not run here "
                                 "(promptfoo loads them as JavaScript modules; a Python file cannot be one)"),
    ("{shout: file://shout.js}", "the workbench runs no JavaScript"),
])
def test_custom_filters_are_refused_by_name(filters, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_config(f"prompts: ['x']\nnunjucksFilters: {filters}", tmp_path)
