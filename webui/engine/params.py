"""SamplingParams: the one definition of every sampling knob.

Each field carries a :class:`ParamSpec` (bounds, step, one-line help) in its
dataclass metadata. The UI builds its sliders from it, the API validates with
it, presets are partial dicts over the neutral defaults. Values are normalised
first (``temperature`` 0 means greedy, ``seed`` -1 means random, a single stop
string becomes a tuple) and then checked in one place, with an error that names
the parameter, the value and the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

MAX_SEED = 2**63 - 1
MAX_STOP_STRINGS = 16


class InvalidParameter(ValueError):
    """A sampling parameter has a bad value; ``param`` names it."""

    def __init__(self, param: str, message: str, value: Any = None):
        super().__init__(message)
        self.param = param
        self.value = value


@dataclass(frozen=True)
class ParamSpec:
    """Bounds and help for one numeric field; ``None`` bounds are open-ended."""

    kind: type
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None
    help: str = ""
    min_exclusive: bool = False
    # Values that are normalised away before checking (e.g. top_k -1 -> 0).
    aliases: tuple[tuple[Any, Any], ...] = ()

    def range_text(self) -> str:
        lo = "-inf" if self.minimum is None else _fmt(self.minimum)
        hi = "inf" if self.maximum is None else _fmt(self.maximum)
        return f"{'(' if self.min_exclusive else '['}{lo}, {hi}]"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _param(default: Any, kind: type, lo=None, hi=None, step=None, *, help: str,
           min_exclusive: bool = False, aliases=()) -> Any:
    spec = ParamSpec(kind, lo, hi, step, help, min_exclusive, tuple(aliases))
    return field(default=default, metadata={"spec": spec})


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples its tokens. Defaults are neutral (no effect)."""

    temperature: float = _param(
        1.0, float, 0.0, 5.0, 0.01,
        help="Divides the logits; lower is more focused, 0 means greedy (always the most likely token).")
    top_p: float = _param(
        1.0, float, 0.0, 1.0, 0.01, min_exclusive=True,
        help="Nucleus sampling: keep the smallest set of tokens whose probabilities add up to top_p. 1 disables it.")
    top_k: int = _param(
        0, int, 0, 1000, 1, aliases=((-1, 0),),
        help="Keep only the k most likely tokens. 0 disables it.")
    min_p: float = _param(
        0.0, float, 0.0, 1.0, 0.01,
        help="Drop tokens whose probability is below min_p times the top token's probability. 0 disables it.")
    typical_p: float = _param(
        1.0, float, 0.0, 1.0, 0.01, min_exclusive=True,
        help="Locally typical sampling: keep tokens whose surprise is close to the expected surprise. 1 disables it.")
    repetition_penalty: float = _param(
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True,
        help="Divides the positive logits (multiplies the negative) of tokens already in the prompt or output. 1 disables it.")
    presence_penalty: float = _param(
        0.0, float, -2.0, 2.0, 0.05,
        help="Subtracted once from the logit of every token that already appeared in the output (OpenAI semantics).")
    frequency_penalty: float = _param(
        0.0, float, -2.0, 2.0, 0.05,
        help="Subtracted from a token's logit for each time it already appeared in the output (OpenAI semantics).")
    no_repeat_ngram_size: int = _param(
        0, int, 0, 20, 1,
        help="Never repeat an n-gram of this size that is already in the prompt or output. 0 disables it.")
    max_new_tokens: int = _param(
        512, int, 1, 32768, 1,
        help="The most tokens to generate.")
    min_new_tokens: int = _param(
        0, int, 0, 32768, 1,
        help="End-of-sequence is blocked until this many tokens were generated.")
    stop: tuple[str, ...] = field(default=(), metadata={"help": (
        "Strings that end generation when they appear; they are not part of the output.")})
    seed: int | None = _param(
        None, int, 0, MAX_SEED, 1, aliases=((-1, None),),
        help="Seed for this request's random generator; the same seed repeats the same output. Empty or -1 means random.")
    ban_eos: bool = field(default=False, metadata={"help": (
        "Never end on the end-of-sequence token; generate until max_new_tokens or a stop string.")})
    logit_bias: tuple[tuple[int, float], ...] = field(default=(), metadata={"help": (
        "Added to the logits of the given token ids before sampling, as {token_id: bias} with bias in "
        "[-100, 100]; -100 bans a token, 100 forces it.")})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = _normalise(f, getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        if self.min_new_tokens > self.max_new_tokens:
            raise InvalidParameter(
                "min_new_tokens",
                f"min_new_tokens must be <= max_new_tokens ({self.max_new_tokens}), got {self.min_new_tokens}",
                self.min_new_tokens)

    # -- construction -----------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "") -> "SamplingParams":
        """Neutral defaults overridden by ``values``; an unknown key is an error."""
        return cls().replace(source=source, **values)

    def replace(self, source: str = "", **changes: Any) -> "SamplingParams":
        """A validated copy with ``changes`` applied."""
        known = field_names()
        for key in changes:
            if key not in known:
                where = f" in {source}" if source else ""
                raise InvalidParameter(key, f"unknown sampling parameter '{key}'{where}; "
                                            f"known parameters: {', '.join(sorted(known))}", key)
        return dataclasses.replace(self, **changes)

    # -- views --------------------------------------------------------------
    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop)
        d["logit_bias"] = {str(t): b for t, b in self.logit_bias}
        return d

    def changed(self) -> dict[str, Any]:
        """Only the fields that differ from neutral (what a preset file stores)."""
        neutral = SamplingParams().to_dict()
        return {k: v for k, v in self.to_dict().items() if neutral[k] != v}


