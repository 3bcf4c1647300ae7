"""Training datasets -> tokenized examples (input ids and labels, -100 where no loss is taken).

Three kinds, told apart by the file:

* raw text (``.txt``, ``.md``): split at the hard-cut separator first, each piece cut into chunks of
  ``cutoff_len`` tokens that share ``overlap`` tokens with the chunk before; every token is trained on.
* instruction records (``.json`` list or ``.jsonl``) with a format: a text-generation-webui ``training/formats``
  file (a JSON object whose keys are comma-joined record keys and whose values are templates with ``%key%``
  placeholders; two ship in webui/data/training_formats/). A record uses the template of the largest key set it
  has (non-empty text values); the text from ``%output%`` on is what is trained on, unless train_on_all_turns.
* chat records (each has a ``messages`` list of {role, content}): rendered through the model's chat template;
  only the assistant turns are trained on unless train_on_all_turns.

Every record is read and checked before anything trains: a line missing a key its format needs, or a message
without a role, is a :class:`TrainingError` naming the line. :func:`preview` shows the first examples as the model
sees them, with token counts and how many examples the cutoff cut.

Datasets come from anywhere, so they are read with limits: UTF-8 text only (a UTF-16 or binary file is named as
such), a record at most MAX_RECORD_BYTES (a .jsonl file is read a line at a time, so a huge line is refused after
that much of it), JSON nested at most 100 levels (webui/safeload.py), a format file at most MAX_FORMAT_BYTES. The
Training tab also holds a dataset to MAX_DATASET_BYTES (:func:`check_size`) before it reads any of it, and the UI
takes no upload larger than that.
"""

from __future__ import annotations

import json
import random
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from loaders.base import Tokenizer
from webui.safeload import DataTooLarge, load_json
from webui.training.settings import TrainingError, TrainingSettings

