"""Hostile training datasets and format files, through TrainingController on a real user data dir and the tiny
model's real tokenizer (#43): a dataset over the size limit is refused from its size alone; one that cannot be read
(a huge line, a wrong encoding, binary bytes, a JSON bomb) is refused on upload, leaving the dataset of that name as
it was, and at Start (the reader the command line uses too), before anything loads; the tab keeps working."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import ROOT
from tests.security.conftest import write
from webui.controllers import UserError
from webui.controllers.training import AUTO_FORMAT, TrainingController, TrainingForm
from webui.training.data import MAX_DATASET_MB, MAX_FORMAT_BYTES, MAX_RECORD_BYTES

SURFACE = "training datasets"
GIB = 2**30
GOOD = {".txt": "Some notes to train on.\n", ".md": "# Notes\n\nSome notes.\n",
        ".jsonl": (ROOT / "tests" / "data" / "training" / "chat.jsonl").read_text(),
        ".json": json.dumps([{"messages": [{"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "Hello."}]}])}
LINE = json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]})


def sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.truncate(size)  # a hole: no disk used, and reading it would take seconds
    return write


def long_line() -> bytes:
    """Two good records, then one of 50 MB on line 3."""
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * (50 * 2**20)},
                                    {"role": "assistant", "content": "ok"}]})
    return f"{LINE}\n{LINE}\n{huge}\n{LINE}\n".encode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# (file name, its content, what the message says, after the file's name): refused on upload and at Start alike.
REFUSED = [
    pytest.param("keep.jsonl", sparse(GIB), f"is 1,024 MB, over the {MAX_DATASET_MB} MB a dataset may take here; use "
                 r"a smaller one \(a part of it\), or train from the command line", id="jsonl-1GiB-refused-by-size"),
    pytest.param("keep.txt", sparse(GIB), f"is 1,024 MB, over the {MAX_DATASET_MB} MB a dataset may take here",
                 id="txt-1GiB-refused-by-size"),
    pytest.param("keep.jsonl", long_line, f"line 3 is over {MAX_RECORD_BYTES // 2**20} MB, more than a record may "
                 r"take \(far more than any cutoff_len keeps\); shorten it or leave it out", id="jsonl-50MB-line"),
    pytest.param("keep.json", lambda: json.dumps([json.loads(LINE), {"text": "x" * (50 * 2**20)}]).encode(),
                 f"item 2 is over {MAX_RECORD_BYTES // 2**20} MB, more than a record may take",
                 id="json-50MB-record"),
    pytest.param("keep.jsonl", (LINE + "\n").encode("utf-16"), "is UTF-16 text; save it as UTF-8 and use it again",
                 id="jsonl-utf-16-with-bom"),
    pytest.param("keep.txt", "Some notes.\n".encode("utf-16"), "is UTF-16 text; save it as UTF-8",
                 id="txt-utf-16-with-bom"),
    pytest.param("keep.txt", "Some notes.\n".encode("utf-16-le"), r"is not text \(it holds NUL bytes: a binary file, "
                 r"or UTF-16 without a BOM\); use a UTF-8 text file", id="txt-utf-16-without-bom"),
    pytest.param("keep.txt", "Notes.\nCafé au lait.\n".encode("latin-1"), r"is not UTF-8 text \(line 2 has the byte "
                 r"0xe9\); save it as UTF-8 and use it again", id="txt-latin-1-bytes"),
    pytest.param("keep.jsonl", f'{LINE}\n{{"text": "café"}}\n'.encode("latin-1"), r"is not UTF-8 text \(line 2 has "
                 "the byte 0xe9", id="jsonl-latin-1-bytes"),
    pytest.param("keep.jsonl", random.Random(1).randbytes(4096), r"(is not text|is not UTF-8 text)",
                 id="jsonl-random-binary-bytes"),
    pytest.param("keep.md", b"\x7fELF\x02\x01\x01\x00" + bytes(256), r"is not text \(it holds NUL bytes",
                 id="md-an-executable"),
    pytest.param("keep.json", nested(20_000), "the JSON nests deeper than 100 levels; a record is an object of texts",
                 id="json-bomb-20000-levels"),
    pytest.param("keep.jsonl", LINE.encode() + b"\n" + b'{"a":' * 20_000 + b"1" + b"}" * 20_000 + b"\n",
                 "line 2: the JSON nests deeper than 100 levels", id="jsonl-line-json-bomb-20000-levels"),
    pytest.param("keep.jsonl", nested(500) + b"\n", r"line 1: the JSON nests deeper than 100 levels",
                 id="jsonl-record-a-deep-list-named-briefly"),
    pytest.param("keep.json", lambda: json.dumps({"records": [json.loads(LINE)] * 100_000}).encode(),
                 r"must hold a JSON list of records \(or use .jsonl, one per line\)", id="json-an-object-not-a-list"),
    pytest.param("keep.jsonl", f"{LINE}\n{{not json\n".encode(), "line 2 is not JSON: Expecting property name",
                 id="jsonl-a-line-not-json"),
    pytest.param("keep.json", lambda: json.dumps(["x" * 1000] * 1000).encode(),
                 r"item 1 is not a JSON object: '(x)+\.\.\.(x)+'$", id="json-records-that-are-long-texts"),
    pytest.param("keep.txt", b"", "has no text", id="txt-empty"),
    pytest.param("keep.jsonl", b"\n\n  \n", "has no records", id="jsonl-only-blank-lines"),
]

# (format file, its content, what the message says): refused at Start, before anything loads.
FORMATS = [
    pytest.param("bomb.json", nested(20_000), "the JSON nests deeper than 100 levels; a format is one object",
                 id="format-json-bomb"),
    pytest.param("list.json", b'["%instruction%", "%output%"]', 'must be a JSON object of "key1,key2": "template" '
                 "pairs", id="format-a-list"),
    pytest.param("num.json", b'{"instruction,output": 5}', 'must be a JSON object of "key1,key2"',
                 id="format-template-a-number"),
    pytest.param("empty.json", b"{}", 'must be a JSON object of "key1,key2"', id="format-empty-object"),
    pytest.param("blank.json", b'{"instruction,,output": "%instruction% %output%"}', "the key 'instruction,,output' "
                 r"names an empty record key; write the record keys a template uses, comma-joined",
                 id="format-key-with-an-empty-record-key"),
    pytest.param("big.json", json.dumps({"instruction,output": "x" * MAX_FORMAT_BYTES}).encode(),
                 r"the format file 'big.json' is 1\.0 MB, over the 1 MB a format file may take here",
                 id="format-over-1MB"),
    pytest.param("sparse.json", sparse(GIB), "the format file 'sparse.json' is 1,024 MB, over the 1 MB",
                 id="format-1GiB-refused-by-size"),
    pytest.param("utf16.json", '{"instruction,output": "%instruction% %output%"}'.encode("utf-16"),
                 "is UTF-16 text; save it as UTF-8", id="format-utf-16"),
    pytest.param("garbage.json", random.Random(2).randbytes(512), r"(is not text|is not UTF-8 text)",
                 id="format-random-bytes"),
]


@pytest.fixture
def controller(services) -> TrainingController:
    """The controller, with a good dataset of each kind in the datasets folder, which a refusal must leave as it
    was."""
    made = TrainingController(services)
    made.datasets_dir.mkdir(parents=True)
    for suffix, text in GOOD.items():
        (made.datasets_dir / f"keep{suffix}").write_text(text)
    (made.datasets_dir / "qa.jsonl").write_text((ROOT / "tests" / "data" / "training" / "alpaca.jsonl").read_text())
    return made


def form(dataset: str, fmt: str = AUTO_FORMAT, **values: object) -> TrainingForm:
    return TrainingForm("tiny", dataset, fmt, "adapter", {"cutoff_len": 32, **values}, "cpu")


def contents(folder: Path) -> dict[str, bytes | str]:
    """Every entry of ``folder``: a small file's bytes, a big one's size, a link's target."""
    return {p.name: os.readlink(p) if p.is_symlink() else
            p.read_bytes() if p.stat().st_size < 2**20 else f"{p.stat().st_size} bytes" for p in folder.iterdir()}


