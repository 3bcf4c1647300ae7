"""Sampling-setting grids: presets x parameter axes, and the cells (prompt x setting x sample) of a run.

Precedence for one setting: axis value -> preset -> the base (current) params
when no preset is chosen. A preset replaces the base entirely, as choosing it in
the Parameters tab does; add a one-value axis (``max_new_tokens=128``) to pin a
parameter across every setting.

Seeds: cell seed = ``base_seed + sample``, the same for a given sample number
across prompts and settings, so settings are compared on equal seeds and any
cell can be reproduced alone.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.prompts import PromptRow
from webui.batch.run.provider_prompt import ProviderPrompt
from webui.engine.params import MAX_SEED, InvalidParameter, SamplingParams, field_names
from webui.names import InvalidName
from webui.presets import PresetError, PresetStore

LABEL_SEPARATOR = " · "
BASE_LABEL = "current parameters"
DEFAULT_MAX_CELLS = 2000
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Setting:
    """One point of the grid: validated params, the preset it started from (None: the base
    params) and the axis values applied on top."""

    label: str
    params: SamplingParams
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict, hash=False)
    loras: tuple[tuple[str, float], ...] = ()  # LoRA adapters this setting runs with (the "lora" axis)
    model: str | None = None  # the loaded model it runs on (the "model" axis); None: the model in use
    provider: str | None = None  # the promptfoo provider id it came from (its label is ``label``); None: not one
    raw: bool = False  # True: its prompts go to the model as they are, without the chat template (a completion)
    prompt: ProviderPrompt | None = field(default=None, hash=False)
    """A promptfoo provider's prefix/suffix around its prompts and the tools it offers (None: neither)."""


@dataclass
class GridSpec:
    """What to vary. No presets means the ``base`` params (neutral when None) are the start."""

    presets: list[str]
    axes: dict[str, list[Any]]
    samples: int = 1
    base_seed: int = 0
    base: SamplingParams | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``base`` holds only its non-neutral values."""
        return {"presets": list(self.presets), "axes": {k: list(v) for k, v in self.axes.items()},
                "samples": self.samples, "base_seed": self.base_seed,
                "base": None if self.base is None else self.base.changed()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GridSpec":
        """The inverse of :meth:`to_dict`; bad base params are a BatchInputError."""
        try:
            base = None if data.get("base") is None else SamplingParams.from_dict(data["base"], source="grid base")
        except InvalidParameter as exc:
            raise BatchInputError(f"grid: {exc}") from None
        return cls(list(data.get("presets", [])), dict(data.get("axes", {})), int(data.get("samples", 1)),
                   int(data.get("base_seed", 0)), base)


@dataclass(frozen=True)
class Cell:
    """One generation of a batch: a prompt, a setting, a sample number and its seed."""

    row: PromptRow
    setting: Setting
    sample: int
    seed: int

    @property
    def params(self) -> SamplingParams:
        """The setting's params with the row's own over them (a promptfoo prompt's config; its stop strings added
        to the setting's, which hold the chat template's) and this cell's seed, ready for a GenerationRequest."""
        params = self.setting.params
        if self.row.params:
            own = SamplingParams.from_api(self.row.params, params)
            params = own.replace(stop=tuple(dict.fromkeys((*own.stop, *params.stop)))) if "stop" in self.row.params \
                else own
        return params.replace(seed=self.seed)


# -- axes ----------------------------------------------------------------------------

def parse_value(text: str) -> Any:
    """``0`` -> int, ``0.7`` -> float, ``true``/``false`` -> bool, anything else the (stripped) string."""
    text = text.strip()
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """``"temperature=0,0.7,1.2"`` -> ``("temperature", [0, 0.7, 1.2])`` (the CLI --grid flag, the UI).

    Values that hold commas or are not plain (a constraint, a stop list) are given as a JSON list:
    ``structured_outputs=[{"regex": "[0-9]+"}, {"choice": ["yes", "no"]}, {}]``.
    """
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise BatchInputError(f"grid: expected name=value1,value2,... (e.g. temperature=0,0.7,1.2), got '{text}'")
    _check_axis_name(name)
    if values.strip().startswith("["):
        return name, _json_values(name, values.strip())
    parts = [v for v in values.split(",")]
    if not values.strip() or any(not v.strip() for v in parts):
        raise BatchInputError(f"grid: {name} needs comma-separated values without empty ones "
                              f"(e.g. {name}=0,0.7,1.2), got '{values.strip()}'")
    return name, [parse_value(v) for v in parts]


