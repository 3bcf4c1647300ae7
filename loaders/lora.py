"""LoRA adapters for the transformers loader (peft): checking, loading, and per-sequence selection.

An adapter is a folder with adapter_config.json and adapter_model.safetensors
(or .bin). Before anything touches the model, its tensor shapes are checked
against the loaded model's layers, so an adapter trained for another base model
is refused with the layer and shapes that differ, and the base model is left as
it was. Requests pick adapters per sequence; peft's mixed-batch forward
(``adapter_names``) runs rows with different adapters, or none, in one batch.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any, Sequence

from loaders.base import LoaderError

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch
Selection = tuple[tuple[str, float], ...]  # (adapter name, weight), in order
_ATTACHMENTS = itertools.count(1)  # each attachment of an adapter gets its own number (prefix-cache identity)


class LoRAError(LoaderError):
    """An adapter is missing, malformed or does not fit the loaded model."""


def adapter_files(path: Path) -> tuple[dict[str, Any], Path]:
    """(adapter_config.json contents, weights file) of an adapter folder, or a LoRAError saying what is missing."""
    if not path.is_dir():
        raise LoRAError(f"LoRA adapter '{path.name}' does not exist in {path.parent}")
    config_file = path / "adapter_config.json"
    if not config_file.is_file():
        raise LoRAError(f"'{path.name}' is not a LoRA adapter: the folder has no adapter_config.json "
                        "(save one with peft's save_pretrained)")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise LoRAError(f"'{path.name}/adapter_config.json' is not valid JSON: {exc}") from exc
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise LoRAError(f"'{path.name}' is a {config.get('peft_type')} adapter; only LoRA adapters are supported")
    for name in ("adapter_model.safetensors", "adapter_model.bin"):
        if (path / name).is_file():
            return config, path / name
    raise LoRAError(f"'{path.name}' has no adapter_model.safetensors (or .bin) next to its adapter_config.json")


_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<part>[AB])(?:\.[^.]+)?\.weight$")


def check_fits(model: Any, path: Path) -> None:
    """Refuse an adapter whose LoRA matrices do not match the model's layers (another base model)."""
    _, weights = adapter_files(path)
    if weights.suffix != ".safetensors":
        return  # a .bin cannot be inspected without loading it; peft's own load will check the shapes
    from safetensors import safe_open

    modules = dict(model.named_modules())
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            found = _LORA_KEY.match(key)
            if not found:
                continue
            module_name = found["module"]
            layer = modules.get(module_name) or modules.get(module_name.removeprefix("model."))
            shape = tuple(f.get_slice(key).get_shape())
            if layer is None or not hasattr(layer, "in_features"):
                raise LoRAError(f"adapter '{path.name}' was trained for another base model: this model has no "
                                f"layer '{module_name}'")
            expected = layer.in_features if found["part"] == "A" else layer.out_features
            got = shape[1] if found["part"] == "A" else shape[0]
            if got != expected:
                raise LoRAError(f"adapter '{path.name}' was trained for another base model: its {key} has shape "
                                f"{list(shape)}, but the layer '{module_name}' here has "
                                f"{'in' if found['part'] == 'A' else 'out'}_features {expected}")


def selection_key(selection: Selection) -> str:
    """The peft adapter name for a selection: the adapter itself, or a weighted combination."""
    if not selection:
        return BASE
    if len(selection) == 1 and selection[0][1] == 1.0:
        return selection[0][0]
    # peft refuses adapter names with "." (module paths), so a weight like 0.5 is written 0p5
    return "+".join(f"{name}*{weight:g}".replace(".", "p") for name, weight in selection)


class Adapters:
    """The adapters loaded into one model, wrapping it in a peft model on the first one."""

    def __init__(self, model: Any):
        self.base = model
        self.peft: Any = None
        self.loaded: dict[str, Path] = {}
        self._serials: dict[str, int] = {}  # adapter name -> the number of its current attachment
        self._combined: set[str] = set()

    @property
    def model(self) -> Any:
        """What to call forward on: the peft model once an adapter was loaded, else the base model."""
        return self.peft if self.peft is not None else self.base

    def add(self, name: str, path: Path) -> None:
        if name in self.loaded:
            return
        check_fits(self.base, path)
        try:
            if self.peft is None:
                from peft import PeftModel

                self.peft = PeftModel.from_pretrained(self.base, str(path), adapter_name=name, is_trainable=False)
            else:
                self.peft.load_adapter(str(path), adapter_name=name, is_trainable=False)
        except (RuntimeError, ValueError, KeyError, OSError) as exc:
            self._drop(name)
            raise LoRAError(f"could not load adapter '{name}': {exc}") from exc
        self.peft.eval()
        self.loaded[name] = path
        self._serials[name] = next(_ATTACHMENTS)

    def remove(self, name: str) -> None:
        if name not in self.loaded:
            raise LoRAError(f"adapter '{name}' is not attached")
        for combo in [c for c in self._combined if name in _combo_parts(c)]:
            self._drop(combo)
            self._combined.discard(combo)
        self._drop(name)
        del self.loaded[name]
        self._serials.pop(name, None)
        if not self.loaded and self.peft is not None:
            self.base = self.peft.unload()  # the last one gone: back to the plain base modules
            self.peft = None
            self._combined.clear()

    def _drop(self, name: str) -> None:
        if self.peft is not None and name in self.peft.peft_config:
            self.peft.delete_adapter(name)

    def resolve(self, selection: Selection) -> str:
        """The adapter name to run ``selection`` with, making a weighted combination once if needed."""
        for name, _ in selection:
            if name not in self.loaded:
                raise LoRAError(f"adapter '{name}' is not attached; attach it first (attached: "
                                f"{', '.join(self.loaded) or 'none'})")
        key = selection_key(selection)
        if key == BASE or key in self.loaded or key in self._combined:
            return key
        names, weights = [n for n, _ in selection], [w for _, w in selection]
        self.peft.add_weighted_adapter(names, weights, adapter_name=key, combination_type="cat")
        self._combined.add(key)
        return key

    def identity(self, selection: Selection) -> str:
        """Names what ``selection`` computes with: each adapter's attachment number and weight (a detached and
        re-attached adapter, perhaps another folder under the same name, gets a new identity)."""
        self.resolve(selection)  # refuses adapters that are not attached
        return "\x1f".join(f"{name}#{self._serials[name]}*{weight!r}" for name, weight in selection)

    def identity_live(self, identity: str) -> bool:
        """True while every adapter attachment named in ``identity`` is still attached."""
        for part in filter(None, identity.split("\x1f")):
            name, _, rest = part.rpartition("#")
            if str(self._serials.get(name)) != rest.split("*", 1)[0]:
                return False
        return True

    def names_for(self, keys: Sequence[str]) -> list[str] | None:
        """peft's ``adapter_names`` for a batch, or None when no adapter is loaded at all."""
        return None if self.peft is None else list(keys)


def _combo_parts(key: str) -> list[str]:
    return [part.rsplit("*", 1)[0] for part in key.split("+")]
