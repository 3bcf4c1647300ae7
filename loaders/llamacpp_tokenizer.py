"""llama.cpp's vocabulary as our Tokenizer protocol, with the GGUF's own chat template (the llama.cpp loader's)."""

from __future__ import annotations

import ctypes
import warnings
from typing import Any, Callable, Sequence

from loaders.base import ModelLoadError


class LlamaCppTokenizer:
    """Our Tokenizer protocol over llama.cpp's vocabulary and the GGUF's own chat template."""

    def __init__(self, lib: Any, vocab: Any, chat_template: str | None):
        self._lib, self._vocab = lib, vocab
        self.chat_template = chat_template
        n = int(lib.llama_vocab_n_tokens(vocab))
        self.eos_token_ids = frozenset(i for i in range(n) if lib.llama_vocab_is_eog(vocab, i))
        self._special = {"bos_token": self._piece(lib.llama_vocab_bos(vocab), True),
                         "eos_token": self._piece(lib.llama_vocab_eos(vocab), True)}

    def guidance_tokenizer(self) -> Any:
        """llguidance's view of this vocabulary (for structured output); built once (about a second)."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        if getattr(self, "_guidance", None) is None:
            with warnings.catch_warnings():  # llguidance calls a llama_cpp function deprecated per token
                warnings.simplefilter("ignore", DeprecationWarning)
                self._guidance = lltokenizer_from_vocab(self._vocab, eos_token=sorted(self.eos_token_ids))
        return self._guidance

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_special_tokens, True)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def _piece(self, token: int, special: bool) -> bytes:
        if token < 0:
            return b""
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return b"".join(self._piece(int(i), not skip_special_tokens) for i in ids).decode("utf-8", errors="replace")

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self._piece(int(i), True).decode("utf-8", errors="replace") for i in ids]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        if not self.chat_template:
            raise ModelLoadError("this .gguf file has no chat template; use a raw completion instead")
        from transformers.utils.chat_template_utils import render_jinja_template

        special = self.special_tokens()
        offered: list[dict | Callable] | None = list(tools) if tools is not None else None
        # transformers annotates render_jinja_template "-> str"; it returns (rendered chats, generation indices)
        rendered, _ = render_jinja_template(  # type: ignore[str-unpack]
            [messages], tools=offered, chat_template=self.chat_template, add_generation_prompt=add_generation_prompt,
            bos_token=special["bos_token"], eos_token=special["eos_token"])
        return rendered[0]

    def special_tokens(self) -> dict[str, str]:
        """bos_token and eos_token as text (what chat templates write)."""
        return {k: v.decode("utf-8", errors="replace") for k, v in self._special.items()}