def _json_values(name: str, text: str) -> list[Any]:
    try:
        values = json.loads(text)
    except ValueError as exc:
        raise BatchInputError(f"grid: {name}: values starting with [ are read as a JSON list, and this is not "
                              f"valid JSON ({exc}); e.g. {name}=[{{\"regex\": \"[0-9]+\"}}, {{}}]") from None
    if not isinstance(values, list) or not values:
        raise BatchInputError(f"grid: {name} needs a non-empty JSON list of values, got {text}")
    return values


def parse_axes(lines: str | Iterable[str]) -> dict[str, list[Any]]:
    """Several axes, one per line (or item); blank lines are skipped, a repeated name is an error."""
    items = lines.splitlines() if isinstance(lines, str) else lines
    axes: dict[str, list[Any]] = {}
    for line in items:
        if not line.strip():
            continue
        name, values = parse_axis(line)
        if name in axes:
            raise BatchInputError(f"grid: {name} is given twice; put all its values on one line")
        axes[name] = values
    return axes


LORA_AXIS = "lora"  # not a sampling parameter: which LoRA adapters run ("none", "name", "a+b")
MODEL_AXIS = "model"  # not a sampling parameter: which loaded model runs (its id, e.g. "name@llamacpp")


def parse_loras(value: Any) -> tuple[tuple[str, float], ...]:
    """A "lora" axis value: none, an adapter name, or names joined by + (each optionally name*weight)."""
    text = str(value).strip()
    if text.lower() in ("", "none", "base"):
        return ()
    out = []
    for part in text.split("+"):
        name, _, weight = part.strip().partition("*")
        try:
            out.append((name.strip(), float(weight) if weight else 1.0))
        except ValueError:
            raise BatchInputError(f"grid: lora={text}: the weight after * must be a number") from None
        if not name.strip():
            raise BatchInputError(f"grid: lora={text}: an adapter name is empty")
    return tuple(out)


def _check_axis_name(name: str) -> None:
    if name in (LORA_AXIS, MODEL_AXIS):
        return
    if name == "seed":
        raise BatchInputError("grid: seed cannot be an axis; each sample's seed is base seed + sample number "
                              "(set the base seed and the number of samples instead)")
    if name not in field_names():
        raise BatchInputError(f"grid: unknown sampling parameter '{name}'; known parameters: "
                              f"{', '.join(sorted(field_names() - {'seed'}))} (and the axes {LORA_AXIS}, "
                              f"{MODEL_AXIS})")


