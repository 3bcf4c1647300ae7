"""SamplingParams: the one definition of every sampling knob.

Each field carries a :class:`ParamSpec` in its dataclass metadata: bounds, step
and one-line help, the OpenAI request field that sets it (and whether that is a
standard OpenAI field or one of vLLM's / text-generation-webui's extras), the
control the UI shows, and hooks for values that are not plain numbers. The UI
builds its controls from it, the API derives its request fields and error names
from it, the remote loader and reproduce records their request bodies, and the
user guide's table is checked against it: adding a field here is the whole
definition. Values are normalised first (``temperature`` 0 means greedy,
``seed`` -1 means random, a single stop string becomes a tuple) and then
checked in one place, with an error that names the parameter (by the name the
caller used), the value and the allowed range. A sampler's step in the pipeline
(its name, the fields that set it, its place in the default
``sampler_priority``) is one row of ``sampler_table.SAMPLERS``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from webui.engine.sampler_table import SAMPLER_ORDER

MAX_SEED = 2**63 - 1
MAX_STOP_STRINGS = 16
# characters of one stop string: the matcher holds back every prefix of each, so its work grows with the square
MAX_STOP_CHARS = 1000
MAX_LOGIT_BIAS = 300
MAX_TOKEN_BANS = 1000

DRY_BREAKERS = ("\n", ":", '"', "*")


class InvalidParameter(ValueError):
    """A sampling parameter has a bad value; ``param`` names it as the caller knows it (an API name, say)."""

    def __init__(self, param: str, message: str, value: Any = None):
        super().__init__(message)
        self.param = param
        self.value = value


@dataclass(frozen=True)
class ParamSpec:
    """One field's bounds, help, API name and control; ``None`` bounds are open-ended."""

    kind: type
    """int, float or bool; anything else has a ``check`` hook."""
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None
    help: str = ""
    min_exclusive: bool = False
    aliases: tuple[tuple[Any, Any], ...] = ()
    """Values normalised away before checking (e.g. top_k -1 -> 0)."""
    api_name: str = ""
    """The OpenAI request field that sets it, where it differs from the field's own name."""
    openai: bool = False
    """A standard OpenAI field (always sent); False: an extra (vLLM, text-generation-webui) sent only when set."""
    api_type: Any = None
    """The request field's type (pydantic checks it before ``check``); None: ``kind | None``."""
    check: Callable[[str, Any], Any] | None = None
    """(shown name, value) -> the normalised value, or InvalidParameter; for values that are not numbers."""
    to_json: Callable[[Any], Any] | None = None
    """The normalised value as JSON has it (records, presets, request bodies)."""
    from_api: Callable[[Any], Any] | None = None
    """A request's value -> ours, before ``check`` (e.g. OpenAI's signed seeds into our range)."""
    widget: str = "slider"
    """The UI control: slider, number, checkbox, lines (one string a line), text (``to_text`` writes it), json,
    or constraint (a form and its text, held as JSON)."""
    to_text: Callable[[Any], str] | None = None
    """The value as a "text" control shows it (``check`` reads it back)."""
    group: str = "Sampling"
    """The heading the UI shows it under."""

    def range_text(self) -> str:
        if self.minimum is None and self.maximum is None:
            return ""
        lo = "-inf" if self.minimum is None else _fmt(self.minimum)
        hi = "inf" if self.maximum is None else _fmt(self.maximum)
        return f"{'(' if self.min_exclusive else '['}{lo}, {hi}]"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _param(default: Any, kind: type, lo: float | None = None, hi: float | None = None, step: float | None = None, *,
           help: str, min_exclusive: bool = False, aliases: Iterable[tuple[Any, Any]] = (), **spec: Any) -> Any:
    return field(default=default, metadata={"spec": ParamSpec(kind, lo, hi, step, help, min_exclusive,
                                                               tuple(aliases), **spec)})


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidParameter(name, f"{name} must be true or false, got {value!r}", value)
    return value


