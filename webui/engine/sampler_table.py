"""The steps of the sampling pipeline, one ``SamplerSpec`` each, in the one table ``SAMPLERS``.

Its order is the order they run in by default: CFG and the constraints first (always, in this order), then the
samplers in text-generation-webui's default order, which ``sampler_priority`` can change. Everything else is a
view of it: the default ``sampler_priority`` (``SAMPLER_ORDER``), the steps greedy decoding leaves out
(``draw_only``), the ones ``temperature_last`` moves to the end (``temperature``), and when a step runs
(``active``). How a step is built from its parameters is its processor class's ``build`` (the class, which needs
torch, names its step: ``step = "top_k"``; samplers.py, shaping.py, structured.py); ``sampling.py`` checks on
import that every step here has exactly one class. A new sampler is a SamplingParams field, its class and its row
here. This module needs nothing from the engine, so ``params.py`` (which validates ``sampler_priority`` against
it) stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Protocol


class Settings(Protocol):
    """What a row reads of the parameters (webui.engine.params.SamplingParams, which reads this table: named here
    by what is read, so that neither module imports the other's types)."""

    @property
    def temperature(self) -> float: ...
    @property
    def dynamic_temperature(self) -> bool: ...
    @property
    def ban_eos(self) -> bool: ...
    @property
    def min_new_tokens(self) -> int: ...

    def is_set(self, name: str) -> bool: ...


@dataclass(frozen=True)
class SamplerSpec:
    """One step of the sampling pipeline."""

    name: str
    """As text-generation-webui names it: what ``sampler_priority`` and the UI show."""
    reads: tuple[str, ...]
    """The SamplingParams fields that set it; it runs when the first is not neutral, unless ``when`` says."""
    draw_only: bool = False
    """It only shapes what is drawn: greedy decoding (temperature 0) takes the top token without it."""
    temperature: bool = False
    """Temperature or its kin: ``temperature_last`` moves it after every other sampler."""
    constraint: bool = False
    """CFG or a constraint: always runs first, in table order; not a sampler ``sampler_priority`` can move."""
    when: Callable[[Settings], bool] | None = None
    """Whether parameters turn it on, where that is not "its first field is not neutral"."""

    def active(self, params: Settings) -> bool:
        """Whether ``params`` turn it on (its factory may still find nothing to do, e.g. no end-of-sequence id)."""
        return self.when(params) if self.when is not None else params.is_set(self.reads[0])


def _temperature_on(p: Settings) -> bool:
    return p.temperature != 1.0 and not p.dynamic_temperature  # dynamic temperature replaces it


_PENALTY_RANGE = "repetition_penalty_range"

SAMPLERS: tuple[SamplerSpec, ...] = (
    SamplerSpec("cfg", ("guidance_scale", "negative_prompt"), constraint=True),
    SamplerSpec("structured_outputs", ("structured_outputs",), constraint=True),
    SamplerSpec("logit_bias", ("logit_bias",), constraint=True),
    SamplerSpec("token_bans", ("custom_token_bans",), constraint=True),
    SamplerSpec("eos_ban", ("min_new_tokens", "ban_eos"), constraint=True,
                when=lambda p: p.ban_eos or p.min_new_tokens > 0),
    SamplerSpec("repetition_penalty", ("repetition_penalty", _PENALTY_RANGE)),
    SamplerSpec("presence_penalty", ("presence_penalty", _PENALTY_RANGE)),
    SamplerSpec("frequency_penalty", ("frequency_penalty", _PENALTY_RANGE)),
    SamplerSpec("dry", ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_sequence_breakers", _PENALTY_RANGE)),
    SamplerSpec("top_n_sigma", ("top_n_sigma",), draw_only=True),
    SamplerSpec("temperature", ("temperature", "dynamic_temperature"), draw_only=True, temperature=True,
                when=_temperature_on),
    SamplerSpec("dynamic_temperature", ("dynamic_temperature", "dynatemp_low", "dynatemp_high", "dynatemp_exponent"),
                draw_only=True, temperature=True),
    SamplerSpec("quadratic_sampling", ("smoothing_factor", "smoothing_curve"), draw_only=True, temperature=True),
    SamplerSpec("top_k", ("top_k",), draw_only=True),
    SamplerSpec("top_p", ("top_p",), draw_only=True),
    SamplerSpec("typical_p", ("typical_p",), draw_only=True),
    SamplerSpec("epsilon_cutoff", ("epsilon_cutoff",), draw_only=True),
    SamplerSpec("eta_cutoff", ("eta_cutoff",), draw_only=True),
    SamplerSpec("tfs", ("tfs",), draw_only=True),
    SamplerSpec("top_a", ("top_a",), draw_only=True),
    SamplerSpec("min_p", ("min_p",), draw_only=True),
    SamplerSpec("adaptive_p", ("adaptive_target", "adaptive_decay"), draw_only=True),
    SamplerSpec("mirostat", ("mirostat_mode", "mirostat_tau", "mirostat_eta"), draw_only=True),
    SamplerSpec("xtc", ("xtc_probability", "xtc_threshold"), draw_only=True),
    SamplerSpec("encoder_repetition_penalty", ("encoder_repetition_penalty",)),
    SamplerSpec("no_repeat_ngram", ("no_repeat_ngram_size",)),
)

SAMPLER_SPECS: Mapping[str, SamplerSpec] = MappingProxyType({s.name: s for s in SAMPLERS})
"""Every step by name."""
CONSTRAINTS: tuple[str, ...] = tuple(s.name for s in SAMPLERS if s.constraint)
"""The steps that always run first, in this order."""
SAMPLER_ORDER: tuple[str, ...] = tuple(s.name for s in SAMPLERS if not s.constraint)
"""The samplers ``sampler_priority`` orders, in their default order."""