def format_value(value: Any) -> str:
    """A value as labels show it: 0.7, 1, true, ###, ["a","b"]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- expansion -----------------------------------------------------------------------

def expand(spec: GridSpec, presets: PresetStore) -> list[Setting]:
    """Every setting of the grid, validated: presets (or the base) x the product of the axes."""
    axes = _checked_axes(spec.axes)
    starts = _starts(spec, presets)
    varying = [name for name, values in axes.items() if len(values) > 1] or list(axes)
    settings: list[Setting] = []
    for preset, base in starts:
        for combo in itertools.product(*axes.values()):
            overrides = dict(zip(axes, combo))
            parts = ([preset] if preset else []) + [f"{n}={format_value(overrides[n])}" for n in varying]
            label = LABEL_SEPARATOR.join(parts) or BASE_LABEL
            loras = parse_loras(overrides[LORA_AXIS]) if LORA_AXIS in overrides else ()
            model = str(overrides[MODEL_AXIS]).strip() if MODEL_AXIS in overrides else None
            if model == "":
                raise BatchInputError("grid: model= needs the names of loaded models (e.g. model=A,B)")
            params = _apply(base, {k: v for k, v in overrides.items() if k not in (LORA_AXIS, MODEL_AXIS)}, label)
            settings.append(Setting(label, params, preset, overrides, loras, model))
    return settings


def _checked_axes(axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
    out = {}
    for name, values in axes.items():
        _check_axis_name(name)
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise BatchInputError(f"grid: {name} has no values")
        seen: set[str] = set()
        for value in values:
            shown = format_value(value)
            if shown in seen:
                raise BatchInputError(f"grid: {name} lists {shown} twice")
            seen.add(shown)
        out[name] = values
    return out


def _starts(spec: GridSpec, presets: PresetStore) -> list[tuple[str | None, SamplingParams]]:
    if not spec.presets:
        return [(None, spec.base or SamplingParams())]
    starts: list[tuple[str | None, SamplingParams]] = []
    for name in spec.presets:
        try:
            preset = presets.get(name)
        except (PresetError, InvalidName) as exc:
            raise BatchInputError(f"grid: {exc}") from None
        if any(preset.name == seen for seen, _ in starts):
            raise BatchInputError(f"grid: preset '{preset.name}' is chosen twice")
        starts.append((preset.name, preset.params))
    return starts


def _apply(base: SamplingParams, overrides: dict[str, Any], label: str) -> SamplingParams:
    try:
        return base.replace(**overrides)
    except InvalidParameter as exc:
        if exc.param in overrides:
            raise BatchInputError(f"grid: {exc.param}={format_value(overrides[exc.param])}: {exc}") from None
        raise BatchInputError(f"grid: {label}: {exc}") from None


# -- planning ------------------------------------------------------------------------

def plan(rows: Sequence[PromptRow], settings: Sequence[Setting], samples: int = 1, base_seed: int = 0,
         max_cells: int = DEFAULT_MAX_CELLS, *, raise_hint: str = "raise max_cells") -> list[Cell]:
    """All cells, setting by setting, then prompt by prompt, then sample by sample; sample k's seed is the base
    seed + k, or the setting's own seed + k when it names one (a promptfoo provider's config). A row that names
    its settings (a promptfoo provider's prompts filter) runs with those only.

    More than ``max_cells`` cells is an error saying how many and how to shrink
    the batch (``raise_hint`` says how to raise the limit where the caller is, e.g.
    "pass --max-cells 5000").
    """
    _check_plan(rows, settings, samples, base_seed)
    pairs = [(setting, row) for setting in settings for row in rows
             if row.settings is None or setting.label in row.settings]
    total = len(pairs) * samples
    if total > max_cells:
        raise BatchInputError(
            f"this batch has {total:,} generations ({len(rows)} prompts x {len(settings)} settings x "
            f"{samples} samples), more than the limit of {max_cells:,}; use fewer prompts, settings or "
            f"samples, or {raise_hint}")
    if not pairs:
        raise BatchInputError("no prompt runs with any setting: each prompt names settings that are not in the run")
    return [Cell(row, setting, sample, (_first_seed(setting, base_seed) + sample) % MAX_SEED)
            for setting, row in pairs for sample in range(samples)]


def _first_seed(setting: Setting, base_seed: int) -> int:
    """A setting's own seed (a promptfoo provider's ``config.seed``) for its first sample; else the base seed."""
    own = setting.params.seed if "seed" in setting.overrides else None
    return base_seed if own is None else own


def _check_plan(rows: Sequence[PromptRow], settings: Sequence[Setting], samples: int, base_seed: int) -> None:
    if not rows:
        raise BatchInputError("no prompts to run; add at least one prompt")
    if not settings:
        raise BatchInputError("no settings to run; choose a preset or keep the current parameters")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise BatchInputError(f"samples must be a whole number >= 1, got {samples!r}")
    if isinstance(base_seed, bool) or not isinstance(base_seed, int) or not 0 <= base_seed <= MAX_SEED - samples + 1:
        raise BatchInputError(f"base seed must be a whole number in [0, {MAX_SEED - samples + 1}], got {base_seed!r}")


def plan_grid(rows: Sequence[PromptRow], spec: GridSpec, presets: PresetStore,
              max_cells: int = DEFAULT_MAX_CELLS, *, raise_hint: str = "raise max_cells") -> list[Cell]:
    """``plan(rows, expand(spec, presets), spec.samples, spec.base_seed, max_cells)``."""
    return plan(rows, expand(spec, presets), spec.samples, spec.base_seed, max_cells, raise_hint=raise_hint)


def estimate_seconds(cells: Sequence[Cell], tokens_per_second: float, max_new_tokens: int | None = None) -> float:
    """A rough upper bound: every cell generating its full token budget, one after another.

    The budget is ``max_new_tokens`` per cell when given, else each setting's own
    max_new_tokens. Batched engines finish sooner; outputs that stop early take less.
    """
    if not tokens_per_second > 0:
        raise ValueError(f"tokens_per_second must be > 0, got {tokens_per_second!r}")
    if max_new_tokens is not None:
        return len(cells) * max_new_tokens / tokens_per_second
    return sum(cell.params.max_new_tokens for cell in cells) / tokens_per_second