def still_works(controller: TrainingController) -> None:
    job = controller.job(form("keep.txt"))
    assert job.dataset is not None and job.dataset.kind == "raw" and len(job.dataset.train) == 1
    assert controller.view().state.phase == "idle"


@pytest.mark.parametrize(("name", "content", "message"), REFUSED)
def test_a_hostile_dataset_is_refused_on_upload_and_at_start(controller, tmp_path, name, content, message):
    folder = controller.datasets_dir
    before = contents(folder)
    upload = write(tmp_path / "upload", name, content)  # under the name of a dataset there
    started = time.monotonic()
    with pytest.raises(UserError, match=f"^Could not upload the dataset: .*'?{name}'?:? {message}") as caught:
        controller.upload(upload)
    assert time.monotonic() - started < 10, "refused without reading it all"
    assert len(str(caught.value)) < 600, "the message names the problem, not the file's content"
    assert contents(folder) == before, "the dataset of that name is untouched, and nothing half-copied is left"

    write(folder, f"hand-{name}", content)  # put in the folder by hand: Start reads it as the command line does
    started = time.monotonic()
    with pytest.raises(UserError, match=f"hand-{name}'?:? {message}"):
        controller.start(form(f"hand-{name}"))
    assert time.monotonic() - started < 20 and controller.view().state.phase == "idle"
    still_works(controller)


