"""Asserts with scores, weights, thresholds and not-; similarity, python, timing, and $ref schemas."""

from __future__ import annotations

import json

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.types import AssertResult, Observed, row_score
from webui.batch.asserts.kinds import similarity
from webui.batch.run.results import wilson
from webui.embeddings import TextEmbeddings


def test_similarity_is_a_cosine_of_character_trigrams():
    assert similarity("The capital is Paris.", "the  capital is PARIS.") == pytest.approx(1.0)
    assert similarity("The capital is Paris.", "Bananas are yellow") < 0.2
    close = similarity("The capital of France is Paris.", "Paris is the capital of France.")
    assert 0.6 < close < 1.0


def test_similar_passes_at_its_threshold_and_not_inverts_it():
    item = parse_assert("similar:The capital of France is Paris.")
    good = item.check("The capital of France is Paris!")
    assert good.passed and good.score > 0.9 and good.detail.startswith("trigram overlap, no embedding model")
    bad = item.check("I like trains.")
    assert not bad.passed and "needs 0.75" in bad.detail
    strict = parse_assert({"type": "similar", "value": "Paris", "threshold": 0.99})
    assert not strict.check("Paris.").passed
    negated = parse_assert("not-similar:The capital of France is Paris.")
    assert negated.check("I like trains.").passed and not negated.check("The capital of France is Paris").passed
    assert negated.check("I like trains.").score == pytest.approx(1 - bad.score)


def test_similar_takes_the_cosine_of_the_embeddings_the_runner_handed_in():
    reference, output = "The capital of France is Paris.", "Paris is France's capital."
    vectors = TextEmbeddings("emb-model", {output: (0.6, 0.8), reference: (1.0, 0.0), "far": (-1.0, 0.0)})
    item = parse_assert(f"similar:{reference}")
    near = item.check(Observed(output, embeddings=vectors))
    assert near.score == pytest.approx(0.6) and not near.passed  # promptfoo's default threshold: 0.75
    assert near.detail == "cosine of embeddings from emb-model (score 0.60, needs 0.75)"
    assert parse_assert({"type": "similar", "value": reference, "threshold": 0.5}).check(
        Observed(output, embeddings=vectors)).passed
    assert item.check(Observed("far", embeddings=vectors)).score == 0.0  # a negative cosine scores 0
    missing = item.check(Observed("never embedded", embeddings=vectors))
    assert missing.detail.startswith("trigram overlap (emb-model did not embed this text)")
    assert missing.score == pytest.approx(similarity("never embedded", reference))


@pytest.mark.parametrize("spec, output, passed", [
    ("not-regex:^\\s*$", "text", True), ("not-regex:^\\s*$", "  ", False), ("not-is-json", "{}", False),
    ("not-is-json", "hello", True), ("not-max-length:3", "abcd", True), ("not-icontains:PARIS", "paris", False),
])
def test_not_before_any_kind_inverts_it(spec, output, passed):
    item = parse_assert(spec)
    result = item.check(output)
    assert result.passed is passed and item.label == spec and (passed or "the output passes" in result.detail)
    assert parse_assert(item.to_dict()) == item


def test_weights_and_thresholds_round_trip_and_make_the_row_score():
    items = [parse_assert({"type": "contains", "value": "Paris", "weight": 3}),
             parse_assert({"type": "similar", "value": "Paris is the capital", "weight": 1, "threshold": 0.5})]
    assert [parse_assert(i.to_dict()) for i in items] == items
    results = [i.check("Paris is the capital.") for i in items]
    assert row_score(results) == pytest.approx((3 * 1.0 + results[1].score) / 4)
    assert row_score([]) is None and row_score([AssertResult(False, "x", "contains:a", None, 2.0)]) == 0
    for bad, said in (({"type": "contains", "value": "a", "weight": -1}, "weight must be a number >= 0"),
                      ({"type": "similar", "value": "a", "threshold": 2}, "threshold must be a score between 0 and 1"),
                      ({"type": "contains", "value": "a", "limit": 2}, "unknown key")):
        with pytest.raises(BatchInputError, match=said):
            parse_assert(bad)


def test_timing_asserts_read_the_rows_timing():
    seen = Observed("hi", completion_tokens=10, ttft=0.2, tokens_per_second=5.0)  # 0.2 s + 10 / 5 s = 2.2 s
    assert parse_assert("latency:2500").check(seen).passed and not parse_assert("latency:2000").check(seen).passed
    assert "took 2200 ms, more than 2000 ms" in parse_assert("latency:2000").check(seen).detail
    assert parse_assert("ttft:300").check(seen).passed and not parse_assert("ttft:100").check(seen).passed
    assert parse_assert("tokens-per-second:4").check(seen).passed
    assert "no timing recorded" in parse_assert("ttft:300").check(Observed("hi")).detail
    with pytest.raises(BatchInputError, match="latency needs a number of milliseconds"):
        parse_assert("latency:soon")


