"""Sampling presets: YAML files holding only the keys that differ from neutral.

Built-in presets live in the repository's presets/ folder, the user's own in
``<user data>/presets``; a user preset shadows a built-in one of the same name.
text-generation-webui preset files load too: the keys both tools share are
used, the samplers only it has are listed in ``Preset.ignored`` (so the UI can
say so), and any other key is an error naming the key and the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webui.engine.params import InvalidParameter, SamplingParams
from webui.fsutil import atomic_write_text
from webui.names import check_name

BUILTIN_PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"

# text-generation-webui keys with the same meaning under another name.
TGWUI_ALIASES = {"ban_eos_token": "ban_eos", "min_length": "min_new_tokens"}
# text-generation-webui samplers we do not implement; accepted and reported, not applied.
TGWUI_ONLY_KEYS = frozenset({
    "do_sample", "mirostat_mode", "mirostat_tau",
    "mirostat_eta", "repetition_penalty_range", "encoder_repetition_penalty", "penalty_alpha",
    "guidance_scale", "negative_prompt", "smoothing_factor", "smoothing_curve", "dynamic_temperature",
    "dynatemp_low", "dynatemp_high", "dynatemp_exponent", "temperature_last", "sampler_priority",
    "dry_multiplier", "dry_base", "dry_allowed_length", "dry_sequence_breakers", "xtc_threshold",
    "xtc_probability", "top_n_sigma", "num_beams", "length_penalty", "early_stopping",
    "prompt_lookup_num_tokens", "static_cache", "custom_token_bans", "auto_max_new_tokens",
    "add_bos_token", "skip_special_tokens", "truncation_length", "grammar_string",
})


class PresetError(ValueError):
    """A preset is missing, malformed or has a bad key or value."""


@dataclass(frozen=True)
class Preset:
    name: str
    params: SamplingParams
    builtin: bool
    ignored: tuple[str, ...] = field(default=())


def parse_preset(data: Any, source: str) -> tuple[SamplingParams, tuple[str, ...]]:
    """Turn a preset mapping into SamplingParams; errors name ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PresetError(f"{source}: a preset must be a mapping of parameter: value, got {type(data).__name__}")
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        key = TGWUI_ALIASES.get(key, key)
        if key == "do_sample" and value is False:
            values["temperature"] = 0.0
        elif key in TGWUI_ONLY_KEYS:
            ignored.append(key)
        else:
            values[key] = value
    try:
        return SamplingParams.from_dict(values, source=source), tuple(ignored)
    except InvalidParameter as exc:
        raise PresetError(f"{source}: {exc}") from exc


def load_preset_file(path: Path) -> tuple[SamplingParams, tuple[str, ...]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PresetError(f"preset file '{path}' does not exist") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: not valid YAML: {exc}") from exc
    return parse_preset(data, str(path))


class PresetStore:
    def __init__(self, user_dir: Path, builtin_dir: Path = BUILTIN_PRESETS_DIR):
        self.user_dir, self.builtin_dir = user_dir, builtin_dir

    def names(self) -> list[str]:
        found = {p.stem for d in (self.builtin_dir, self.user_dir) if d.is_dir() for p in d.glob("*.yaml")}
        return sorted(found, key=str.lower)

    def is_builtin(self, name: str) -> bool:
        return (self.builtin_dir / f"{name}.yaml").is_file()

    def _path(self, name: str) -> Path:
        name = check_name("preset", name)
        user = self.user_dir / f"{name}.yaml"
        if user.is_file():
            return user
        builtin = self.builtin_dir / f"{name}.yaml"
        if builtin.is_file():
            return builtin
        raise PresetError(f"unknown preset '{name}'; presets: {', '.join(self.names()) or 'none'}")

    def get(self, name: str) -> Preset:
        path = self._path(name)
        params, ignored = load_preset_file(path)
        return Preset(path.stem, params, path.parent == self.builtin_dir, ignored)

    def save(self, name: str, params: SamplingParams) -> Path:
        """Write a user preset (only the non-neutral keys), atomically."""
        name = check_name("preset", name)
        path = self.user_dir / f"{name}.yaml"
        atomic_write_text(path, yaml.safe_dump(params.changed(), sort_keys=False) if params.changed() else "{}\n")
        return path

    def delete(self, name: str) -> None:
        name = check_name("preset", name)
        path = self.user_dir / f"{name}.yaml"
        if not path.is_file():
            if self.is_builtin(name):
                raise PresetError(f"'{name}' is a built-in preset and cannot be deleted")
            raise PresetError(f"unknown preset '{name}'")
        path.unlink()