def _check_stop(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise InvalidParameter(name, f"{name} must be a string or a list of strings, got {value!r}", value)
    if any(s == "" for s in value):
        raise InvalidParameter(name, f"{name} strings must not be empty", value)
    if len(value) > MAX_STOP_STRINGS:
        raise InvalidParameter(name, f"at most {MAX_STOP_STRINGS} {name} strings are allowed, got {len(value)}",
                               value)
    longest = max(len(s) for s in value) if value else 0
    if longest > MAX_STOP_CHARS:
        raise InvalidParameter(name, f"{name} strings are at most {MAX_STOP_CHARS} characters long, got one of "
                                     f"{longest}", value)
    return tuple(dict.fromkeys(value))


def _strings(name: str, value: Any, what: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise InvalidParameter(name, f"{name} must be {what}, got {value!r}", value)
    return list(value)


def _check_priority(name: str, value: Any) -> tuple[str, ...]:
    """Sampler names (a list, or one text a name per line or comma-separated) -> the whole order: the samplers
    left out run first in the default order, as text-generation-webui runs them."""
    if value is None:
        return SAMPLER_ORDER
    if isinstance(value, str):
        value = value.replace(",", "\n").splitlines()
    given = [s.strip() for s in _strings(name, value, "a list of sampler names") if s.strip()]
    unknown = [s for s in given if s not in SAMPLER_ORDER]
    if unknown:
        raise InvalidParameter(name, f"{name}: unknown sampler {unknown[0]!r}; samplers: {', '.join(SAMPLER_ORDER)}",
                               value)
    given = list(dict.fromkeys(given))
    return tuple([s for s in SAMPLER_ORDER if s not in given] + given)


def _check_breakers(name: str, value: Any) -> tuple[str, ...]:
    """A list of strings, or text-generation-webui's text form: quoted strings separated by commas."""
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text if text.startswith("[") else f"[{text}]")
        except ValueError:
            raise InvalidParameter(name, f'{name} must be quoted strings separated by commas, like "\\n", ":", '
                                         f"got {text!r}", value) from None
    breakers = _strings(name, value, "a list of strings")
    if any(s == "" for s in breakers):
        raise InvalidParameter(name, f"{name} strings must not be empty", value)
    return tuple(dict.fromkeys(breakers))


def _check_token_ids(name: str, value: Any) -> tuple[int, ...]:
    """Token ids: a list of integers, or text with ids separated by commas (text-generation-webui's form)."""
    if value is None:
        return ()
    items = value.replace("\n", ",").split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidParameter(name, f"{name} must be token ids separated by commas, got {value!r}", value)
    ids = []
    for item in items:
        if isinstance(item, str):
            item = item.strip()
            if not item:
                continue
            item = int(item) if item.isdigit() else item
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InvalidParameter(name, f"{name} must be token ids (integers >= 0) separated by commas, "
                                         f"got {item!r}", value)
        ids.append(item)
    if len(ids) > MAX_TOKEN_BANS:
        raise InvalidParameter(name, f"{name} may hold at most {MAX_TOKEN_BANS} tokens, got {len(ids)}", value)
    return tuple(sorted(set(ids)))


def _check_text(name: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidParameter(name, f"{name} must be a string, got {value!r}", value)
    return value


MAX_STRUCTURED_CHARS = 100_000
"""The longest constraint taken (a schema, regex, grammar or choice list, as text)."""


def _check_structured(name: str, value: Any) -> tuple:
    """vLLM's structured_outputs: {form: value} with one form -> (form, value) (a schema as JSON text)."""
    from webui.engine.structured import FORMS, StructuredError, grammar_of

    if value is None or value == {} or value == ():
        return ()
    if isinstance(value, tuple) and len(value) == 2 and value[0] in FORMS:
        return value  # already checked and normalised (every replace() normalises all fields again)
    forms = [k for k in value if value[k] is not None] if isinstance(value, Mapping) else None
    if forms is None or len(forms) != 1 or forms[0] not in FORMS:
        raise InvalidParameter(name, f"{name} must hold one of {', '.join(FORMS)}, like {{\"regex\": \"[0-9]+\"}}, "
                                     f"got {value!r}", value)
    form, given = forms[0], value[forms[0]]
    size = len(given) if isinstance(given, str) else len(json.dumps(given, ensure_ascii=False, default=str))
    if size > MAX_STRUCTURED_CHARS:  # compiling a 10 MB regex held the server for seconds (#43)
        raise InvalidParameter(name, f"{name}: the {form} is {size:,} characters; at most {MAX_STRUCTURED_CHARS:,} "
                                     "are taken", "…")
    try:
        grammar_of(form, given)
    except StructuredError as exc:
        raise InvalidParameter(name, f"{name}: {exc}", value) from None
    if form == "json":
        return form, json.dumps(json.loads(given) if isinstance(given, str) else given)  # property order kept
    return form, tuple(given) if form == "choice" else given


def _structured_json(pair: tuple) -> dict:
    if not pair:
        return {}
    form, value = pair
    return {form: json.loads(value) if form == "json" else list(value) if form == "choice" else value}


def _check_logit_bias(name: str, value: Any) -> tuple[tuple[int, float], ...]:
    """{token_id: bias} (keys may be strings, as JSON has them) -> sorted ((id, bias), ...)."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        raise InvalidParameter(name, f"{name} must map token ids to biases, got {value!r}", value)
    if len(pairs) > MAX_LOGIT_BIAS:
        raise InvalidParameter(name, f"{name} may hold at most {MAX_LOGIT_BIAS} tokens, got {len(pairs)}", value)
    out = {}
    for key, bias in pairs:
        token = int(key) if isinstance(key, str) and key.strip().isdigit() else key
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise InvalidParameter(name, f"{name} keys must be token ids (integers >= 0), got {key!r}", value)
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise InvalidParameter(name, f"{name} values must be numbers in [-100, 100], got {bias!r} "
                                         f"for token {token}", value)
        out[token] = float(bias)
    return tuple(sorted(out.items()))


REPETITION, TEMPERATURE, ADAPTIVE, LENGTH = ("Repetition", "Temperature shaping", "Mirostat and adaptive-p",
                                            "Length, stops and tokens")
GUIDANCE = "Guidance (CFG)"


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples its tokens. Defaults are neutral (no effect)."""

    temperature: float = _param(
        1.0, float, 0.0, 5.0, 0.01, openai=True,
        help="Divides the logits; lower is more focused, 0 means greedy (always the most likely token).")
    top_p: float = _param(
        1.0, float, 0.0, 1.0, 0.01, min_exclusive=True, openai=True,
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
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True, group=REPETITION,
        help="Divides the positive logits (multiplies the negative) of tokens already in the prompt or output. 1 disables it.")
    presence_penalty: float = _param(
        0.0, float, -2.0, 2.0, 0.05, openai=True, group=REPETITION,
        help="Subtracted once from the logit of every token that already appeared in the output (OpenAI semantics).")
    frequency_penalty: float = _param(
        0.0, float, -2.0, 2.0, 0.05, openai=True, group=REPETITION,
        help="Subtracted from a token's logit for each time it already appeared in the output (OpenAI semantics).")
    top_n_sigma: float = _param(
        0.0, float, 0.0, 5.0, 0.01,
        help="Keep tokens whose logit is within n standard deviations of the top logit (after temperature). "
             "0 disables it.")
    tfs: float = _param(
        1.0, float, 0.0, 1.0, 0.01, min_exclusive=True,
        help="Tail-free sampling: cut the tail where the sorted probabilities stop curving; lower cuts more. "
             "1 disables it.")
    top_a: float = _param(
        0.0, float, 0.0, 1.0, 0.01,
        help="Drop tokens whose probability is below top_a times the square of the top token's. 0 disables it.")
    epsilon_cutoff: float = _param(
        0.0, float, 0.0, 9.0, 0.01,
        help="Drop tokens whose probability is below this many ten-thousandths (3 = 0.0003). 0 disables it.")
    eta_cutoff: float = _param(
        0.0, float, 0.0, 20.0, 0.01,
        help="Eta sampling, in ten-thousandths: a cutoff that drops as the distribution's entropy rises. "
             "0 disables it.")
    xtc_threshold: float = _param(
        0.1, float, 0.0, 0.5, 0.01,
        help="XTC: when two or more tokens are at least this likely, all but the least likely of them are "
             "removed (with xtc_probability).")
    xtc_probability: float = _param(
        0.0, float, 0.0, 1.0, 0.01,
        help="XTC (exclude top choices): how often the removal happens, drawn from the request's seeded generator; "
             "never when it would remove a newline or end-of-sequence. 0 disables it.")
    dynamic_temperature: bool = _param(
        False, bool, check=_check_bool, widget="checkbox", group=TEMPERATURE,
        help="Replace temperature by one between dynatemp_low and dynatemp_high, higher where the model is unsure "
             "(the distribution's normalised entropy to the power dynatemp_exponent).")
    dynatemp_low: float = _param(
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True, group=TEMPERATURE,
        help="Dynamic temperature: the temperature when the model is certain.")
    dynatemp_high: float = _param(
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True, group=TEMPERATURE,
        help="Dynamic temperature: the temperature when every token is equally likely.")
    dynatemp_exponent: float = _param(
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True, group=TEMPERATURE,
        help="Dynamic temperature: how the entropy maps between low and high (1 linear; higher stays low longer).")
    smoothing_factor: float = _param(
        0.0, float, 0.0, 10.0, 0.01, group=TEMPERATURE,
        help="Quadratic sampling: bends the logits around the top one; higher is more focused, lower flatter. "
             "0 disables it.")
    smoothing_curve: float = _param(
        1.0, float, 1.0, 10.0, 0.01, group=TEMPERATURE,
        help="Quadratic sampling: how steeply the unlikely tokens fall off (1 a plain quadratic).")
    temperature_last: bool = _param(
        False, bool, check=_check_bool, widget="checkbox", group=TEMPERATURE,
        help="Run temperature, dynamic temperature and quadratic sampling after every other sampler, "
             "whatever sampler_priority says.")
    mirostat_mode: int = _param(
        0, int, 0, 2, 2, group=ADAPTIVE,
        help="2 turns on Mirostat v2: truncation that steers each token's surprise towards mirostat_tau. "
             "0 disables it (v1 is not offered).")
    mirostat_tau: float = _param(
        5.0, float, 0.0, 10.0, 0.01, group=ADAPTIVE,
        help="Mirostat: the target surprise, in bits; lower is more focused.")
    mirostat_eta: float = _param(
        0.1, float, 0.0, 1.0, 0.01, group=ADAPTIVE,
        help="Mirostat: how fast it adapts to the surprise of the tokens it picked.")
    adaptive_target: float = _param(
        0.0, float, 0.0, 1.0, 0.01, group=ADAPTIVE,
        help="Adaptive-p: favour tokens near this probability, steered by the probabilities picked so far. "
             "0 disables it.")
    adaptive_decay: float = _param(
        0.9, float, 0.0, 0.99, 0.01, group=ADAPTIVE,
        help="Adaptive-p: how long it remembers (about 1 / (1 - decay) tokens).")
    no_repeat_ngram_size: int = _param(
        0, int, 0, 20, 1, group=REPETITION,
        help="Never repeat an n-gram of this size that is already in the prompt or output. 0 disables it.")
    repetition_penalty_range: int = _param(
        0, int, 0, 32768, 64, group=REPETITION,
        help="How many of the last tokens repetition_penalty, presence/frequency penalty and DRY look at. "
             "0 means all.")
    encoder_repetition_penalty: float = _param(
        1.0, float, 0.0, 5.0, 0.01, min_exclusive=True, group=REPETITION,
        help="Above 1 favours tokens that are in the prompt (a hallucination filter); below 1 avoids them. "
             "1 disables it.")
    dry_multiplier: float = _param(
        0.0, float, 0.0, 5.0, 0.01, group=REPETITION,
        help="DRY: penalise a token that would extend a sequence already in the text; 0.8 is typical. "
             "0 disables it.")
    dry_base: float = _param(
        1.75, float, 1.0, 4.0, 0.01, group=REPETITION,
        help="DRY: how fast the penalty grows with the length of the repeated sequence.")
    dry_allowed_length: int = _param(
        2, int, 1, 20, 1, group=REPETITION,
        help="DRY: the longest sequence that may be repeated without a penalty.")
    dry_sequence_breakers: tuple[str, ...] = _param(
        DRY_BREAKERS, tuple, api_type=str | list[str], check=_check_breakers, to_json=list, widget="text",
        to_text=lambda breakers: ", ".join(json.dumps(b) for b in breakers), group=REPETITION,
        help='DRY: strings a repeated sequence does not continue across, quoted and separated by commas.')
    max_new_tokens: int = _param(
        512, int, 1, 32768, 1, api_name="max_tokens", openai=True, widget="number", group=LENGTH,
        help="The most tokens to generate.")
    min_new_tokens: int = _param(
        0, int, 0, 32768, 1, api_name="min_tokens", widget="number", group=LENGTH,
        help="End-of-sequence is blocked until this many tokens were generated.")
    stop: tuple[str, ...] = _param(
        (), tuple, openai=True, api_type=str | list[str], check=_check_stop, to_json=list, widget="lines", group=LENGTH,
        help="Strings that end generation when they appear; they are not part of the output.")
    seed: int | None = _param(
        None, int, 0, MAX_SEED, 1, aliases=((-1, None),), openai=True, widget="number", group=LENGTH,
        # OpenAI takes any int64 seed; ours are 0..2^63-1, so a negative seed maps into that range
        from_api=lambda seed: seed % (MAX_SEED + 1),
        help="Seed for this request's random generator; the same seed repeats the same output. Empty or -1 means random.")
    ban_eos: bool = _param(
        False, bool, api_name="ignore_eos", check=_check_bool, widget="checkbox", group=LENGTH,
        help="Never end on the end-of-sequence token; generate until max_new_tokens or a stop string.")
    logit_bias: tuple[tuple[int, float], ...] = _param(
        (), dict, openai=True, api_type=dict[str, float], check=_check_logit_bias, widget="json", group=LENGTH,
        to_json=lambda pairs: {str(t): b for t, b in pairs},
        help=("Added to the logits of the given token ids before sampling, as {token_id: bias} with bias in "
              "[-100, 100]; -100 bans a token, 100 forces it."))
    guidance_scale: float = _param(
        1.0, float, -0.5, 2.5, 0.05, group=GUIDANCE,
        help="CFG: steer each token away from what the negative prompt would make likely (1.5 is a good start); "
             "it runs the negative prompt as a second sequence beside the request. 1 disables it.")
    negative_prompt: str = _param(
        "", str, check=_check_text, widget="text", to_text=str, group=GUIDANCE,
        help="CFG: the text to steer away from; empty means the prompt's last token alone.")
    auto_max_new_tokens: bool = _param(
        False, bool, check=_check_bool, widget="checkbox", group=LENGTH,
        help="Generate up to the end of the context (or truncation_length), whatever max_new_tokens says.")
    truncation_length: int = _param(
        0, int, 0, 1048576, 1, widget="number", group=LENGTH,
        help="Cut the prompt's oldest tokens so that it and max_new_tokens fit in this many tokens (capped at the "
             "model's context). 0: never cut; a prompt too long is an error.")
    add_bos_token: bool = _param(
        True, bool, check=_check_bool, widget="checkbox", group=LENGTH,
        help="Let the tokenizer add its beginning-of-sequence token to a raw prompt (a chat template decides "
             "for chat prompts).")
    skip_special_tokens: bool = _param(
        True, bool, check=_check_bool, widget="checkbox", group=LENGTH,
        help="Leave special tokens (like <|im_end|>) out of the text; some models need them shown.")
    structured_outputs: tuple = _param(
        (), dict, api_type=dict[str, Any], check=_check_structured, to_json=_structured_json, widget="constraint",
        group="Constrain output",
        help=('Constrain the output: {"json": schema}, {"json_object": true}, {"regex": "..."}, '
              '{"choice": ["yes", "no"]} or {"grammar": "GBNF or Lark"}; every token must fit it.'))
    custom_token_bans: tuple[int, ...] = _param(
        (), tuple, api_type=str | list[int], check=_check_token_ids, to_json=list, widget="text", group=LENGTH,
        to_text=lambda ids: ", ".join(map(str, ids)),
        help="Token ids never to generate, separated by commas (the Insight tab shows a token's id).")
    sampler_priority: tuple[str, ...] = _param(
        SAMPLER_ORDER, tuple, api_type=str | list[str], check=_check_priority, to_json=list, widget="lines",
        group="Sampler order",
        help="The order the samplers run in, one a line; those left out run first. Only the ones set (not "
             "neutral) run; logit bias and token bans always come first.")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _normalise(f, getattr(self, f.name), f.name))
        _check_together(vars(self), {})

    # -- construction -----------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "") -> "SamplingParams":
        """Neutral defaults overridden by ``values``; an unknown key is an error."""
        return cls().replace(source=source, **values)

    def replace(self, source: str = "", names: Mapping[str, str] | None = None, **changes: Any) -> "SamplingParams":
        """A validated copy with ``changes`` applied; errors call each field what ``names`` maps it to."""
        names = names or {}
        fields = {f.name: f for f in dataclasses.fields(self)}
        for key in changes:
            if key not in fields:
                where = f" in {source}" if source else ""
                raise InvalidParameter(key, f"unknown sampling parameter '{key}'{where}; "
                                            f"known parameters: {', '.join(sorted(fields))}", key)
        checked = {k: _normalise(fields[k], v, names.get(k, k)) for k, v in changes.items()}
        _check_together({name: getattr(self, name) for name in fields} | checked, names)
        return dataclasses.replace(self, **checked)

    @classmethod
    def from_api(cls, fields: Mapping[str, Any], base: "SamplingParams | None" = None,
                 names: Mapping[str, str] | None = None) -> "SamplingParams":
        """``base`` (neutral) overridden by the request fields that are set (not None), named as the API names
        them; ``names`` overrides an API name (e.g. max_completion_tokens for max_new_tokens)."""
        names = {**api_names(), **(names or {})}
        changes = {}
        for name, spec in specs().items():
            value = fields.get(names[name])
            if value is not None:
                changes[name] = spec.from_api(value) if spec.from_api else value
        return (base or cls()).replace(names=names, **changes)

    # -- views --------------------------------------------------------------
    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def is_set(self, name: str) -> bool:
        """Whether field ``name`` differs from its neutral value (what turns most samplers on)."""
        return getattr(self, name) != self.__dataclass_fields__[name].default

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON has it."""
        return {name: spec.to_json(getattr(self, name)) if spec.to_json else getattr(self, name)
                for name, spec in specs().items()}

    def changed(self) -> dict[str, Any]:
        """Only the fields that differ from neutral (what a preset file stores)."""
        neutral = SamplingParams().to_dict()
        return {k: v for k, v in self.to_dict().items() if neutral[k] != v}

    def api_body(self) -> dict[str, Any]:
        """The OpenAI request fields that give these parameters: standard fields whenever they have a value,
        extras (vLLM's, text-generation-webui's) only where they differ from neutral, so strict servers are not
        sent fields they reject."""
        values, neutral, names = self.to_dict(), SamplingParams().to_dict(), api_names()
        return {names[k]: v for k, v in values.items()
                if (v not in (None, [], {}) if specs()[k].openai else v != neutral[k])}


def specs() -> dict[str, ParamSpec]:
    """Every field's spec, in declaration order."""
    return {f.name: f.metadata["spec"] for f in dataclasses.fields(SamplingParams)}


def check_value(name: str, value: Any) -> Any:
    """One field's value normalised and checked on its own (the rules between fields aside); InvalidParameter
    names it."""
    field = next(f for f in dataclasses.fields(SamplingParams) if f.name == name)
    return _normalise(field, value, name)


def api_names() -> dict[str, str]:
    """Field -> the OpenAI request field that sets it."""
    return {name: spec.api_name or name for name, spec in specs().items()}


def field_names() -> set[str]:
    return set(specs())


def param_fields() -> list[tuple[str, Any, ParamSpec, str]]:
    """(name, neutral default, spec, help) for every field, in order."""
    return [(f.name, f.default, f.metadata["spec"], f.metadata["spec"].help)
            for f in dataclasses.fields(SamplingParams)]


def _check_together(values: Mapping[str, Any], names: Mapping[str, str]) -> None:
    """Rules between fields, on normalised ``values``; errors call fields what ``names`` maps them to."""
    if values["mirostat_mode"] == 1:
        name = names.get("mirostat_mode", "mirostat_mode")
        raise InvalidParameter(name, f"{name} 1 (Mirostat v1) is not offered; use 2 (Mirostat v2) or 0 (off)", 1)
    low, high = values["min_new_tokens"], values["max_new_tokens"]
    if low > high:
        lo, hi = names.get("min_new_tokens", "min_new_tokens"), names.get("max_new_tokens", "max_new_tokens")
        raise InvalidParameter(lo, f"{lo} must be <= {hi} ({high}), got {low}", low)


def _normalise(f: dataclasses.Field, value: Any, name: str) -> Any:
    spec: ParamSpec = f.metadata["spec"]
    if spec.check is not None:
        return spec.check(name, value)
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
    if f.name == "temperature" and value < 1e-5:
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
