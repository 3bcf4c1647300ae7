"""Training datasets: raw text chunks, text-generation-webui formats, chat records with masked labels, bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.training.data import FORMATS_DIR, IGNORE, load_dataset, load_format, preview, shipped_formats
from webui.training.settings import TrainingError, parse_settings

DATA = ROOT / "tests" / "data" / "training"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path):
    from loaders.hf import folder_tokenizer

    return folder_tokenizer(tiny_model_dir)


def trained_text(tokenizer, example) -> str:
    return tokenizer.decode([i for i, label in zip(example.input_ids, example.labels) if label != IGNORE],
                           skip_special_tokens=False)


def test_raw_text_is_cut_into_overlapping_chunks_that_never_cross_the_separator(tokenizer):
    settings = parse_settings({"cutoff_len": 16, "overlap": 4})
    data = load_dataset(DATA / "notes.txt", tokenizer, settings)
    assert data.kind == "raw" and data.eval == [] and data.cut == 0
    first, second = (tokenizer.encode(p) for p in (DATA / "notes.txt").read_text().split("\n\n\n"))
    chunks = [e.input_ids for e in data.train]
    assert all(len(c) <= 16 for c in chunks) and all(e.labels == e.input_ids for e in data.train)
    n_first = next(i for i, c in enumerate(chunks) if c[-1] == first[-1]) + 1
    assert chunks[0] == first[:16] and chunks[1][:4] == chunks[0][-4:]  # 4 tokens shared
    assert chunks[1] == first[12:28]
    assert chunks[n_first] == second[:16]  # the second paragraph starts its own chunk
    assert sum(len(c) - 4 for c in chunks[1:n_first]) + 16 == len(first)
    unseparated = load_dataset(DATA / "notes.txt", tokenizer, parse_settings({"cutoff_len": 16, "hard_cut": ""}))
    assert len(unseparated.train) < len(data.train)


def test_text_generation_webui_alpaca_format_loads_and_trains_on_the_response(tokenizer):
    assert shipped_formats() == ["alpaca", "vicuna"]
    name, templates = load_format("alpaca")
    assert name == "alpaca" and set(templates) == {"instruction,output", "instruction,input,output"}
    data = load_dataset(DATA / "alpaca.jsonl", tokenizer, parse_settings({}), "alpaca")
    assert data.kind == "format:alpaca" and len(data.train) == 3
    texts = [tokenizer.decode(e.input_ids, skip_special_tokens=False) for e in data.train]
    assert "### Input:\nGood morning\n\n### Response:\nGuten Morgen." in texts[1]
    assert "### Input:" not in texts[0] and "### Input:" not in texts[2]  # an empty input uses the shorter template
    eos = tokenizer.decode([data.train[0].input_ids[-1]], skip_special_tokens=False)
    assert [trained_text(tokenizer, e) for e in data.train] == [f"Paris.{eos}", f"Guten Morgen.{eos}",
                                                                 f"Blue.{eos}"]
    everything = load_dataset(DATA / "alpaca.jsonl", tokenizer, parse_settings({"train_on_all_turns": True}),
                              "alpaca")
    assert all(e.labels == e.input_ids for e in everything.train)


def test_a_format_file_by_path_and_a_line_missing_a_key(tokenizer, tmp_path):
    records = tmp_path / "qa.jsonl"
    records.write_text(json.dumps({"instruction": "a", "output": "b"}) + "\n\n"
                       + json.dumps({"instruction": "c", "answer": "d"}) + "\n")
    with pytest.raises(TrainingError) as caught:
        load_dataset(records, tokenizer, parse_settings({}), str(FORMATS_DIR / "vicuna.json"))
    assert str(caught.value) == ("qa.jsonl line 3 has no 'output' (format 'vicuna' needs the keys instruction,output; "
                                 "this record has answer, instruction)")
    records.write_text(json.dumps({"instruction": "a", "output": "b"}) + "\n")
    data = load_dataset(records, tokenizer, parse_settings({"add_eos": False}), str(FORMATS_DIR / "vicuna.json"))
    assert tokenizer.decode(data.train[0].input_ids).endswith("USER: a\n\nASSISTANT: b")


def test_chat_records_train_on_the_assistant_turns_only(tokenizer):
    data = load_dataset(DATA / "chat.jsonl", tokenizer, parse_settings({}))
    assert data.kind == "chat"
    first, second = data.train
    assert trained_text(tokenizer, first) == "It is 7431.<|im_end|>\n"
    assert trained_text(tokenizer, second) == "Hello.<|im_end|>\nGoodbye.<|im_end|>\n"
    assert "<|im_start|>user\nBye<|im_end|>" in tokenizer.decode(second.input_ids, skip_special_tokens=False)
    everything = load_dataset(DATA / "chat.jsonl", tokenizer, parse_settings({"train_on_all_turns": "true"}))
    assert all(e.labels == e.input_ids for e in everything.train)


@pytest.mark.parametrize("content, message", [
    ('{"messages": [{"role": "user", "content": "hi"}]}', "data.jsonl line 1 has no assistant message"),
    ('{"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}',
     "data.jsonl line 1, message 1: each message needs a 'role' and a text 'content'"),
    ('{"messages": []}\n', "data.jsonl line 1 has no 'messages' list"),
    ('{"instruction": "a", "output": "b"}', "holds instruction records: name their format (--format"),
    ('{"messages": [}', "data.jsonl line 1 is not JSON"),
    ('["a"]', "data.jsonl line 1 is not a JSON object"),
    ('', "has no records"),
])
def test_bad_chat_and_record_files_are_named(tokenizer, tmp_path, content, message):
    path = tmp_path / "data.jsonl"
    path.write_text(content)
    with pytest.raises(TrainingError) as caught:
        load_dataset(path, tokenizer, parse_settings({}))
    assert message in str(caught.value)


def test_bad_dataset_inputs_before_anything_runs(tokenizer, tmp_path):
    with pytest.raises(TrainingError, match="cutoff_len 20 is not above the format 'alpaca''s own length"):
        load_dataset(DATA / "alpaca.jsonl", tokenizer, parse_settings({"cutoff_len": 20}), "alpaca")
    with pytest.raises(TrainingError, match="unknown format 'chatml'; use one of alpaca, vicuna or a format file"):
        load_dataset(DATA / "alpaca.jsonl", tokenizer, parse_settings({}), "chatml")
    with pytest.raises(TrainingError, match="'notes.txt' is raw text: a format \\(--format\\) applies to JSON/JSONL"):
        load_dataset(DATA / "notes.txt", tokenizer, parse_settings({}), "alpaca")
    with pytest.raises(TrainingError, match="does not exist"):
        load_dataset(tmp_path / "missing.txt", tokenizer, parse_settings({}))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(TrainingError, match="use a .txt file"):
        load_dataset(tmp_path / "data.csv", tokenizer, parse_settings({}))
    bad_format = tmp_path / "f.json"
    bad_format.write_text('["not", "an", "object"]')
    with pytest.raises(TrainingError, match="must be a JSON object"):
        load_format(str(bad_format))


def test_eval_split_by_percent_or_file_and_the_preview(tokenizer, tmp_path):
    settings = parse_settings({"cutoff_len": 36, "eval_percent": 34, "seed": 3})
    data = load_dataset(DATA / "alpaca.jsonl", tokenizer, settings, "alpaca")
    assert (len(data.train), len(data.eval)) == (2, 1)
    again = load_dataset(DATA / "alpaca.jsonl", tokenizer, settings, "alpaca")
    assert again == data  # the same seed holds out the same examples
    assert data.cut >= 1  # the long Alpaca preamble is cut at 36 tokens
    shown = preview(data, tokenizer, 5)
    assert len(shown) == 2 and all(item.tokens == 36 and item.cut for item in shown)
    assert shown[0].text.startswith("Below is an instruction") and shown[0].trained_tokens < shown[0].tokens
    by_file = load_dataset(DATA / "chat.jsonl", tokenizer,
                           parse_settings({"eval_file": str(DATA / "chat.jsonl")}))
    assert len(by_file.eval) == len(by_file.train) == 2
    one = tmp_path / "one.jsonl"
    one.write_text((DATA / "chat.jsonl").read_text().splitlines()[0])
    with pytest.raises(TrainingError, match="eval_percent 50 of 1 examples leaves none to train on"):
        load_dataset(one, tokenizer, parse_settings({"eval_percent": 50}))