@pytest.mark.parametrize(("make", "message"), [
    pytest.param(lambda tmp: write(tmp, "keep.yaml", b"- text: hi\n"), r"'keep.yaml' is not a dataset: upload a .txt "
                 r"or .md file \(raw text\) or a .json/.jsonl file", id="yaml-is-no-dataset"),
    pytest.param(lambda tmp: write(tmp, "keep.exe", b"MZ" + bytes(64)), "is not a dataset", id="program-is-no-dataset"),
    pytest.param(lambda tmp: (tmp / "dir.jsonl").mkdir() or tmp / "dir.jsonl",
                 r"'dir.jsonl' is not a file; choose a dataset file to upload", id="a-folder"),
    pytest.param(lambda tmp: os.mkfifo(tmp / "pipe.jsonl") or tmp / "pipe.jsonl",
                 "'pipe.jsonl' is not a file", id="a-named-pipe-that-would-block-a-read"),
    pytest.param(lambda tmp: tmp / "missing.txt", "'missing.txt' is not a file", id="a-file-that-is-not-there"),
    pytest.param(lambda tmp: write(tmp, ".hidden.txt", b"notes"), r"dataset name '.hidden.txt' must be a plain name",
                 id="a-hidden-file-name"),
    pytest.param(lambda tmp: write(tmp, "a:b.txt", b"notes"), r"dataset name 'a:b.txt' must be a plain name",
                 id="a-file-name-with-a-colon"),
    pytest.param(lambda tmp: tmp / "x\x00y.txt", r"dataset name 'x\\x00y.txt' must be a plain name",
                 id="a-file-name-with-a-nul"),
    pytest.param(lambda tmp: tmp / ("x" * 10_000 + ".txt"), r"dataset name is too long \(10,004 characters; at most "
                 "120\\); choose a shorter one", id="a-file-name-of-10000-characters"),
])
def test_an_upload_that_is_no_dataset_file_is_refused(controller, tmp_path, make, message):
    (tmp_path / "upload").mkdir()
    before = contents(controller.datasets_dir)
    started = time.monotonic()
    with pytest.raises(UserError, match=message):
        controller.upload(make(tmp_path / "upload"))
    assert time.monotonic() - started < 5 and contents(controller.datasets_dir) == before
    still_works(controller)


def test_an_eval_file_over_the_limit_is_refused_by_size(controller):
    sparse(GIB)(controller.datasets_dir / "eval.jsonl")
    started = time.monotonic()
    with pytest.raises(UserError, match=f"the eval dataset 'eval.jsonl' is 1,024 MB, over the {MAX_DATASET_MB} MB"):
        controller.start(form("keep.txt", eval_file="eval.jsonl"))
    assert time.monotonic() - started < 5
    still_works(controller)


@pytest.mark.parametrize(("name", "content", "message"), FORMATS)
def test_a_hostile_format_file_is_refused_at_start(controller, name, content, message):
    write(controller.formats_dir, name, content)
    started = time.monotonic()
    with pytest.raises(UserError, match=message) as caught:
        controller.start(form("qa.jsonl", fmt=name))
    assert time.monotonic() - started < 20 and len(str(caught.value)) < 600
    assert controller.view().state.phase == "idle"
    still_works(controller)


def test_an_upload_over_a_link_in_the_folder_replaces_the_link_not_what_it_points_at(controller, tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("a file outside the datasets folder\n")
    (controller.datasets_dir / "linked.txt").symlink_to(target)
    upload = write(tmp_path / "upload", "linked.txt", b"New notes.\n")
    assert controller.upload(upload) == "linked.txt"
    assert target.read_text() == "a file outside the datasets folder\n"
    assert not (controller.datasets_dir / "linked.txt").is_symlink()
    assert (controller.datasets_dir / "linked.txt").read_text() == "New notes.\n"