CHECKS = '''
import json, time

def get_assert(output, context):
    return {"pass": "Paris" in output, "score": 0.8 if "Paris" in output else 0.1, "reason": "looked for Paris"}

def as_bool(output, context):
    return output.startswith(context["prompt"][:1])

def as_score(output, context):
    return len(output) / 10

def broken(output, context):
    raise ValueError("no idea")

def slow(output, context):
    time.sleep(5)
    return True

def odd(output, context):
    return "yes"
'''


def test_python_asserts_run_a_function_from_a_file_in_another_process(tmp_path):
    path = tmp_path / "checks.py"
    path.write_text(CHECKS)
    good = parse_assert(f"python:{path}").check(Observed("It is Paris.", prompt="Where?"))
    assert good == AssertResult(True, "looked for Paris", f"python:{path}", 0.8)  # its own pass decides
    assert not parse_assert(f"python:{path}").check("Lyon").passed
    assert parse_assert(f"python:{path}:as_bool").check(Observed("Wow", prompt="What?")).passed
    assert parse_assert(f"python:{path}:as_score").check("123456").score == pytest.approx(0.6)
    assert not parse_assert({"type": "python", "value": f"{path}:as_score", "threshold": 0.7}).check("123456").passed
    broken = parse_assert(f"python:{path}:broken").check("x")
    assert not broken.passed and "checks.py:broken failed: ValueError: no idea" in broken.detail
    slow = parse_assert({"type": "python", "value": f"{path}:slow", "timeout": 0.5}).check("x")
    assert not slow.passed and "took more than 0.5 s and was stopped" in slow.detail
    odd = parse_assert(f"python:{path}:odd").check("x")
    assert not odd.passed and "must return true/false, a score" in odd.detail
    with pytest.raises(BatchInputError, match="there is no file"):
        parse_assert(f"python:{tmp_path / 'missing.py'}")


def test_a_schema_with_ref_is_followed_and_the_failing_path_is_named():
    schema = {"$defs": {"city": {"type": "object", "properties": {"name": {"type": "string"}},
                                 "required": ["name"]}},
              "type": "object", "properties": {"cities": {"type": "array", "items": {"$ref": "#/$defs/city"}}}}
    item = parse_assert({"type": "is-json", "schema": schema})
    assert item.check(json.dumps({"cities": [{"name": "Paris"}]})).passed
    bad = item.check(json.dumps({"cities": [{"name": "Paris"}, {"name": 3}]}))
    assert not bad.passed and "(at $.cities[1].name)" in bad.detail


def test_wilson_interval():
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.490, abs=0.002) and high == pytest.approx(0.943, abs=0.002)
    assert wilson(0, 5)[0] == 0 and wilson(5, 5)[1] == 1


def test_a_weight_0_assert_only_measures_and_never_fails_as_in_promptfoo():
    result = parse_assert({"type": "contains", "value": "Paris", "weight": 0}).check("Lyon")
    assert result.passed and result.score is None and result.value == 1.0
    assert result.detail == "weight 0, counted as passed: output does not contain 'Paris'"
    assert row_score([result, parse_assert("contains:Lyon").check("Lyon")]) == 1.0


@pytest.mark.parametrize("output", ["NaN", '{"a": Infinity}', "-Infinity"])
def test_is_json_refuses_pythons_nan_and_infinity_which_json_has_not(output):
    result = parse_assert("is-json").check(output)
    assert not result.passed and "is not JSON" in result.detail
    assert not parse_assert("contains-json").check(f"x {output} y").passed


def test_python_scores_and_thresholds_as_promptfoo_reads_them(tmp_path):
    path = tmp_path / "scores.py"
    path.write_text("def low(output, context):\n    return 0.2\n\ndef zero(output, context):\n    return 0\n\n"
                    "def graded(output, context):\n    return {'pass': True, 'score': 0.6, 'reason': 'fine'}\n\n"
                    "def text(output, context):\n    return output\n")
    low = parse_assert(f"python:{path}:low").check("x")
    assert low.passed and low.score == pytest.approx(0.2) and "needs more than 0" in low.detail  # no threshold: > 0
    assert not parse_assert(f"python:{path}:zero").check("x").passed
    assert not parse_assert({"type": "python", "value": f"{path}:low", "threshold": 0.5}).check("x").passed
    assert parse_assert({"type": "python", "value": f"{path}:graded"}).check("x").passed
    graded = parse_assert({"type": "python", "value": f"{path}:graded", "threshold": 0.7}).check("x")
    assert not graded.passed and graded.detail == "fine (score 0.60, needs 0.7)"
    assert parse_assert(f"python:{path}:text").check("TRUE").passed  # promptfoo reads "true"/"false" as bools
    assert not parse_assert(f"python:{path}:text").check("false").passed
