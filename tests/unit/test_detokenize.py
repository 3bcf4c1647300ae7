"""Tests for webui.engine.detokenize.IncrementalDetokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webui.engine.detokenize import IncrementalDetokenizer

TEXTS = [
    "Hello world, naïve café 🙂 日本語",
    "é",
    "日本",
    "🙂🙂 emoji 👩‍👩‍👧 family, Ελληνικά, русский, 한국어",
    "  leading spaces and\ttabs\nnew lines  ",
]


def byte_decode(ids: list[int]) -> str:
    """A fake byte-level tokenizer: every token is one byte."""
    return bytes(ids).decode("utf-8", errors="replace")


def stream(
    decode: Callable[[list[int]], str],
    ids: Sequence[int],
    prompt_ids: Sequence[int] = (),
) -> tuple[list[str], IncrementalDetokenizer]:
    """Feed ids one by one; return all deltas (flush last) and the detokenizer."""
    detok = IncrementalDetokenizer(decode, prompt_ids)
    deltas = [detok.add(token_id) for token_id in ids]
    deltas.append(detok.flush())
    return deltas, detok


@pytest.mark.parametrize("text", TEXTS)
def test_byte_tokens_never_emit_half_a_character(text: str) -> None:
    deltas, detok = stream(byte_decode, list(text.encode("utf-8")))
    assert not any("\ufffd" in delta for delta in deltas)
    assert "".join(deltas) == text == detok.text


def test_multibyte_character_appears_when_complete() -> None:
    detok = IncrementalDetokenizer(byte_decode)
    assert [detok.add(b) for b in "🙂".encode()] == ["", "", "", "🙂"]
    assert [detok.add(b) for b in "aé".encode()] == ["a", "", "é"]
    assert detok.flush() == ""
    assert detok.text == "🙂aé"


def test_flush_returns_an_incomplete_character() -> None:
    detok = IncrementalDetokenizer(byte_decode)
    assert detok.add(ord("x")) == "x"
    assert detok.add("é".encode()[0]) == ""
    assert detok.flush() == "\ufffd"
    assert detok.text == "x\ufffd"
    assert detok.flush() == ""


def test_prompt_context_is_not_emitted() -> None:
    prompt = list("Q: 日".encode())[:-1]  # the prompt even ends mid-character
    deltas, detok = stream(byte_decode, list(b"A!"), prompt_ids=prompt)
    assert "".join(deltas) == detok.text == "A!"


def test_window_stays_small() -> None:
    calls: list[int] = []

    def counting_decode(ids: list[int]) -> str:
        calls.append(len(ids))
        return byte_decode(ids)

    text = "ab日本" * 500
    deltas, _ = stream(counting_decode, list(text.encode()), prompt_ids=list(b"prompt"))
    assert "".join(deltas) == text
    assert max(calls) <= 6  # bounded window, independent of the text's length


@given(
    st.text(st.characters(codec="utf-8", exclude_characters="\ufffd"), max_size=30),
    st.lists(st.integers(1, 5), max_size=40),
)
def test_multibyte_tokens_straddling_characters(text: str, sizes: list[int]) -> None:
    """Multi-byte tokens that end and start mid-character, as in byte-level BPE."""
    data = text.encode("utf-8")
    vocab: list[bytes] = []
    start = 0
    for size in [*sizes, len(data)]:
        if start < len(data):
            vocab.append(data[start : start + size])
            start += size

    def chunk_decode(ids: list[int]) -> str:
        return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")

    deltas, _ = stream(chunk_decode, range(len(vocab)))
    assert not any("\ufffd" in delta for delta in deltas)
    assert "".join(deltas) == text


def test_leading_space_kept_with_prompt_context() -> None:
    """SentencePiece-style decoders drop the space of a sequence's first piece."""
    pieces = ["▁Hello", "▁world", "!"]

    def sp_decode(ids: list[int]) -> str:
        return "".join(pieces[i] for i in ids).replace("▁", " ").removeprefix(" ")

    assert stream(sp_decode, [1, 2])[1].text == "world!"  # no context: space lost
    assert stream(sp_decode, [1, 2], prompt_ids=[0])[1].text == " world!"
    assert stream(sp_decode, [0, 1, 2])[0] == ["Hello", " world", "!", ""]


@pytest.fixture(scope="module")
def tokenizer(default_model_dir: Path) -> Any:
    """The default model's real byte-level BPE tokenizer."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(default_model_dir))


@pytest.mark.parametrize("text", TEXTS)
def test_real_tokenizer_stream_joins_to_full_decode(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    deltas, detok = stream(tokenizer.decode, ids)
    assert not any("\ufffd" in delta for delta in deltas)
    assert "".join(deltas) == detok.text == tokenizer.decode(ids) == text


def test_real_tokenizer_splits_characters_across_tokens(tokenizer: Any) -> None:
    # Guards the test above: the tokenizer really does split "日本語" into byte tokens.
    ids = tokenizer.encode(" 日本語", add_special_tokens=False)
    assert any("\ufffd" in tokenizer.decode([token_id]) for token_id in ids)


def test_real_tokenizer_keeps_leading_space_with_prompt_context(tokenizer: Any) -> None:
    prompt = tokenizer.encode("The answer is", add_special_tokens=False)
    full = tokenizer.encode("The answer is 42, café 🙂", add_special_tokens=False)
    assert full[: len(prompt)] == prompt
    completion = full[len(prompt) :]
    _, detok = stream(tokenizer.decode, completion, prompt_ids=prompt)
    assert detok.text == " 42, café 🙂"
    assert detok.text == tokenizer.decode(full)[len(tokenizer.decode(prompt)) :]


def test_real_tokenizer_skips_special_tokens_when_asked(tokenizer: Any) -> None:
    eos = tokenizer.eos_token_id
    assert eos is not None
    ids = [*tokenizer.encode("Done.", add_special_tokens=False), eos]
    deltas, detok = stream(lambda x: tokenizer.decode(x, skip_special_tokens=True), ids)
    assert detok.text == "Done."
    assert deltas[-2:] == ["", ""]
