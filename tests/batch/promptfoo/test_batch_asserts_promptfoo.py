"""promptfoo's deterministic assert kinds (#32): each passes and fails where promptfoo 0.115 does, thresholds at
their edges, and bad values are refused with a message. Expected metric values were computed by promptfoo 0.115's
own bleu.js and gleu.js and by js-rouge 3.2.1 (the version 0.115 installs) on the same texts."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.types import Observed
from webui.batch.promptfoo.reader import read_config
from webui.batch.asserts.rouge_tokens import sentences, treebank_tokens
from webui.batch.asserts.text_metrics import bleu, gleu, levenshtein, perplexity, rouge_n

# (output, references, promptfoo's BLEU, GLEU, ROUGE-N against the first reference)
PROMPTFOO_SCORES = [
    ("The cat sat on the mat.", ["The cat is on the mat."], 0.010573712634405643, 0.5, 0.8571428571428571),
    ("the quick brown fox jumps over the lazy dog",
     ["The quick brown fox jumped over the lazy dog.", "a fast brown fox leaps"],
     0.43167001068522526, 0.6666666666666666, 0.7368421052631579),
    ("Paris is the capital of France. It is big.", ["The capital of France is Paris."],
     0.006311969078225887, 0.4, 0.6666666666666666),
    ("Hello world", ["Hello world"], 0.00031622776601683783, 1.0, 1.0),
    ("I can't believe it's \"not\" butter, (really)!", ["I cannot believe it is not butter!"],
     0.000004111336169005192, 0.09090909090909091, 0.5),
    ("Yes", ["No way at all"], 2.1170000166126735e-7, 0.0, 0.0),
    ("It costs $5, or 3,000 yen; ok? Sure.", ["It costs $5 or 3,000 yen."],
     0.00019441308418139625, 0.23076923076923078, 0.761904761904762),
    ("Line one\nline two. Three", ["line one line two three"], 0.010745699318235422, 1.0, 0.5454545454545454),
    ("Mr. Smith went to Washington.", ["Smith went to Washington."], 0.668740304976422, 0.7142857142857143,
     0.9090909090909091),
    ("She said: 'go home' and left...", ["She said go home and left."],
     0.00000427287006396233, 0.2222222222222222, 0.625),
]


@pytest.mark.parametrize("output, references, want_bleu, want_gleu, want_rouge", PROMPTFOO_SCORES)
def test_the_metrics_give_promptfoos_numbers(output, references, want_bleu, want_gleu, want_rouge):
    assert bleu(output, references) == pytest.approx(want_bleu, rel=1e-12, abs=1e-15)
    assert gleu(output, references) == pytest.approx(want_gleu, rel=1e-12)
    assert rouge_n(output, references[0]) == pytest.approx(want_rouge, rel=1e-12)


def test_the_rouge_tokenizer_splits_as_the_penn_treebank_does():
    assert treebank_tokens("I can't go, (really) \"now\".") == \
        ["I", "ca", "n't", "go", ",", "(", "really", ")", "``", "now", "''", "."]
    assert sentences("One. Two!\nthree") == ["One.", "Two!", "three"]
    # as js-rouge 3.2.1 splits it: an honorific, e.g. and p.m. before a word do not end a sentence
    assert sentences("Dr. Smith came, e.g. Today. It was 3 p.m. and fine. see?") == \
        ["Dr. Smith came, e.g. Today.", "It was 3 p.m. and fine.", "see?"]


def check(spec: object, output: str, **seen: object) -> tuple[bool, str]:
    result = parse_assert(spec).check(Observed(output, **seen))  # type: ignore[arg-type]
    return result.passed, result.detail


def test_levenshtein_passes_up_to_the_threshold_distance_default_5():
    assert levenshtein("kitten", "sitting") == 3
    assert check("levenshtein:Paris", "Pariss!!!!")[0]  # distance 5: the default's edge, included
    assert check("levenshtein:Paris", "Pariss!!!!!") == (False, "edit distance 6 from the value, more than 5")
    assert check({"type": "levenshtein", "value": "Paris", "threshold": 0}, "Paris")[0]
    assert not check({"type": "levenshtein", "value": "Paris", "threshold": 0}, "paris")[0]
    assert check("not-levenshtein:Paris", "London and Berlin")[0]
    with pytest.raises(BatchInputError, match="threshold must be a number of characters of edit distance >= 0"):
        parse_assert({"type": "levenshtein", "value": "Paris", "threshold": -1})


def test_bleu_gleu_and_rouge_pass_at_their_thresholds_and_take_several_references():
    out, refs = PROMPTFOO_SCORES[1][0], PROMPTFOO_SCORES[1][1]
    assert not check({"type": "bleu", "value": refs}, out)[0]  # 0.43 < 0.5
    assert check({"type": "bleu", "value": refs, "threshold": 0.43}, out)[0]
    assert check({"type": "gleu", "value": refs}, out)[0]  # 0.67 >= 0.5
    assert not check({"type": "gleu", "value": refs, "threshold": 0.67}, out)[0]
    assert check({"type": "gleu", "value": "Hello world.", "threshold": 1}, "hello world")[0]  # dots and case
    assert check({"type": "gleu", "value": refs, "threshold": 2 / 3}, out)[0]  # score == threshold passes
    passed, detail = check("rouge-n:The cat is on the mat.", "The cat sat on the mat.")
    assert passed and detail == "ROUGE-1 against the reference (score 0.86, needs 0.75)"
    rouge_at = {"type": "rouge-n", "value": "The cat is on the mat.", "threshold": 0.86}
    assert not check(rouge_at, "The cat sat on the mat.")[0]
    negated = parse_assert("not-bleu:The cat is on the mat.").check("The cat sat on the mat.")
    assert negated.passed and negated.score == pytest.approx(1 - 0.010573712634405643)
    assert check('bleu:["a b c d", "e f"]', "a b c d")[0] and not check("bleu:x y", "")[0]
    with pytest.raises(BatchInputError, match="bleu needs a reference text or a list of them"):
        parse_assert({"type": "bleu", "value": [1, 2]})
    with pytest.raises(BatchInputError, match="rouge-n needs a non-empty text value"):
        parse_assert({"type": "rouge-n", "value": ""})


def test_is_sql_parses_in_the_dialect_and_holds_tables_and_columns_to_the_allowed_lists():
    assert check("is-sql", "SELECT id, name FROM users WHERE id = 1")[0]
    assert check("is-sql", "hello world") == (False, "SQL statement does not conform to the provided MySQL database "
                                                     "syntax")
    assert not check("is-sql", "SELECT id name FROM users")[0]  # promptfoo's own refusal of a missing comma
    assert check("is-sql", "")[0] and check("is-sql", "TRUNCATE TABLE t")[0]  # as node-sql-parser has it
    assert not check("is-sql", "SELECT FROM")[0] and not check("is-sql", "SELECT `id FROM t")[0]
    assert not check("is-sql", "SELECT * FROM generate_series(1, 3)")[0]
    assert check('is-sql:{"databaseType":"PostgreSQL"}', "SELECT * FROM generate_series(1, 3)")[0]
    tables = {"type": "is-sql", "value": {"allowedTables": ["select::null::users"]}}
    assert check(tables, "SELECT id FROM users")[0]
    passed, detail = check(tables, "SELECT id FROM orders")
    assert not passed and "authority = 'select::null::orders' is required in table whiteList" in detail
    columns = {"type": "is-sql", "value": {"allowedColumns": ["select::users::id", "select::users::name"]}}
    assert check(columns, "SELECT u.id, name FROM users u")[0]
    assert not check(columns, "SELECT id, password FROM users")[0]
    writes = {"type": "is-sql", "value": {"allowedColumns": ["update::null::name", "select::null::id"]}}
    assert check(writes, "UPDATE users SET name = 'a' WHERE id = 2")[0]
    assert not check(writes, "UPDATE users SET id = 3 WHERE name = 'a'")[0]
    assert not check(columns, "DELETE FROM users WHERE id = 1")[0]  # delete::users::(.*) is not allowed
    assert check("not-is-sql", "Paris is the capital")[0]
    assert check("contains-sql", "Here:\n```sql\nSELECT 1 FROM t\n```\nDone")[0]
    assert not check("contains-sql", "Here:\n```sql\nSELEKT 1\n```")[0]
    with pytest.raises(BatchInputError, match="unknown databaseType 'Cobol'"):
        parse_assert({"type": "is-sql", "value": {"databaseType": "Cobol"}})
    with pytest.raises(BatchInputError, match="the value must be an object with databaseType"):
        parse_assert({"type": "is-sql", "value": {"tables": []}})
    with pytest.raises(BatchInputError, match="is-sql: the value is not valid JSON"):
        parse_assert("is-sql:{databaseType")


def test_html_refusal_and_finish_reason():
    assert check("is-html", "<div><p>Hi</p></div>")[0]
    assert check("is-html", "Hello <b>there</b>") == (False, "Output must be wrapped in HTML tags")
    assert check("is-html", "<foo>x</foo>") == (False, "Output does not contain recognized HTML elements")
    assert not check("is-html", '<?xml version="1.0"?><a/>')[0] and not check("is-html", " ")[0]
    assert check("contains-html", "Sure: <p>Hi</p>")[0]
    assert not check("contains-html", "a < b and c > d")[0] and check("not-contains-html", "plain")[0]
    assert check("is-refusal", "I’m sorry, but I can’t help with that.")[0]  # curly apostrophes
    assert check("is-refusal", "Well... as an AI I will not")[0] and check("is-refusal", "  ")[0]
    assert check("is-refusal", "Paris is the capital of France.") == (False, "output is not a refusal")
    assert check("not-is-refusal", "Paris.")[0]
    assert check("finish-reason:STOP", "x", finish_reason="stop")[0]
    assert check("finish-reason:stop", "x", finish_reason="length") == \
        (False, "finish reason is 'length', expected 'stop'")
    assert check("finish-reason:stop", "x") == (False, "this row has no finish reason recorded")
    with pytest.raises(BatchInputError, match="is-refusal takes no value"):
        parse_assert("is-refusal:yes")


WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}}


def test_openai_tool_and_function_calls_are_checked_against_the_schemas():
    tools = {"type": "is-valid-openai-tools-call", "value": [{"type": "function", "function": WEATHER}]}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    assert check(tools, json.dumps([call]))[0] and check(tools, json.dumps({"tool_calls": [call]}))[0]
    wrong = {"type": "function", "function": {"name": "get_weather", "arguments": "{\"town\": 1}"}}
    passed, detail = check(tools, json.dumps([wrong]))
    assert not passed and detail.startswith("Call to \"get_weather\" does not match schema: 'city' is a required")
    assert check(tools, json.dumps([{"function": {"name": "other", "arguments": "{}"}}])) == \
        (False, "Called \"other\", but there is no function with that name")
    assert not check(tools, "[]")[0] and not check(tools, "not json")[0]
    assert not check(tools, json.dumps([{"function": {"name": "get_weather", "arguments": {"city": "x"}}}]))[0]
    functions = {"type": "is-valid-openai-function-call", "value": [WEATHER]}
    assert check(functions, json.dumps({"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}))[0]
    assert check(functions, json.dumps({"function_call": {"name": "get_weather", "arguments": "{\"city\": \"x\"}"}}))[0]
    assert not check(functions, json.dumps({"name": "get_weather", "arguments": "{}"}))[0]
    with pytest.raises(BatchInputError, match="is-valid-openai-function-call needs the functions it may call"):
        parse_assert({"type": "is-valid-openai-function-call", "value": {"name": "x"}})
    with pytest.raises(BatchInputError, match="the parameters of \"bad\" are not a valid JSON schema"):
        parse_assert({"type": "is-valid-openai-function-call", "value": [{"name": "bad", "parameters": {"type": 5}}]})


def test_word_count_takes_an_exact_number_or_an_inclusive_range():
    assert check("word-count:3", "one two three")[0] and not check("word-count:3", "one two")[0]
    assert check("word-count:2-3", "one two three")[0] and check("word-count:2-3", "one two")[0]
    assert check("word-count:2-3", "one") == (False, "output has 1 words, not between 2 and 3")
    assert check({"type": "word-count", "value": {"min": 2}}, "a b")[0]
    assert not check({"type": "word-count", "value": {"min": 2}}, "a")[0]
    assert check("word-count:-2", "a b")[0] and check("word-count:-2", "a b c") == \
        (False, "output has 3 words, more than 2")
    assert check("not-word-count:2-3", "a")[0]
    with pytest.raises(BatchInputError, match=r"word-count: the minimum \(5\) is more than the maximum \(2\)"):
        parse_assert("word-count:5-2")
    with pytest.raises(BatchInputError, match="word-count: unknown key"):
        parse_assert({"type": "word-count", "value": {"least": 2}})
    with pytest.raises(BatchInputError, match="word-count needs a number of words or a min and/or a max"):
        parse_assert({"type": "word-count", "value": {}})


def test_perplexity_needs_logprobs_and_holds_them_to_the_threshold():
    logprobs = (-1.0, -1.0)  # perplexity e
    assert perplexity(logprobs) == pytest.approx(2.718281828)
    assert check("perplexity", "x", logprobs=logprobs)[0]  # no threshold: promptfoo passes it
    assert check({"type": "perplexity", "threshold": 2.72}, "x", logprobs=logprobs)[0]
    passed, detail = check({"type": "perplexity", "threshold": 2.71}, "x", logprobs=logprobs)
    assert not passed and detail == "perplexity 2.72, more than 2.71"
    result = parse_assert({"type": "perplexity-score", "threshold": 0.26}).check(Observed("x", logprobs=logprobs))
    assert result.passed and result.score == pytest.approx(1 / (1 + 2.718281828))
    above = parse_assert({"type": "perplexity-score", "threshold": 0.27})
    assert not above.check(Observed("x", logprobs=logprobs)).passed
    passed, detail = check("perplexity-score", "x")
    assert not passed and "this row has no token logprobs" in detail


def test_promptfoo_configs_map_the_new_kinds(tmp_path):
    (tmp_path / "tools.json").write_text(json.dumps([{"type": "function", "function": WEATHER}]))
    config = """prompts: ['{{q}}']
