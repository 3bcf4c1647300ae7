"""Incremental, UTF-8-safe detokenizing of a growing list of token ids.

A token does not always decode to whole characters on its own: byte-level BPE
splits "🙂" into several tokens, and SentencePiece tokenizers drop the leading
space of a sequence's first token. So each new token is decoded together with a
small window of the tokens before it (the prefix/read offset technique known
from vLLM and TGI):

* ``ids[prefix_offset:read_offset]`` is text that has already been emitted;
  it is decoded only as context.
* ``ids[prefix_offset:]`` is that context plus the tokens not emitted yet.

The new suffix is emitted only when the decode does not end in the replacement
character ``"\\ufffd"``, i.e. when no multi-byte character is still incomplete.
Tokens before the window are dropped, so each step costs O(window), not O(n).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

REPLACEMENT_CHAR = "\ufffd"
"""What a decoder yields for an incomplete UTF-8 sequence."""

PROMPT_CONTEXT_TOKENS = 5
"""How many trailing prompt ids are kept as decoding context."""


class IncrementalDetokenizer:
    """Turns generated token ids, one at a time, into stable text deltas.

    ``decode`` maps a list of ids to text; the caller binds options such as
    ``skip_special_tokens``, e.g.
    ``lambda ids: tok.decode(ids, skip_special_tokens=True)``.
    ``prompt_ids`` (only the last :data:`PROMPT_CONTEXT_TOKENS` are used) give the
    first generated tokens their context, so a leading space is kept where a
    tokenizer would drop it at the start of a sequence.

    The concatenation of everything returned by :meth:`add` and :meth:`flush`
    is the generated text; no delta ever ends in half a character.
    """

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        prompt_ids: Sequence[int] = (),
    ) -> None:
        self._decode = decode
        # The window: ids[:read_offset] were already emitted (or are prompt) and
        # serve only as context; ids[read_offset:] are not emitted yet.
        # prefix_offset is always 0 because older ids are dropped.
        self._ids: list[int] = list(prompt_ids)[-PROMPT_CONTEXT_TOKENS:]
        self._read_offset = len(self._ids)
        self._prefix_text = decode(self._ids) if self._ids else ""
        self._pieces: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far."""
        return "".join(self._pieces)

    def add(self, token_id: int) -> str:
        """Append one generated token; return the newly stable text (maybe "")."""
        self._ids.append(token_id)
        new_text = self._decode(self._ids)
        if len(new_text) <= len(self._prefix_text) or new_text.endswith(
            REPLACEMENT_CHAR
        ):
            return ""  # nothing new yet, or a character is still incomplete
        return self._emit(new_text)

    def flush(self) -> str:
        """Return whatever is still held back, at the end of generation.

        The result may end in ``"\\ufffd"`` when the model stopped in the middle
        of a character; there is nothing left that could complete it.
        """
        if self._read_offset >= len(self._ids):
            return ""
        return self._emit(self._decode(self._ids))

    def _emit(self, new_text: str) -> str:
        """Emit what ``new_text`` (the window's decode) adds to the context."""
        delta = new_text[len(self._prefix_text) :]
        # The tokens just emitted become the context of the next ones; older
        # ids are no longer needed. Context text is re-decoded on its own, as
        # tokenizers may render a token differently at the start of a sequence.
        del self._ids[: self._read_offset]
        self._read_offset = len(self._ids)
        self._prefix_text = self._decode(self._ids)
        if delta:
            self._pieces.append(delta)
        return delta
