"""A .gguf file's header read without the tensors: its metadata and how many values each tensor holds.

Enough to size a load before it happens (llama.cpp's KV cache, transformers' dequantized weights) in a few
milliseconds, without the gguf package's reader (which maps every tensor: seconds on a large file).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class Header:
    meta: dict[str, Any]
    """Scalar and string key-values (arrays, such as the vocabulary, are skipped)."""
    tensor_values: int
    """Values in all tensors together (the parameter count)."""


_cache: dict[tuple[str, int, int], Header | None] = {}


def read_header(path: Path) -> Header | None:
    """The header of ``path`` (cached per file version), or None when it is not a readable GGUF."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _cache:
        try:
            with open(path, "rb") as f:
                _cache[key] = _read(f)
        except (OSError, ValueError, struct.error, UnicodeDecodeError):
            _cache[key] = None
    return _cache[key]


def _read(f: BinaryIO) -> Header:
    def read(fmt: str) -> Any:
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

    def string() -> str:
        return f.read(read("<Q")).decode("utf-8")

    def value(kind: int) -> Any:
        if kind in _SCALARS:
            return read(_SCALARS[kind])
        if kind == _STRING:
            return string()
        if kind == _ARRAY:
            item, count = read("<I"), read("<Q")
            if item in _SCALARS:
                f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
            else:
                for _ in range(count):
                    value(item)
            return None
        raise ValueError(f"unknown GGUF value type {kind}")

    if f.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    read("<I")  # version
    tensors, pairs = read("<Q"), read("<Q")
    meta = {}
    for _ in range(pairs):
        name = string()
        found = value(read("<I"))
        if found is not None:
            meta[name] = found
    total = 0
    for _ in range(tensors):
        string()  # name
        count = 1
        for _ in range(read("<I")):
            count *= read("<Q")
        read("<I")  # type
        read("<Q")  # offset
        total += count
    return Header(meta, total)


def is_projector(path: Path) -> bool:
    """Whether ``path`` is a multimodal projector (an ``mmproj`` .gguf: a vision tower for a language model in
    another file), which is no model of its own: its header says general.type "mmproj" (or, unread, its name
    says mmproj, as llama.cpp's converter names them)."""
    path = Path(path)
    if path.suffix != ".gguf" or not path.is_file():
        return False
    header = read_header(path)
    if header is None:
        return "mmproj" in path.name.lower()
    return header.meta.get("general.type") == "mmproj"
