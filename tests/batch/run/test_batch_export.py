"""Batch results: result rows from cells, summaries, pivot, compare, and lossless CSV/JSONL round trips."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webui.batch.run.grid import GridSpec, expand, plan
from webui.batch.run.results import Generated, ResultRow, compare, pivot, result_for, summarize
from webui.batch.run.export import from_csv, from_jsonl, to_csv, to_jsonl, CSV_COLUMNS
from webui.batch.run.prompts import load_prompts_text
from webui.batch.asserts.types import AssertResult
from webui.batch.asserts.errors import BatchInputError
from webui.engine.params import SamplingParams
from webui.presets import PresetStore


@pytest.fixture
def cells(tmp_path: Path):
    rows = load_prompts_text("q.csv", "id,prompt,assert\ncap,Capital of France?,contains:Paris\nfree,Say anything,\n")
    settings_ = expand(GridSpec(["Deterministic", "Creative"], {}), PresetStore(tmp_path / "presets"))
    return plan(rows, settings_, samples=2, base_seed=5, max_cells=100)


def _result(cell, output, tps=10.0, ttft=0.1, error=None):
    return result_for(cell, Generated(output, "stop" if error is None else "error", 7, len(output.split()),
                                      ttft=ttft, tokens_per_second=tps, error=error))


def _run(cells, outputs):
    return [_result(cell, out) for cell, out in zip(cells, outputs)]


def sample_rows() -> list[ResultRow]:
    params = SamplingParams(temperature=0.7, stop=("###", "\n\n"), logit_bias={5: -100.0}).to_dict()
    return [
        ResultRow(0, "cap", "Capital of France?\nOne word.", "Precise · temperature=0.7", params, 0, 5,
                  'Paris, "obviously"\r\nNew line, comma; and a tab\t.', "stop", 12, 8, 0.0123456789, 42.123456789012,
                  [AssertResult(True, "", "contains:Paris"),
                   AssertResult(False, "output has 8 tokens, more than 5", "max-length:5 tokens")], False, None),
        ResultRow(1, "=cmd", "-2+3", "=SUM(A1)", {}, 1, 6, "=HYPERLINK(\"x\")", "length", 3, 0, None, None, [],
                  None, "generation failed: boom, again\nline 2"),
        ResultRow(2, "'quoted", "@at", "+plus", {"temperature": 1.0}, 0, 0, "'=already", "stop", 1, 1, 1e-300,
                  float("1.7976931348623157e308"), [], True, None),
        ResultRow(3, "ü", "日本語 🤖", "ö", {}, 0, 0, "", "stop", 0, 0, 0.5, 3.0, [], None, None),
    ]


# -- result rows ----------------------------------------------------------------------

def test_result_for_checks_asserts_and_copies_cell_fields(cells):
    first = cells[0]
    row = _result(first, "It is Paris.")
    assert (row.prompt_index, row.prompt_id, row.prompt, row.setting) == (0, "cap", "Capital of France?",
                                                                          "Deterministic")
    assert (row.sample, row.seed, row.params["seed"], row.params["temperature"]) == (0, 5, 5, 0.0)
    assert row.passed is True and row.asserts == [AssertResult(True, "", "contains:Paris")]
    failed = _result(first, "Lyon")
    assert failed.passed is False and failed.asserts[0].detail == "output does not contain 'Paris'"
    no_asserts = _result(cells[2], "whatever")
    assert no_asserts.prompt_id == "free" and no_asserts.passed is None and no_asserts.asserts == []


def test_result_for_error_fails_without_running_asserts(cells):
    row = _result(cells[0], "", error="out of memory")
    assert row.passed is False and row.asserts == [] and row.error == "out of memory"
    assert _result(cells[2], "", error="boom").passed is None
    assert _result(cells[0], "Paris", error="").error is None


# -- summaries ------------------------------------------------------------------------

def test_summarize_pass_rates_and_means(cells):
    # cells: Deterministic x (cap s0, cap s1, free s0, free s1), then Creative x the same
    outputs = ["Paris", "Paris", "a", "b", "Paris", "Lyon", "c", "d"]
    rows = _run(cells, outputs)
    rows[7] = _result(cells[7], "", tps=None, ttft=None, error="boom")
    rows[4] = _result(cells[4], "Paris", tps=30.0, ttft=0.3)
    det, cre = summarize(rows)
    assert (det.label, det.rows, det.passed, det.failed, det.pass_rate, det.errors) == ("Deterministic", 4, 2, 0,
                                                                                       1.0, 0)
    assert det.mean_tokens_per_second == pytest.approx(10.0) and det.mean_ttft == pytest.approx(0.1)
    assert (cre.passed, cre.failed, cre.pass_rate, cre.errors) == (1, 1, 0.5, 1)
    assert cre.mean_tokens_per_second == pytest.approx((30 + 10 + 10) / 3)
    assert cre.mean_ttft == pytest.approx((0.3 + 0.1 + 0.1) / 3)


def test_summarize_without_asserts_has_no_pass_rate(cells):
    rows = _run([c for c in cells if c.row.id == "free"], ["x"] * 4)
    assert [s.pass_rate for s in summarize(rows)] == [None, None]
    assert summarize([]) == []


def test_pivot_joins_samples_in_order(cells):
    rows = _run(cells, ["P0", "P1", "F0", "F1", "Q0", "Q1", "G0", "G1"])
    rows[6] = _result(cells[6], "", error="boom")
    prompts, setting_labels, matrix = pivot(list(reversed(rows)), separator=" | ")
    assert prompts == ["cap: Capital of France?", "free: Say anything"]
    assert setting_labels == ["Creative", "Deterministic"]  # first appearance in the rows given
    assert matrix == [["Q0 | Q1", "P0 | P1"], ["[error: boom] | G1", "F0 | F1"]]


def test_pivot_missing_cell_is_empty(cells):
    rows = _run(cells[:3], ["a", "b", "c"])
    _, _, matrix = pivot(rows)
    assert matrix == [["a\n\n---\n\nb"], ["c"]]


def test_compare_by_prompt_and_sample(cells):
    rows = _run(cells, ["Paris", "Paris", "a", "b", "Paris", "Lyon", "a", "c"])
    det = [r for r in rows if r.setting == "Deterministic"]
    cre = [r for r in rows if r.setting == "Creative"]
    result = compare(det, cre[:3])
    assert [(c.prompt, c.sample, c.output_a, c.output_b, c.same) for c in result] == [
        ("Capital of France?", 0, "Paris", "Paris", True),
        ("Capital of France?", 1, "Paris", "Lyon", False),
        ("Say anything", 0, "a", "a", True),
        ("Say anything", 1, "b", None, False),
    ]
    prompt, sample, a, b, same = result[0]
    assert same and sample == 0


def test_compare_rejects_several_settings_on_one_side(cells):
    rows = _run(cells, ["x"] * 8)
    with pytest.raises(BatchInputError, match="compare: side a has two rows for prompt cap, sample 0 .*"
                                              "pass one setting's rows"):
        compare(rows, rows[:1])


# -- export ---------------------------------------------------------------------------

def test_jsonl_round_trip_and_format():
    rows = sample_rows()
    text = to_jsonl(rows)
    assert text.count("\n") == len(rows) and "日本語" in text
    first = json.loads(text.splitlines()[0])
    assert first["asserts"][1] == {"label": "max-length:5 tokens", "passed": False,
                                   "detail": "output has 8 tokens, more than 5"}
    assert first["params"]["stop"] == ["###", "\n\n"]
    assert from_jsonl(text) == rows
    assert from_jsonl(text.replace("\n", "\r\n")) == rows


def test_csv_round_trip_and_columns():
    rows = sample_rows()
    text = to_csv(rows)
    assert from_csv(text) == rows
    table = list(csv.DictReader(io.StringIO(text, newline="")))
    assert tuple(table[0]) == CSV_COLUMNS
    assert table[0]["passed"] == "false" and table[1]["passed"] == "" and table[2]["passed"] == "true"
    assert table[0]["asserts"] == ("PASS contains:Paris\n"
                                   "FAIL max-length:5 tokens: output has 8 tokens, more than 5")
    assert json.loads(table[0]["params"])["temperature"] == 0.7
    assert table[0]["ttft"] == "0.0123456789" and table[1]["ttft"] == ""


def test_csv_neutralises_formulas_but_round_trips():
    table = list(csv.DictReader(io.StringIO(to_csv(sample_rows()), newline="")))
    assert table[1]["output"] == "'=HYPERLINK(\"x\")"
    assert table[1]["setting"] == "'=SUM(A1)" and table[1]["prompt"] == "'-2+3"
    assert table[2]["output"] == "''=already" and table[2]["prompt_id"] == "''quoted"
    assert table[2]["prompt"] == "'@at" and table[2]["setting"] == "'+plus"
    assert table[3]["prompt"] == "日本語 🤖"


def test_csv_from_excel_with_bom_and_extra_columns():
    text = to_csv(sample_rows()[:1])
    header, rest = text.split("\r\n", 1)
    edited = "\ufeff" + header + ",my notes\r\n" + rest.rstrip("\r\n") + ",looks fine\r\n"
    assert from_csv(edited) == sample_rows()[:1]


@pytest.mark.parametrize("mutate, message", [
    (lambda t: "", "the CSV is empty"),
    (lambda t: t.replace("prompt_index,", "index,", 1), r"lacks the column\(s\) prompt_index"),
    (lambda t: t.replace("\r\n0,", "\r\nzero,", 1), r"row 1: invalid literal for int\(\)"),
    (lambda t: t.replace(",false,", ",maybe,", 1), "row 1: passed must be true, false or empty, got 'maybe'"),
    (lambda t: t + "1,2\r\n", "row 5 has 2 cells but the header has"),
])
def test_csv_import_errors(mutate, message):
    with pytest.raises(BatchInputError, match=message):
        from_csv(mutate(to_csv(sample_rows())))


@pytest.mark.parametrize("text, message", [
    ("{bad\n", r"line 1: not valid JSON"),
    ("[1]\n", "line 1: expected a JSON object, got list"),
    ('{"prompt_index": 0}\n', r"line 1: missing field\(s\) prompt_id, prompt"),
])
def test_jsonl_import_errors(text, message):
    with pytest.raises(BatchInputError, match=message):
        from_jsonl(text)


def test_jsonl_import_checks_types():
    data = sample_rows()[0].to_dict()
    for key, bad, message in [("seed", "5", "seed has the wrong type"), ("passed", 1, "passed has the wrong type"),
                              ("asserts", [{"label": "x", "passed": "yes"}], "asserts must be a list of")]:
        broken = dict(data, **{key: bad})
        with pytest.raises(BatchInputError, match=f"line 1: {message}"):
            from_jsonl(json.dumps(broken))


# -- property: arbitrary unicode survives both formats ----------------------------------

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_float = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
_assert = st.builds(lambda passed, detail, label: AssertResult(passed, "" if passed else detail, label),
                    st.booleans(), _text, _text)
_row = st.builds(
    ResultRow,
    prompt_index=st.integers(0, 10**6), prompt_id=_text, prompt=_text, setting=_text,
    params=st.dictionaries(st.sampled_from(["temperature", "top_p", "stop"]),
                           st.one_of(st.floats(allow_nan=False, allow_infinity=False), _text)),
    sample=st.integers(0, 1000), seed=st.integers(0, 2**63 - 1), output=_text, finish_reason=_text,
    prompt_tokens=st.integers(0, 10**6), completion_tokens=st.integers(0, 10**6), ttft=_float,
    tokens_per_second=_float, asserts=st.lists(_assert, max_size=3), passed=st.one_of(st.none(), st.booleans()),
    error=st.one_of(st.none(), _text.filter(bool)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_row, max_size=4))
def test_round_trips_lose_nothing(rows):
    assert from_jsonl(to_jsonl(rows)) == rows
    assert from_csv(to_csv(rows)) == rows


def test_rows_stored_before_cached_tokens_existed_still_load():
    rows = [dataclasses.replace(r, cached_tokens=32) for r in sample_rows()]
    assert from_jsonl(to_jsonl(rows)) == rows and from_csv(to_csv(rows)) == rows
    old_lines = []
    for line in to_jsonl(rows).splitlines():
        data = json.loads(line)
        del data["cached_tokens"]
        old_lines.append(json.dumps(data))
    assert all(r.cached_tokens == 0 for r in from_jsonl("\n".join(old_lines)))
    table = list(csv.reader(io.StringIO(to_csv(rows))))
    column = table[0].index("cached_tokens")
    buffer = io.StringIO()
    csv.writer(buffer).writerows([c for i, c in enumerate(r) if i != column] for r in table)
    old_csv = buffer.getvalue()
    assert all(r.cached_tokens == 0 for r in from_csv(old_csv))


def test_rows_say_their_loader_and_load_options_in_both_formats_and_older_exports_still_load():
    rows = [dataclasses.replace(r, model="SmolLM2-135M-Instruct@llamacpp", loader="llamacpp",
                                load_options={"n_ctx": 4096, "cache_type": "q8_0"}) for r in sample_rows()]
    table = list(csv.DictReader(io.StringIO(to_csv(rows), newline="")))
    assert table[0]["model"] == "SmolLM2-135M-Instruct@llamacpp" and table[0]["loader"] == "llamacpp"
    assert json.loads(table[0]["load_options"]) == {"n_ctx": 4096, "cache_type": "q8_0"}
    first = json.loads(to_jsonl(rows).splitlines()[0])
    assert first["loader"] == "llamacpp" and first["load_options"] == {"n_ctx": 4096, "cache_type": "q8_0"}
    assert from_csv(to_csv(rows)) == rows and from_jsonl(to_jsonl(rows)) == rows
    old = list(csv.reader(io.StringIO(to_csv(rows))))  # a CSV exported before rows kept their loader
    gone = {old[0].index("loader"), old[0].index("load_options")}
    buffer = io.StringIO()
    csv.writer(buffer).writerows([c for i, c in enumerate(r) if i not in gone] for r in old)
    assert all(r.loader is None and r.load_options is None for r in from_csv(buffer.getvalue()))
    lines = [json.dumps({k: v for k, v in json.loads(line).items() if k not in ("loader", "load_options")})
             for line in to_jsonl(rows).splitlines()]
    assert all(r.loader is None and r.load_options is None for r in from_jsonl("\n".join(lines)))
