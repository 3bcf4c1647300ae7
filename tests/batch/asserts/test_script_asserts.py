"""Script asserts as the batch runs them (#32): the javascript kind, inline Python, promptfoo's ``context`` (vars,
prompt, test, config), transforms, and a promptfoo config with all of them checked on fixed outputs."""

from __future__ import annotations

import textwrap

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.types import Observed
from webui.batch.run.cli import build_parser
from webui.batch.run.grid import plan
from webui.batch.run.prompts import PromptRow, load_prompts_text
from webui.batch.promptfoo.reader import read_config
from webui.batch.promptfoo.export import promptfoo_assertion
from webui.batch.run.results import Generated, result_for

SEEN = Observed("I like bananas", prompt="Name a fruit.", variables={"topic": "bananas", "min": "3"},
                description="fruit")

# promptfoo's own python-assert example (site/docs/configuration/expected-outputs/python.md), unchanged
PROMPTFOO_EXAMPLE = '''
from typing import Dict, TypedDict, Union

def get_assert(output: str, context) -> Union[bool, float, Dict[str, str]]:
    print('Prompt:', context['prompt'])
    print('Vars', context['vars']['topic'])

    # This return is an example GradingResult dict
    return {
      'pass': True,
      'score': 0.6,
      'reason': 'Looks good to me',
    }

def mentions_topic(output, context):
    return context['vars']['topic'] in output and context['test']['description'] == 'fruit'

def configured(output, context):
    return len(output) <= context['config']['max']
'''


def test_javascript_is_a_kind_in_the_compact_and_the_dict_form():
    item = parse_assert("javascript:output.length < 100")
    assert (item.kind, item.value) == ("javascript", "output.length < 100")
    assert item.label == "javascript:output.length < 100"
    assert item.check("short").passed and not item.check("x" * 100).passed
    assert parse_assert(item.to_dict()) == item
    negated = parse_assert("not-javascript:output.includes(context.vars.topic)")
    assert not negated.check(SEEN).passed and negated.check(Observed("apples", variables={"topic": "x"})).passed
    scored = parse_assert({"type": "javascript", "value": "output.length / 20", "threshold": 0.6, "weight": 2})
    result = scored.check(SEEN)  # 14 characters: 0.7
    assert (result.passed, result.score, result.weight) == (True, pytest.approx(0.7), 2)
    assert result.detail == "inline javascript scored it (score 0.70, needs 0.6)"
    assert not parse_assert({**scored.to_dict(), "threshold": 0.8}).check(SEEN).passed
    config = parse_assert({"type": "javascript", "value": "output.length <= context.config.max", "config": {"max": 5}})
    assert config.to_dict()["config"] == {"max": 5} and not config.check(SEEN).passed
    failed = parse_assert("javascript:output.nope()").check("x")
    assert not failed.passed and failed.score == 0.0
    assert failed.detail == "inline javascript failed: TypeError: not a function (line 1)"
    with pytest.raises(BatchInputError, match="javascript: the code does not compile"):
        parse_assert("javascript:output.length <")


def test_javascript_from_a_file_and_in_a_prompt_file_and_the_cli_help(tmp_path, monkeypatch):
    (tmp_path / "checks.js").write_text("module.exports = {isShort: (output, context) => output.length < 10};\n")
    monkeypatch.chdir(tmp_path)
    item = parse_assert("javascript:file://checks.js:isShort")
    assert item.check("short").passed and not item.check("far too long").passed
    rows = load_prompts_text("p.jsonl", '{"prompt": "Hi", "asserts": ["javascript:output.startsWith(\'H\')"]}')
    assert rows[0].asserts[0].check("Hello").passed
    assert "javascript:code or javascript:file://file.js[:function]" in " ".join(build_parser().epilog.split())


def test_inline_python_an_expression_or_a_body_with_return():
    item = parse_assert("python:output.lower().startswith('i like')")
    assert item.check(SEEN).passed and not item.check("No.").passed
    body = "words = output.split()\nif context['vars']['topic'] in words:\n    return 1.0\nreturn 0.0"
    scored = parse_assert({"type": "python", "value": body})  # as promptfoo: a bare score passes above 0
    assert scored.check(SEEN).score == 1.0 and not scored.check(Observed("x", variables={"topic": "y"})).passed
    at = parse_assert({"type": "python", "value": body.replace("0.0", "0.2"), "threshold": 0.5})
    assert not at.check(Observed("x", variables={"topic": "y"})).passed
    broken = parse_assert({"type": "python", "value": "x = 1\nreturn output[x + 100]"}).check("abc")
    assert not broken.passed and broken.detail.startswith(
        "inline python failed: IndexError: string index out of range (line 2)")
    with pytest.raises(BatchInputError, match=r"python: the inline code does not compile: .* \(line 2\)"):
        parse_assert({"type": "python", "value": "x = 1\nreturn (x"})


def test_python_asserts_get_promptfoos_context(tmp_path):
    path = tmp_path / "checks.py"
    path.write_text(PROMPTFOO_EXAMPLE)
    result = parse_assert(f"python:{path}").check(SEEN)
    assert (result.passed, result.detail, result.score) == (True, "Looks good to me", 0.6)
    assert parse_assert(f"python:{path}:mentions_topic").check(SEEN).passed
    assert not parse_assert(f"python:{path}:mentions_topic").check(Observed("I like bananas")).passed
    configured = {"type": "python", "value": f"{path}:configured", "config": {"max": 20}}
    assert parse_assert(configured).check(SEEN).passed
    assert not parse_assert({**configured, "config": {"max": 3}}).check(SEEN).passed
    with pytest.raises(BatchInputError, match="python: config must be a mapping"):
        parse_assert({**configured, "config": "max=3"})


