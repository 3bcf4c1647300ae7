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


def test_a_custom_filter_is_a_javascript_file_run_in_the_sandbox(tmp_path):
    """nunjucksFilters (promptfoo's nunjucks-custom-filters example's allcaps.js and one of two arguments): run in
    the javascript asserts' sandbox, without require."""
    (tmp_path / "allcaps.js").write_text("module.exports = function (str) {\n  return str.toUpperCase();\n};\n")
    (tmp_path / "wrap.js").write_text("module.exports = (s, left, right) => left + s + right;")
    (tmp_path / "files.js").write_text("module.exports = () => require('fs').readFileSync('/etc/passwd');")
    _, (row,), _ = read_config("prompts: ['{{ a | allcaps }} {{ a | wrap(\"<\", \">\") }}']\nnunjucksFilters: "
                               "{allcaps: ./allcaps.js, wrap: file://wrap.js}\ntests: [{vars: {a: hi}}]", tmp_path)
    assert row.text == "HI <hi>"
    with pytest.raises(BatchInputError, match=r"the filter files \(files\.js\): files\.js failed: Error: "
                                              r"require\('fs'\) is not available"):
        read_config("prompts: ['{{ a | files }}']\nnunjucksFilters: {files: file://files.js}\n"
                    "tests: [{vars: {a: hi}}]", tmp_path)


@pytest.mark.parametrize("filters, said", [
    ("{shout: file://shout.py}", "nunjucksFilters.shout: file://shout.py: a filter is a JavaScript file (.js or "
                                 ".cjs) exporting the filter function"),
    ("{shout: file://shout.js}", "nunjucksFilters.shout: file://shout.js: there is no file"),
])
def test_a_custom_filter_that_is_no_javascript_file_is_refused_by_name(filters, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_config(f"prompts: ['x']\nnunjucksFilters: {filters}", tmp_path)


def test_promptfoos_load_filter_parses_json_and_an_unknown_filter_says_where_filters_come_from(tmp_path):
    """simple-csv's ``{{ (style_config | load).tone }}``; promptfoo's load is a built-in filter."""
    _, (row,), _ = read_config("prompts: ['{{ (c | load).tone }} {{ (\"[1, 2]\" | load)[1] }}']\n"
                               "tests: [{vars: {c: '{\"tone\": \"formal\"}'}}]", tmp_path)
    assert row.text == "formal 2"
    with pytest.raises(BatchInputError, match=r"No filter named 'shout'.*nunjucksFilters \(\{name: file://filter"):
        read_config("prompts: ['{{ c | shout }}']\ntests: [{vars: {c: x}}]", tmp_path)
