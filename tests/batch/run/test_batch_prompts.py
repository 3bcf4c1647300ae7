"""Batch prompt loading: .txt/.csv/.jsonl files and uploads, templating, and every bad input's message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webui.batch.run.prompts import (
    PromptRow, load_prompts, load_prompts_text, parse_lines, render, rows_from_texts, template_variables,
    unescape_newlines,
)
from webui.batch.asserts.assertion import Assert
from webui.batch.asserts.errors import BatchInputError


# -- .txt / plain lines ---------------------------------------------------------------

def test_lines_skip_blanks_and_strip():
    rows = parse_lines("What is 2+2?\n\n   \n  Name a colour.  \r\n")
    assert [r.text for r in rows] == ["What is 2+2?", "Name a colour."]
    assert [r.index for r in rows] == [0, 1]
    assert [r.id for r in rows] == ["1", "2"]
    assert rows[0].variables == {"prompt": "What is 2+2?"} and rows[0].asserts == []


def test_literal_backslash_n_is_a_newline_and_double_backslash_a_backslash():
    rows = parse_lines(r"Line one\nLine two" + "\n" + r"C:\\new" + "\n" + r"regex \d stays")
    assert rows[0].text == "Line one\nLine two"
    assert rows[1].text == "C:\\new"
    assert rows[2].text == "regex \\d stays"
    assert unescape_newlines(r"a\nb\\nc") == "a\nb\\nc"


def test_txt_file_with_template_uses_prompt_variable(tmp_path: Path):
    path = tmp_path / "qs.txt"
    path.write_text("Paris\nRome\n", encoding="utf-8")
    rows = load_prompts(path, template="Which country has {{ prompt }} as capital?")
    assert [r.text for r in rows] == ["Which country has Paris as capital?", "Which country has Rome as capital?"]


def test_txt_template_with_other_variable_says_only_prompt_exists():
    with pytest.raises(BatchInputError, match=r"line 2: the template uses \{\{city\}\}, but the row has no 'city' "
                                              r"variable; variables: prompt"):
        parse_lines("\nParis", template="{{city}}")


def test_empty_text_is_an_error():
    with pytest.raises(BatchInputError, match="no prompts"):
        parse_lines("\n  \n")


def test_txt_file_with_bom_and_crlf(tmp_path: Path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffHéllo\r\nWörld\r\n".encode("utf-8"))
    assert [r.text for r in load_prompts(path)] == ["Héllo", "Wörld"]


# -- .csv -----------------------------------------------------------------------------

def test_csv_prompt_column_with_asserts_expected_and_id(tmp_path: Path):
    path = tmp_path / "qs.csv"
    path.write_text('id,prompt,assert,expected\n'
                    'cap,"What is the capital of France?","icontains:paris\nmax-length:50 tokens",Paris\n'
                    'sum,"Add 2 and 2, please",,regex:^\\s*4\n', encoding="utf-8")
    rows = load_prompts(path)
    assert [r.id for r in rows] == ["cap", "sum"]
    assert rows[1].text == "Add 2 and 2, please"
    assert rows[0].asserts == [Assert("icontains", "paris"), Assert("max-length", 50, {"unit": "tokens"}),
                               Assert("contains", "Paris")]
    assert rows[1].asserts == [Assert("regex", r"^\s*4")]
    assert rows[0].variables == {"id": "cap", "prompt": "What is the capital of France?"}


def test_csv_numbered_assert_columns_and_newlines_in_cells():
    rows = load_prompts_text("x.csv", 'prompt,assert1,assert_2\n"two\nlines",contains:a,starts-with:The\n')
    assert rows[0].text == "two\nlines"
    assert [a.kind for a in rows[0].asserts] == ["contains", "starts-with"]


def test_csv_template_from_columns():
    rows = load_prompts_text("people.csv", "name,country\nAda,England\nAlan,England\n",
                             template="Write a short bio of {{name}} from {{ country }}.")
    assert rows[0].text == "Write a short bio of Ada from England."
    assert rows[1].variables == {"name": "Alan", "country": "England"}


def test_csv_template_wraps_prompt_column():
    rows = load_prompts_text("p.csv", "prompt\nhi\n", template="User: {{prompt}}\nAssistant:")
    assert rows[0].text == "User: hi\nAssistant:"


def test_csv_undefined_template_variable_names_row_and_columns():
    with pytest.raises(BatchInputError) as info:
        load_prompts_text("cities.csv", "name,country\nA,B\nC,D\nE,F\n", template="{{name}} lives in {{city}}")
    assert str(info.value) == ("cities.csv: row 1: the template uses {{city}}, but the row has no 'city' column; "
                               "columns: name, country")


def test_csv_without_prompt_column_lists_columns():
    with pytest.raises(BatchInputError, match=r"no 'prompt' column and no template was given; columns: name, country"):
        load_prompts_text("a.csv", "name,country\nA,B\n")


@pytest.mark.parametrize("content, message", [
    ("", "the CSV file is empty"),
    ("prompt\n", "no prompts: the CSV has a header but no rows"),
    ("prompt,prompt\na,b\n", "names the column 'prompt' twice"),
    ("prompt,\na,b\n", "empty column name"),
    ("prompt\nok\n\"a\",b,c\n", "row 2 has 3 cells but the header has 1 columns"),
    ("prompt,other\n ,x\n", "row 1: the prompt is empty"),
    ("prompt,assert\nhi,regex:(\n", r"row 1: regex:\(: invalid regular expression"),
    ("prompt,assert\nhi,foo:bar\n", "row 1: unknown assert 'foo:bar'"),
    ("id,prompt\nq,a\nq,b\n", "prompt 2: id 'q' is already used by prompt 1"),
    ('prompt\n"unterminated\n', "not valid CSV"),
])
def test_csv_errors(content, message):
    with pytest.raises(BatchInputError, match=message):
        load_prompts_text("bad.csv", content)


def test_csv_short_rows_are_padded_and_blank_rows_skipped():
    rows = load_prompts_text("a.csv", "prompt,note\nhello\n,\n\nbye,x\n")
    assert [r.text for r in rows] == ["hello", "bye"]
    assert rows[0].variables == {"prompt": "hello", "note": ""}


# -- .jsonl ---------------------------------------------------------------------------

def test_jsonl_prompts_asserts_and_ids(tmp_path: Path):
    path = tmp_path / "q.jsonl"
    lines = [
        {"id": "a", "prompt": "Give JSON", "asserts": ["is-json", {"type": "is-json", "schema": {"type": "object"}}]},
        {"prompt": "Say hi", "asserts": "starts-with:Hi", "expected": ["hello", "not-contains:bye"]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    rows = load_prompts(path)
    assert [r.id for r in rows] == ["a", "2"]
    assert rows[0].asserts == [Assert("is-json"), Assert("is-json", '{"type":"object"}')]
    assert rows[1].asserts == [Assert("starts-with", "Hi"), Assert("contains", "hello"),
                               Assert("not-contains", "bye")]


def test_jsonl_variables_with_template_including_vars_and_numbers():
    content = '{"city": "Oslo", "vars": {"n": 3}}\n{"city": "Lima", "n": 2.5, "flag": true}\n'
    rows = load_prompts_text("c.jsonl", content, template="{{n}} facts about {{city}}")
    assert [r.text for r in rows] == ["3 facts about Oslo", "2.5 facts about Lima"]
    assert rows[1].variables["flag"] == "true"


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "ok"}\n{"prompt": "x",}\n', r"line 2: not valid JSON"),
    ('["a"]\n', r"line 1: each line must be a JSON object"),
    ('{"text": "hi"}\n', r"line 1: the object has no \"prompt\" \(or \"messages\": a chat\) key and no template was given; "
                            r"keys: text"),
    ('{"prompt": "hi", "asserts": [{"type": "contains"}]}\n', r"line 1: contains needs a \"value\""),
    ('{"prompt": "hi", "asserts": [{"type": "nope", "value": 1}]}\n', r"line 1: .*needs \"type\" set to one of"),
    ('{"prompt": "hi", "asserts": [5]}\n', r"line 1: an assert must be a string"),
    ("\n\n", "no prompts: the JSONL file has no objects"),
])
def test_jsonl_errors(content, message):
    with pytest.raises(BatchInputError, match=message):
        load_prompts_text("bad.jsonl", content)


def test_jsonl_template_error_says_key():
    with pytest.raises(BatchInputError, match=r"line 1: the template uses \{\{city\}\}, but the row has no 'city' key; "
                                              r"keys: name"):
        load_prompts_text("a.jsonl", '{"name": "x"}\n', template="{{city}}")


# -- uploads, files, suffixes ---------------------------------------------------------

def test_upload_bytes_and_str_give_the_same_rows():
    content = "prompt,expected\nWhat is 2+2?,4\n"
    assert load_prompts_text("u.csv", content.encode()) == load_prompts_text("u.CSV", content)


def test_upload_not_utf8():
    with pytest.raises(BatchInputError, match="u.txt: not UTF-8 text"):
        load_prompts_text("u.txt", b"\xff\xfe\x00bad")


@pytest.mark.parametrize("name", ["prompts.md", "prompts", "data.json"])
def test_unsupported_suffix_lists_formats(name):
    with pytest.raises(BatchInputError, match=r"unsupported prompt file type .*use \.txt, \.csv, \.jsonl"):
        load_prompts_text(name, "hi")


def test_missing_file(tmp_path: Path):
    with pytest.raises(BatchInputError, match="does not exist"):
        load_prompts(tmp_path / "nope.txt")


def test_rows_from_texts_keeps_text_verbatim():
    rows = rows_from_texts(["a\\nb", "c"])
    assert rows[0].text == "a\\nb" and rows[1].id == "2"
    with pytest.raises(BatchInputError, match="prompt 2 is empty"):
        rows_from_texts(["a", " "])
    with pytest.raises(BatchInputError, match="no prompts"):
        rows_from_texts([])


# -- templating -----------------------------------------------------------------------

def test_render_allows_whitespace_and_repeats():
    assert render("{{a}}-{{  a  }}-{{b}}", {"a": "1", "b": "{{a}}"}) == "1-1-{{a}}"
    assert template_variables("{{ x }} {{y}} {{x}}") == ["x", "y"]


def test_render_undefined_variable_message():
    with pytest.raises(BatchInputError) as info:
        render("Hi {{ city }}", {"name": "x", "country": "y"}, where="row 3", noun="column")
    assert str(info.value) == ("row 3: the template uses {{city}}, but the row has no 'city' column; "
                               "columns: name, country")


@pytest.mark.parametrize("template, message", [
    ("Hello {{name", r"'\{\{' at '\{\{name' is not closed"),
    ("Hello {{ }}", r"'\{\{ \}\}' is not a placeholder"),
])
def test_malformed_templates(template, message):
    with pytest.raises(BatchInputError, match=message):
        render(template, {"name": "x"})


def test_template_without_placeholders_is_an_error():
    with pytest.raises(BatchInputError, match="no \\{\\{...\\}\\} placeholders"):
        parse_lines("a\nb", template="Always the same")


def test_rendered_template_empty_is_an_error():
    with pytest.raises(BatchInputError, match="row 1: the rendered template is empty"):
        load_prompts_text("a.csv", "x,prompt\n ,p\n", template="{{x}}")


def test_prompt_rows_round_trip_through_json():
    rows = load_prompts_text("a.jsonl", json.dumps({"id": "x", "q": "2+2?", "asserts": [
        "equals:4", "max-length:3 tokens", "is-json:{\"type\": \"number\"}"]}) + "\n", template="Q: {{q}}")
    assert [PromptRow.from_dict(json.loads(json.dumps(r.to_dict()))) for r in rows] == rows
    with pytest.raises(BatchInputError, match="prompt 0: not a stored prompt row"):
        PromptRow.from_dict({"index": 0, "text": "x"})
    with pytest.raises(BatchInputError, match="prompt 0: unknown assert"):
        PromptRow.from_dict({"index": 0, "text": "x", "id": "1", "variables": {}, "asserts": ["nope:1"]})


def test_a_jsonl_line_may_be_a_chat():
    """#32: a chat prompt (messages) kept as messages, e.g. a stored promptfoo chat run opened in the form."""
    from webui.batch.run.prompts import parse_jsonl

    rows = parse_jsonl('{"id": "a", "messages": [{"role": "system", "content": "Be brief."}, '
                       '{"role": "user", "content": "Hi"}], "asserts": ["contains:hi"]}\n{"prompt": "plain"}\n')
    assert rows[0].messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    assert rows[0].id == "a" and rows[0].asserts[0].label == "contains:hi" and rows[1].messages is None
    again = type(rows[0]).from_dict(rows[0].to_dict())
    assert again == rows[0] and again.messages == rows[0].messages  # stored and read back whole
    with pytest.raises(BatchInputError, match="takes no template"):
        parse_jsonl('{"messages": [{"role": "user", "content": "Hi"}]}', "Say {{x}}")
    with pytest.raises(BatchInputError, match="message 0 must be"):
        parse_jsonl('{"messages": [{"role": "user"}]}')