def test_a_transform_rewrites_what_the_assert_checks(tmp_path):
    item = parse_assert({"type": "equals", "value": "bananas", "transform": "output.split(' ').pop()"})
    assert item.check(SEEN).passed and item.to_dict()["transform"] == "output.split(' ').pop()"
    assert parse_assert(item.to_dict()) == item
    (tmp_path / "clean.py").write_text("def get_transform(output, context):\n"
                                       "    return output.upper() + '/' + context['vars']['topic']\n"
                                       "def as_json(output, context):\n    return {'text': output}\n")
    chained = parse_assert({"type": "equals", "value": '{"text": "I LIKE BANANAS/bananas"}',
                            "transform": [f"file://{tmp_path / 'clean.py'}",
                                          f"file://{tmp_path / 'clean.py'}:as_json"]})
    assert chained.check(SEEN).passed
    failing = parse_assert({"type": "contains", "value": "x", "transform": "output.nope()"}).check(SEEN)
    assert not failing.passed and failing.detail.startswith("transform: inline javascript failed: TypeError")
    empty = parse_assert({"type": "contains", "value": "x", "transform": "undefined"}).check(SEEN)
    assert empty.detail == "transform: transform inline javascript returned nothing (undefined); return the new output"
    with pytest.raises(BatchInputError, match="there is no file"):
        parse_assert({"type": "contains", "value": "x", "transform": f"file://{tmp_path / 'none.py'}"})
    with pytest.raises(BatchInputError, match="transform: the code does not compile"):
        parse_assert({"type": "contains", "value": "x", "transform": "output.("})
    with pytest.raises(BatchInputError, match="transform must be JavaScript code or a file"):
        parse_assert({"type": "contains", "value": "x", "transform": 3})


CONFIG = textwrap.dedent("""\
    prompts: ['Tell me about {{topic}}']
    defaultTest:
      options:
        transform: output.trim()
    tests:
      - description: fruit
        vars: {topic: bananas, min_length: 10}
        assert:
          - type: javascript
            value: output.length >= context.vars.min_length && output.includes(context.vars.topic)
          - type: javascript
            value: file://checks.js:isYellow
            config: {colour: yellow}
          - type: python
            value: file://checks.py:mentions_topic
          - type: python
            value: output.lower().startswith('bananas')
          - type: equals
            value: BANANAS
            transform: output.split(' ')[0].toUpperCase()
      - description: shouting
        vars: {topic: apples}
        options:
          transform: file://shout.py
        assert:
          - type: starts-with
            value: APPLES
          - type: not-javascript
            value: |
              const lower = output.toLowerCase();
              return lower === output;
    """)


def test_a_promptfoo_config_with_script_asserts_and_transforms_on_fixed_outputs(tmp_path):
    (tmp_path / "checks.js").write_text("module.exports.isYellow = (output, context) =>\n"
                                        "  output.includes(context.config.colour);\n")
    (tmp_path / "checks.py").write_text(PROMPTFOO_EXAMPLE)
    (tmp_path / "shout.py").write_text("def get_transform(output, context):\n    return output.strip().upper()\n")
    _, rows, settings = read_config(CONFIG, tmp_path)
    assert [a.transform for a in rows[0].asserts][-1] == ("output.trim()", "output.split(' ')[0].toUpperCase()")
    assert rows[1].asserts[0].transform == (f"file://{tmp_path / 'shout.py'}",)  # the test's own replaces default
    assert [PromptRow.from_dict(r.to_dict()) for r in rows] == rows  # a stored run's rows keep config and transforms
    outputs = {0: "  bananas are yellow and sweet.  ", 1: " apples are red "}
    results = [result_for(c, Generated(outputs[c.row.index], "stop", 5, 6)) for c in plan(rows, settings)]
    assert [[a.passed for a in r.asserts] for r in results] == [[True] * 5, [True, True]]
    assert results[0].output == outputs[0]  # the stored output is the model's
    other = [result_for(c, Generated("I prefer cherries", "stop", 5, 3)) for c in plan(rows[:1], settings)]
    assert [a.passed for a in other[0].asserts] == [False, False, False, False, False]
    # an inline python check is written back inline, a file as file://
    assert promptfoo_assertion(rows[0].asserts[3])["value"] == "output.lower().startswith('bananas')"


@pytest.mark.parametrize("config, said", [
    ("tests:\n  - options: {provider: 'x'}", "tests[0].options.provider: not supported here (the judge is the run's: "
                                             "set it in defaultTest.options) (options here: prefix, suffix, transform"),
    ("tests:\n  - options: {other: 'x'}", "tests[0].options.other: not supported here (options here: prefix, "
                                          "suffix, transform, rubricPrompt, factuality; defaultTest's also "
                                          "provider)"),
    ("defaultTest:\n  options: [transform]", "defaultTest.options: must be a mapping"),
    ("tests:\n  - options: {transform: 'file://missing.py'}", "tests[0].options.transform: transform file://"),
    ("tests:\n  - assert:\n      - {type: contains, value: x, config: {a: 1}}", "unknown key(s) config"),
    ("tests:\n  - assert:\n      - {type: javascript, value: 'file://nothing.js'}", "there is no file"),
    ("tests:\n  - assert:\n      - {type: javascript, value: 'output.length <'}", "the code does not compile"),
])
def test_what_a_promptfoo_config_gets_wrong_is_named(config, said, tmp_path):
    with pytest.raises(BatchInputError) as info:
        read_config("prompts: ['x']\n" + config, tmp_path)
    assert said in str(info.value)