def field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(SamplingParams)}


def param_fields() -> list[tuple[str, Any, ParamSpec | None, str]]:
    """(name, neutral default, spec or None, help) for every field, in order."""
    out = []
    for f in dataclasses.fields(SamplingParams):
        spec = f.metadata.get("spec")
        out.append((f.name, f.default, spec, spec.help if spec else f.metadata["help"]))
    return out


def _normalise(f: dataclasses.Field, value: Any) -> Any:
    name = f.name
    if name == "stop":
        return _check_stop(value)
    if name == "logit_bias":
        return _check_logit_bias(value)
    if name == "ban_eos":
        if not isinstance(value, bool):
            raise InvalidParameter(name, f"ban_eos must be true or false, got {value!r}", value)
        return value
    spec: ParamSpec = f.metadata["spec"]
    for alias, meaning in spec.aliases:
        if value is not None and not isinstance(value, bool) and value == alias:
            value = meaning
    if value is None:
        if f.default is None:
            return None
        raise InvalidParameter(name, f"{name} must be a number in {spec.range_text()}, got None", value)
    value = _coerce(name, value, spec)
    lo, hi = spec.minimum, spec.maximum
    too_low = lo is not None and (value <= lo if spec.min_exclusive else value < lo)
    if too_low or (hi is not None and value > hi) or (isinstance(value, float) and math.isnan(value)):
        raise InvalidParameter(name, f"{name} must be in {spec.range_text()}, got {value!r}", value)
    if name == "temperature" and value < 1e-5:
        return 0.0
    return value


def _coerce(name: str, value: Any, spec: ParamSpec) -> int | float:
    what = "an integer" if spec.kind is int else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameter(name, f"{name} must be {what} in {spec.range_text()}, got {value!r}", value)
    if spec.kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise InvalidParameter(name, f"{name} must be {what} in {spec.range_text()}, got {value!r}", value)
            value = int(value)
        return value
    return float(value)


def _check_stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise InvalidParameter("stop", f"stop must be a string or a list of strings, got {value!r}", value)
    if any(s == "" for s in value):
        raise InvalidParameter("stop", "stop strings must not be empty", value)
    if len(value) > MAX_STOP_STRINGS:
        raise InvalidParameter("stop", f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(value)}", value)
    return tuple(dict.fromkeys(value))


MAX_LOGIT_BIAS = 300


def _check_logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """{token_id: bias} (keys may be strings, as JSON has them) -> sorted ((id, bias), ...)."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        raise InvalidParameter("logit_bias", f"logit_bias must map token ids to biases, got {value!r}", value)
    if len(pairs) > MAX_LOGIT_BIAS:
        raise InvalidParameter("logit_bias", f"logit_bias may hold at most {MAX_LOGIT_BIAS} tokens, got {len(pairs)}",
                               value)
    out = {}
    for key, bias in pairs:
        token = int(key) if isinstance(key, str) and key.strip().isdigit() else key
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise InvalidParameter("logit_bias", f"logit_bias keys must be token ids (integers >= 0), got {key!r}",
                                   value)
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise InvalidParameter("logit_bias", f"logit_bias values must be numbers in [-100, 100], got {bias!r} "
                                                 f"for token {token}", value)
        out[token] = float(bias)
    return tuple(sorted(out.items()))