FORMATS_DIR = Path(__file__).resolve().parent.parent / "data" / "training_formats"
RAW_SUFFIXES = (".txt", ".md")
RECORD_SUFFIXES = (".json", ".jsonl")
IGNORE = -100
OUTPUT_KEY = "%output%"
MAX_DATASET_MB = 256
MAX_DATASET_BYTES = MAX_DATASET_MB * 2**20
"""The largest dataset the Training tab takes (uploaded, or picked from the datasets folder)."""
MAX_RECORD_BYTES = 8 * 2**20
"""The largest record (a .jsonl line, an item of a .json list): far more text than any cutoff_len keeps."""
MAX_FORMAT_BYTES = 2**20
"""The largest format file (a format is a few templates)."""
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _excerpt(value: Any) -> str:
    """The start of ``value`` for a message, however large or deeply nested it is."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = 60
    short.maxlevel = 2
    return short.repr(value)


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]
    cut: bool = False
    """Longer than cutoff_len before it was cut."""

    @property
    def trained_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


@dataclass(frozen=True)
class Dataset:
    kind: str  # "raw", "format:<name>", "chat"
    train: list[Example]
    eval: list[Example]

    @property
    def cut(self) -> int:
        return sum(e.cut for e in self.train + self.eval)


@dataclass(frozen=True)
class PreviewItem:
    text: str
    tokens: int
    trained_tokens: int
    cut: bool


def shipped_formats() -> list[str]:
    return sorted(p.stem for p in FORMATS_DIR.glob("*.json"))


def load_format(name_or_file: str) -> tuple[str, dict[str, str]]:
    """A format's name and templates, from a shipped name (``alpaca``) or a file path."""
    path = Path(name_or_file).expanduser()
    if not path.is_file():
        if "/" in name_or_file or name_or_file.endswith(".json"):
            raise TrainingError(f"format file '{name_or_file}' does not exist")
        path = FORMATS_DIR / f"{name_or_file}.json"
        if not path.is_file():
            raise TrainingError(f"unknown format '{name_or_file}'; use one of {', '.join(shipped_formats())} or a "
                                "format file (a JSON object: \"instruction,output\": \"...%instruction%...\")")
    check_size(path, MAX_FORMAT_BYTES, "format file")
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise TrainingError(f"cannot read the format file '{path}': {exc}") from exc
    text = decode(blob, f"the format file '{path.name}'")
    try:
        data = load_json(text)
    except DataTooLarge as exc:
        raise TrainingError(f"the format file '{path}': {exc}; a format is one object of \"key1,key2\": "
                            "\"template\" pairs") from None
    except ValueError as exc:
        raise TrainingError(f"the format file '{path}' is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not data or not all(isinstance(v, str) for v in data.values()):
        raise TrainingError(f"format file '{path}' must be a JSON object of \"key1,key2\": \"template\" pairs")
    for keys in data:
        if not all(key.strip() for key in keys.split(",")):
            raise TrainingError(f"format file '{path}': the key {_excerpt(keys)} names an empty record key; write "
                                "the record keys a template uses, comma-joined (\"instruction,output\")")
    return path.stem.removesuffix("-format"), data


def check_size(path: Path, limit: int = MAX_DATASET_BYTES, what: str = "dataset") -> None:
    """TrainingError when the file at ``path`` is over ``limit`` bytes, from its size alone (nothing is read)."""
    size = path.stat().st_size
    if size > limit:
        raise TrainingError(f"the {what} '{path.name}' is {_size(size)}, over the {_size(limit)} a {what} may take "
                            "here; use a smaller one (a part of it), or train from the command line (launch.py "
                            "train), which reads any size")


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MB" if n % 2**20 else f"{n // 2**20:,} MB"


def decode(blob: bytes, what: str, first_line: int = 1) -> str:
    """``blob`` as UTF-8 text (a BOM dropped); TrainingError naming UTF-16, a binary file or the first bad byte's
    line (counted from ``first_line``)."""
    if blob.startswith(_UTF16_BOMS):
        raise TrainingError(f"{what} is UTF-16 text; save it as UTF-8 and use it again")
    if b"\0" in blob[:8192]:
        raise TrainingError(f"{what} is not text (it holds NUL bytes: a binary file, or UTF-16 without a BOM); use "
                            "a UTF-8 text file")
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = first_line + blob.count(b"\n", 0, exc.start)
        raise TrainingError(f"{what} is not UTF-8 text (line {line} has the byte {blob[exc.start]:#04x}); save it "
                            "as UTF-8 and use it again") from None


def read_records(path: Path) -> list[tuple[int, dict]]:
    """(line number, record) of a .jsonl file, or (item number, record) of a .json list."""
    try:
        items = _jsonl(path) if path.suffix == ".jsonl" else _json_list(path)
    except OSError as exc:
        raise TrainingError(f"cannot read the dataset '{path}': {exc}") from exc
    where = "line" if path.suffix == ".jsonl" else "item"
    for number, item in items:
        if not isinstance(item, dict):
            raise TrainingError(f"{path.name} {where} {number} is not a JSON object: {_excerpt(item)}")
    if not items:
        raise TrainingError(f"the dataset '{path}' has no records")
    return items


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    """A .jsonl file's records, read a line at a time: a line over MAX_RECORD_BYTES is refused unread."""
    items: list[tuple[int, Any]] = []
    with path.open("rb") as f:
        number = 0
        while line := f.readline(MAX_RECORD_BYTES + 1):
            number += 1
            if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
                raise TrainingError(f"{path.name} line {number} is over {_size(MAX_RECORD_BYTES)}, more than a "
                                    "record may take (far more than any cutoff_len keeps); shorten it or leave it "
                                    "out")
            text = decode(line, path.name, number)
            if text.strip():
                items.append((number, _parse(text, f"{path.name} line {number}")))
    return items


def _json_list(path: Path) -> list[tuple[int, Any]]:
    data = _parse(decode(path.read_bytes(), path.name), path.name)
    if not isinstance(data, list):
        raise TrainingError(f"{path.name} must hold a JSON list of records (or use .jsonl, one per line)")
    for number, item in enumerate(data, 1):
        if len(json.dumps(item, ensure_ascii=False)) > MAX_RECORD_BYTES:
            raise TrainingError(f"{path.name} item {number} is over {_size(MAX_RECORD_BYTES)}, more than a record "
                                "may take (far more than any cutoff_len keeps); shorten it or leave it out")
    return list(enumerate(data, 1))


def _parse(text: str, where: str) -> Any:
    try:
        return load_json(text)
    except DataTooLarge as exc:
        raise TrainingError(f"{where}: {exc}; a record is an object of texts (or a 'messages' list)") from None
    except ValueError as exc:
        raise TrainingError(f"{where} is not JSON: {exc}") from exc


def check_dataset(path: Path) -> None:
    """Read the dataset at ``path`` as training will, without a tokenizer: TrainingError for text that is not
    UTF-8, records that are not JSON objects, a file with nothing in it."""
    if path.suffix in RAW_SUFFIXES:
        if not read_text(path).strip():
            raise TrainingError(f"the dataset '{path.name}' has no text")
    else:
        read_records(path)


def read_text(path: Path) -> str:
    """A raw-text dataset's text (UTF-8)."""
    try:
        return decode(path.read_bytes(), f"the dataset '{path.name}'")
    except OSError as exc:
        raise TrainingError(f"cannot read the dataset '{path}': {exc}") from exc


def _eos_id(tokenizer: Tokenizer) -> int:
    special = getattr(tokenizer, "special_tokens", None)
    eos_text = special()["eos_token"] if callable(special) else ""
    ids = tokenizer.encode(eos_text, add_special_tokens=False) if eos_text else []
    if len(ids) == 1:
        return ids[0]
    if not tokenizer.eos_token_ids:
        raise TrainingError("this tokenizer has no end-of-text token; set add_eos false")
    return min(tokenizer.eos_token_ids)


def _finish(ids: list[int], labels: list[int], settings: TrainingSettings, eos: int | None) -> Example:
    if eos is not None:
        ids, labels = ids + [eos], labels + [eos]
    cut = len(ids) > settings.cutoff_len
    return Example(ids[:settings.cutoff_len], labels[:settings.cutoff_len], cut)


def raw_text_examples(text: str, tokenizer: Tokenizer, settings: TrainingSettings) -> list[Example]:
    """Chunks of cutoff_len tokens with ``overlap`` shared; no chunk crosses the hard-cut separator."""
    pieces = text.split(settings.separator) if settings.separator else [text]
    step = settings.cutoff_len - settings.overlap
    out = []
    for piece in pieces:
        if not piece.strip():
            continue
        ids = tokenizer.encode(piece)
        start = 0
        while True:
            chunk = ids[start:start + settings.cutoff_len]
            out.append(Example(chunk, list(chunk)))
            if start + settings.cutoff_len >= len(ids):
                break
            start += step
    return out


def template_tokens(templates: dict[str, str], tokenizer: Tokenizer) -> int:
    """The tokens of a format's shortest template with its placeholders empty (its own length)."""
    lengths = []
    for keys, template in templates.items():
        for key in keys.split(","):
            template = template.replace(f"%{key.strip()}%", "")
        lengths.append(len(tokenizer.encode(template)))
    return min(lengths)


def _pick_template(record: dict, templates: dict[str, str], where: str, format_name: str) -> str:
    present = {k for k, v in record.items() if isinstance(v, str) and v.strip()}
    keysets = [(frozenset(k.strip() for k in keys.split(",")), template) for keys, template in templates.items()]
    fitting = [(keys, t) for keys, t in keysets if keys <= present]
    if fitting:
        return max(fitting, key=lambda kt: len(kt[0]))[1]
    missing = min((keys - present for keys, _ in keysets), key=len)
    needs = " or ".join(",".join(sorted(keys)) for keys, _ in keysets)
    raise TrainingError(f"{where} has no {'/'.join(repr(k) for k in sorted(missing))} (format '{format_name}' "
                        f"needs the keys {needs}; this record has {', '.join(sorted(present)) or 'no text keys'})")


def fits(records: Sequence[tuple[int, dict]], templates: dict[str, str]) -> bool:
    """Whether the format of ``templates`` reads every record (each has the keys of one of its templates)."""
    keysets = [frozenset(k.strip() for k in keys.split(",")) for keys in templates]
    return all(any(keys <= {k for k, v in record.items() if isinstance(v, str) and v.strip()} for keys in keysets)
               for _, record in records)


def format_examples(records: Sequence[tuple[int, dict]], source: str, format_name: str, templates: dict[str, str],
                    tokenizer: Tokenizer, settings: TrainingSettings) -> list[Example]:
    eos = _eos_id(tokenizer) if settings.add_eos else None
    chosen = [(number, record, _pick_template(record, templates, f"{source} line {number}", format_name))
              for number, record in records]  # every line checked before any is tokenized
    out = []
    for _, record, template in chosen:
        head, mark, tail = template.partition(OUTPUT_KEY)
        prompt, answer = (head, mark + tail) if mark else ("", template)
        for key, value in record.items():
            if isinstance(value, str):
                prompt, answer = prompt.replace(f"%{key}%", value), answer.replace(f"%{key}%", value)
        prompt_ids = tokenizer.encode(prompt) if prompt else []
        answer_ids = tokenizer.encode(answer, add_special_tokens=not prompt)
        masked = list(prompt_ids) if settings.train_on_all_turns else [IGNORE] * len(prompt_ids)
        out.append(_finish(prompt_ids + answer_ids, masked + answer_ids, settings, eos))
    return out


def _check_messages(record: dict, where: str) -> list[dict]:
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TrainingError(f"{where} has no 'messages' list (a chat record is {{\"messages\": [{{\"role\": "
                            "\"user\", \"content\": \"...\"}, ...]}})")
    for i, message in enumerate(messages, 1):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise TrainingError(f"{where}, message {i}: each message needs a 'role' and a text 'content'")
    if not any(m["role"] == "assistant" for m in messages):
        raise TrainingError(f"{where} has no assistant message: there is nothing to train on")
    return messages


def chat_example(messages: list[dict], tokenizer: Tokenizer, settings: TrainingSettings, where: str) -> Example:
    """One conversation through the chat template; the assistant turns' tokens are the labels."""
    pieces: list[tuple[str, bool]] = []  # (text, trained)
    done = ""
    for k, message in enumerate(messages):
        if message["role"] == "assistant" and k:
            header = tokenizer.apply_chat_template(messages[:k], add_generation_prompt=True)
            pieces.append((header[len(done):], False))
            done = header
        upto = tokenizer.apply_chat_template(messages[:k + 1], add_generation_prompt=False)
        if not upto.startswith(done):
            raise TrainingError(f"{where}: this model's chat template does not render a conversation turn by turn "
                                "(an earlier turn changes), so the assistant turns cannot be told apart; set "
                                "train_on_all_turns true")
        pieces.append((upto[len(done):], message["role"] == "assistant"))
        done = upto
    ids: list[int] = []
    labels: list[int] = []
    for text, trained in pieces:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids += piece
        labels += piece if trained or settings.train_on_all_turns else [IGNORE] * len(piece)
    return _finish(ids, labels, settings, None)  # the template ends each turn itself


def load_examples(path: Path, tokenizer: Tokenizer, settings: TrainingSettings,
                  format_name: str | None = None) -> tuple[str, list[Example]]:
    """The kind of the dataset at ``path`` and its examples (every record checked before any is tokenized)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TrainingError(f"dataset '{path}' does not exist")
    if path.suffix in RAW_SUFFIXES:
        if format_name:
            raise TrainingError(f"'{path.name}' is raw text: a format (--format) applies to JSON/JSONL instruction "
                                "datasets only")
        examples = raw_text_examples(read_text(path), tokenizer, settings)
        if not examples:
            raise TrainingError(f"the dataset '{path}' has no text")
        return "raw", examples
    if path.suffix not in RECORD_SUFFIXES:
        raise TrainingError(f"dataset '{path.name}': use a .txt file (raw text) or a .json/.jsonl file "
                            "(instruction or chat records)")
    records = read_records(path)
    if format_name is None:
        if not any("messages" in record for _, record in records):
            raise TrainingError(f"'{path.name}' holds instruction records: name their format (--format; "
                                f"{', '.join(shipped_formats())} or a format file), or give chat records with "
                                "a 'messages' list")
        if not tokenizer.chat_template:
            raise TrainingError("this model has no chat template, so chat records cannot be rendered; use an "
                                "instruction format (--format) or raw text")
        checked = [(_check_messages(r, f"{path.name} line {n}"), f"{path.name} line {n}") for n, r in records]
        return "chat", [chat_example(m, tokenizer, settings, where) for m, where in checked]
    name, templates = load_format(format_name)
    own = template_tokens(templates, tokenizer)
    if settings.cutoff_len <= own:
        raise TrainingError(f"cutoff_len {settings.cutoff_len} is not above the format '{name}''s own length "
                            f"({own} tokens without any data); raise cutoff_len")
    return f"format:{name}", format_examples(records, path.name, name, templates, tokenizer, settings)


def load_dataset(path: Path, tokenizer: Tokenizer, settings: TrainingSettings,
                 format_name: str | None = None) -> Dataset:
    """The training examples and the eval split (eval_file, or eval_percent of the examples, picked by seed)."""
    kind, examples = load_examples(path, tokenizer, settings, format_name)
    if settings.eval_file:
        _, held = load_examples(Path(settings.eval_file), tokenizer, settings, format_name)
        return Dataset(kind, examples, held)
    if settings.eval_percent:
        count = max(1, round(len(examples) * settings.eval_percent / 100))
        if count >= len(examples):
            raise TrainingError(f"eval_percent {settings.eval_percent:g} of {len(examples)} examples leaves none "
                                "to train on; lower it or give more data")
        order = list(range(len(examples)))
        random.Random(settings.seed).shuffle(order)
        held_out = set(order[:count])
        return Dataset(kind, [e for i, e in enumerate(examples) if i not in held_out],
                       [e for i, e in enumerate(examples) if i in held_out])
    return Dataset(kind, examples, [])


def preview(dataset: Dataset, tokenizer: Tokenizer, count: int = 3) -> list[PreviewItem]:
    """The first ``count`` training examples as the model sees them (special tokens shown)."""
    return [PreviewItem(tokenizer.decode(e.input_ids, skip_special_tokens=False), len(e.input_ids), e.trained_tokens,
                        e.cut) for e in dataset.train[:count]]
