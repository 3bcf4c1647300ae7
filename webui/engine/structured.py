"""Structured output: a grammar every generated token must follow, as one step of the sampling pipeline.

Built on llguidance (a maintained Rust library that installs as one small wheel
with no dependencies beside any torch, computes a token mask in well under a
millisecond per step, and takes JSON schema, regular expressions and Lark
grammars; GBNF files, as llama.cpp and text-generation-webui take them, are
converted to Lark). A constraint is one of vLLM's ``structured_outputs`` forms:

    {"json": <schema or schema text>}   {"json_object": true}   {"regex": "..."}
    {"choice": ["yes", "no"]}           {"grammar": "<GBNF or Lark>"}

It is checked when the parameters are made (an invalid schema, regex or grammar
is an error naming the problem), compiled once per tokenizer and grammar, and
copied for each sequence, which advances its own copy token by token.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, Sequence

import torch

from loaders.base import SupportsGuidance

FORMS = ("json", "json_object", "regex", "choice", "grammar")


class StructuredError(ValueError):
    """A constraint that cannot be used; the message says why."""


def grammar_of(form: str, value: Any) -> str:
    """The llguidance grammar for one form (StructuredError when the value is not usable)."""
    import llguidance as llg

    if form == "json":
        schema = value
        if isinstance(value, str):
            try:
                schema = json.loads(value)
            except ValueError as exc:
                raise StructuredError(f"the JSON schema is not valid JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise StructuredError(f"a JSON schema must be an object, got {schema!r}")
        grammar = llg.LLMatcher.grammar_from_json_schema(schema)
    elif form == "json_object":
        if value is not True:
            raise StructuredError(f"json_object must be true, got {value!r}")
        grammar = llg.LLMatcher.grammar_from_json_schema({"type": "object"})
    elif form == "regex":
        if not isinstance(value, str) or not value:
            raise StructuredError(f"regex must be a non-empty string, got {value!r}")
        grammar = llg.LLMatcher.grammar_from_regex(value)
    elif form == "choice":
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(c, str) and c for c in value):
            raise StructuredError(f"choice must be a list of non-empty strings, got {value!r}")
        grammar = llg.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in value))
    elif form == "grammar":
        if not isinstance(value, str) or not value.strip():
            raise StructuredError(f"grammar must be GBNF or Lark text, got {value!r}")
        grammar = llg.LLMatcher.grammar_from_lark(_lark(value))
    else:
        raise StructuredError(f"unknown form '{form}'; forms: {', '.join(FORMS)}")
    error = llg.LLMatcher.validate_grammar(grammar)
    if error:
        raise StructuredError(f"not a valid JSON schema: {error.strip()}" if form == "json"
                              else f"invalid {form}: {error.strip()}")
    return grammar


def _lark(text: str) -> str:
    """GBNF (rules written ``name ::= ...``) converted to Lark; Lark as it is."""
    if "::=" not in text:
        return text
    from llguidance.gbnf_to_lark import gbnf_to_lark

    try:
        return gbnf_to_lark(text)
    except Exception as exc:  # the converter raises plain exceptions for text it cannot read
        raise StructuredError(f"invalid grammar (GBNF): {exc}") from None


@functools.lru_cache(maxsize=64)
def _compiled(lltokenizer: Any, grammar: str) -> Any:
    """One compiled matcher per tokenizer and grammar (a 100-prompt batch with one schema compiles once)."""
    import llguidance as llg

    matcher = llg.LLMatcher(lltokenizer, grammar)
    if matcher.is_error():
        raise StructuredError(matcher.get_error())
    return matcher


class StructuredMask:
    """Masks every token the grammar does not allow next; ``observe`` advances the sequence's own matcher."""

    def __init__(self, grammar: str, lltokenizer: Any):
        self.matcher = _compiled(lltokenizer, grammar).deep_copy()
        self.size = lltokenizer.vocab_size

    def allowed(self) -> torch.Tensor:
        """A bool tensor over the tokenizer's vocabulary: True where the grammar allows the token."""
        import llguidance.torch as lt

        bits = lt.allocate_token_bitmask(1, self.size)
        lt.fill_next_token_bitmask(self.matcher, bits, 0)
        shifts = torch.arange(32, dtype=torch.int32)
        return ((bits[0][:, None] >> shifts) & 1).flatten()[: self.size].bool()

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
        n = min(self.size, logits.shape[-1])
        allowed[:n] = self.allowed()[:n]
        return logits.masked_fill(~allowed.to(logits.device), float("-inf"))

    def observe(self, token: int) -> None:
        if not self.matcher.is_stopped():
            self.matcher.consume_token(token)

    @property
    def done(self) -> bool:
        """The grammar is complete and ended: nothing may follow."""
        return self.matcher.is_stopped()


def mask_for(form_value: tuple, tokenizer: Any) -> Callable | None:
    """The mask for ``(form, value)`` over ``tokenizer``'s vocabulary; None without a tokenizer (a listing)."""
    if tokenizer is None:
        return None
    if not isinstance(tokenizer, SupportsGuidance):
        raise StructuredError("this model's tokenizer cannot constrain output")
    return StructuredMask(grammar_of(*form_value), tokenizer.guidance_tokenizer())
