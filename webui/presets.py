"""Sampling presets: YAML files holding only the keys that differ from neutral.

Built-in presets live in the repository's presets/ folder, the user's own in
``<user data>/presets``; a user preset shadows a built-in one of the same name.
text-generation-webui preset files load too, with every sampler it has; the
few keys that are not sampling settings here (beam search, say) are listed in
``Preset.ignored`` with the reason (so the UI can say so), and any other key is
an error naming the key and the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webui.engine.params import InvalidParameter, SamplingParams
from webui.fsutil import atomic_write_text
from webui.names import InvalidName, check_name, inside
from webui.owner import current as current_owner
from webui.owner import folder_name

BUILTIN_PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"

# text-generation-webui keys with the same meaning under another name.
TGWUI_ALIASES = {"ban_eos_token": "ban_eos", "min_length": "min_new_tokens"}
_BEAM = "beam search is another decoding method (it searches several continuations), not a sampler"
_SPEED = "a speed setting of transformers' own generate loop, which this workbench's engine does not use"
# text-generation-webui keys that are not sampling settings here -> (their neutral value, why). Set to their
# neutral value they change nothing there either; set otherwise they are named with the reason, not applied.
NOT_APPLIED: dict[str, tuple[Any, str]] = {
    "num_beams": (1, _BEAM), "length_penalty": (1, _BEAM), "early_stopping": (False, _BEAM),
    "penalty_alpha": (0, "contrastive search is another decoding method, not a sampler"),
    "prompt_lookup_num_tokens": (0, _SPEED), "static_cache": (False, _SPEED),
    "max_tokens_second": (0, "a display throttle of text-generation-webui's UI; streaming here is as fast as the "
                             "model"),
}


class PresetError(ValueError):
    """A preset is missing, malformed or has a bad key or value."""


@dataclass(frozen=True)
class Preset:
    name: str
    params: SamplingParams
    builtin: bool
    ignored: dict[str, str] = field(default_factory=dict)
    """Keys read but not applied -> why."""

    def ignored_text(self) -> str:
        """The keys not applied, grouped by reason ("" when none)."""
        by_reason: dict[str, list[str]] = {}
        for key, reason in self.ignored.items():
            by_reason.setdefault(reason, []).append(key)
        return "; ".join(f"{', '.join(keys)}: {reason}" for reason, keys in by_reason.items())


def parse_preset(data: Any, source: str) -> tuple[SamplingParams, dict[str, str]]:
    """Turn a preset mapping into SamplingParams and the keys not applied (-> why); errors name ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PresetError(f"{source}: a preset must be a mapping of parameter: value, got {type(data).__name__}")
    values: dict[str, Any] = {}
    ignored: dict[str, str] = {}
    for key, value in data.items():
        key = TGWUI_ALIASES[key] if key in TGWUI_ALIASES else key
        if key in NOT_APPLIED:
            neutral, why = NOT_APPLIED[key]
            if value != neutral:
                ignored[key] = why
        elif key == "grammar_string":
            if value:
                values["structured_outputs"] = {"grammar": value}
        elif key not in ("do_sample", "dynamic_temperature_low"):
            values[key] = value
    if "dynamic_temperature_low" in data:  # text-generation-webui before 2024-01: from this up to temperature
        values.update(dynatemp_low=data["dynamic_temperature_low"], dynatemp_high=data.get("temperature", 1.0))
    if data.get("do_sample") is False:  # greedy, whatever the temperature says
        values["temperature"] = 0.0
    try:
        return SamplingParams.from_dict(values, source=source), ignored
    except InvalidParameter as exc:
        raise PresetError(f"{source}: {exc}") from exc


def load_preset_file(path: Path) -> tuple[SamplingParams, dict[str, str]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PresetError(f"preset file '{path}' does not exist") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: not valid YAML: {exc}") from exc
    return parse_preset(data, str(path))


class PresetStore:
    """Built-in presets and the user's own. Without a login the own ones are in ``shared_dir``; a logged-in user's
    are in ``users_dir/<user>/presets``, which no other user sees."""

    def __init__(self, shared_dir: Path, builtin_dir: Path = BUILTIN_PRESETS_DIR, users_dir: Path | None = None):
        self.shared_dir, self.builtin_dir = shared_dir, builtin_dir
        self.users_dir = users_dir if users_dir is not None else shared_dir.parent / "users"

    @property
    def user_dir(self) -> Path:
        owner = current_owner()
        return self.users_dir / folder_name(owner) / "presets" if owner else self.shared_dir

    def names(self) -> list[str]:
        mine = self.user_dir
        found = {p.stem for d in (self.builtin_dir, mine) if d.is_dir() for p in d.glob("*.yaml")}
        return sorted(found, key=str.lower)

    def is_builtin(self, name: str) -> bool:
        return (self.builtin_dir / f"{name}.yaml").is_file()

    def is_own(self, name: str) -> bool:
        """Whether the user has a preset file of this name (one Delete can delete)."""
        try:
            return (self.user_dir / f"{check_name('preset', name)}.yaml").is_file()
        except InvalidName:
            return False

    def _path(self, name: str) -> Path:
        name = check_name("preset", name)
        user = self.user_dir / f"{name}.yaml"  # a user's own preset wins over a built-in of the same name
        if user.is_file():
            return inside("preset", self.user_dir, user)
        builtin = self.builtin_dir / f"{name}.yaml"
        if builtin.is_file():
            return inside("preset", self.builtin_dir, builtin)
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