tests:
  - vars: {q: hi}
    assert:
      - {type: levenshtein, value: Paris, threshold: 2}
      - {type: bleu, value: [a cat, the cat], threshold: 0.3}
      - {type: is-sql, value: {databaseType: PostgreSQL}}
      - {type: not-is-refusal}
      - {type: word-count, value: {min: 1, max: 9}}
      - {type: perplexity, threshold: 12}
      - {type: is-valid-openai-tools-call, value: file://tools.json}
"""
    _, rows, _ = read_config(config, tmp_path)
    labels = [a.label for a in rows[0].asserts]
    assert labels[:6] == ["levenshtein:Paris", 'bleu:["a cat", "the cat"]', 'is-sql:{"databaseType":"PostgreSQL"}',
                          "not-is-refusal", "word-count:1-9", "perplexity"]
    assert rows[0].asserts[0].pass_at == 2 and rows[0].asserts[5].pass_at == 12
    assert rows[0].asserts[6].kind == "is-valid-openai-tools-call"
    with pytest.raises(BatchInputError, match=r"rouge-n needs one reference text as its value, got \['a', 'b'\]"):
        read_config(config.replace("{type: not-is-refusal}", "{type: rouge-n, value: [a, b]}"), tmp_path)
    with pytest.raises(BatchInputError, match="needs the tools as its value here"):
        read_config(config.replace("value: file://tools.json", "threshold: 1"), tmp_path)
