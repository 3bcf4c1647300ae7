"""The loader registry: register / get / list.

A loader package exposes one hook, ``register_loaders(register)``, and names it
in the ``llm_workbench.loaders`` entry-point group. Built-in loaders use the
very same hook and are declared in our own pyproject.toml; when the project
runs from a source tree that was never pip-installed, the built-in hooks are
found by module name instead.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from loaders.base import BaseLoader, Loader, LoaderError, LoaderStatus, missing_module

OPTIONAL_PARTS = ("options", "takes_dtype", "smaller_load", "unavailable_reason", "estimate_bytes")
"""The parts of ``Loader`` that BaseLoader gives a default for."""

ENTRY_POINT_GROUP = "llm_workbench.loaders"
BUILTIN_HOOKS = ("loaders.transformers_loader:register_loaders", "loaders.llamacpp_loader:register_loaders",
                 "loaders.gptq_loader:register_loaders", "loaders.exllamav2_loader:register_loaders",
                 "loaders.remote_loader:register_loaders", "loaders.embedding_loader:register_loaders")

RegisterHook = Callable[[Callable[[Loader], None]], None]


class UnknownLoader(LoaderError):
    pass


class LoaderRegistry:
    def __init__(self) -> None:
        self._loaders: dict[str, Loader] = {}

    def register(self, loader: Loader) -> None:
        """Add a loader. One that does not subclass BaseLoader (a third party's, say) gets BaseLoader's default
        for each part of the contract it leaves out, here, once: no caller probes for a part."""
        if loader.name in self._loaders:
            raise LoaderError(f"a loader named '{loader.name}' is already registered")
        defaults = BaseLoader()
        for part in OPTIONAL_PARTS:
            if not hasattr(loader, part):
                setattr(loader, part, getattr(defaults, part))
        self._loaders[loader.name] = loader

    def unregister(self, name: str) -> None:
        self._loaders.pop(name, None)

    def names(self) -> list[str]:
        return list(self._loaders)

    def get(self, name: str) -> Loader:
        try:
            return self._loaders[name]
        except KeyError:
            raise UnknownLoader(f"unknown loader '{name}'; available loaders: "
                                f"{', '.join(self._loaders) or 'none'}") from None

    def status(self) -> list[LoaderStatus]:
        """Every loader with whether its backend is installed, and how to install it if not."""
        out = []
        for loader in self._loaders.values():
            missing = missing_module(loader.requires)
            reason = f"missing package '{missing}'" if missing else ""
            if other := loader.unavailable_reason():  # e.g. a GPU the machine does not have
                reason = f"{other}; {reason}" if reason else other
            out.append(LoaderStatus(loader.name, loader.description, not reason, reason, loader.install_hint,
                                    loader.capabilities))
        return out

    def can_read(self, path: Path) -> bool:
        """Whether any registered loader reads ``path`` (installed or not): what counts as a model."""
        return any(loader.match(path) > 0 for loader in self._loaders.values())

    def for_path(self, path: Path) -> Loader:
        """The loader for what ``path`` holds: one that reads the format natively, else any that can read it.

        Each loader says how well it reads a path (``match``: NATIVE, CONVERTS or 0), so a third-party loader
        adds a format by registering. A native reader whose backend is installed wins (llama.cpp for a .gguf),
        then one that converts (transformers dequantizes a .gguf), in registry order. Loaders whose backend is
        missing are chosen only when no installed one can read the path, so the user gets their install hint.
        """
        scores = {name: loader.match(path) for name, loader in self._loaders.items()}
        ready = {s.name for s in self.status() if s.available}
        ranked = sorted((name for name, score in scores.items() if score > 0),
                        key=lambda name: (name not in ready, -scores[name]))
        if ranked:
            return self._loaders[ranked[0]]
        raise UnknownLoader(f"no registered loader can read '{path}' "
                            f"(loaders: {', '.join(self._loaders) or 'none'})")


def _load_hook(spec: str) -> RegisterHook:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def default_registry() -> LoaderRegistry:
    """A registry holding every loader installed: built-ins first (in BUILTIN_HOOKS order), then plugins.

    Built-ins are declared as entry points like any plugin; a source tree that was
    never pip-installed finds the same hooks by module name.
    """
    registry = LoaderRegistry()
    plugins = {ep.value: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for spec in BUILTIN_HOOKS:
        hook = plugins.pop(spec).load() if spec in plugins else _load_hook(spec)
        hook(registry.register)
    for spec in sorted(plugins):
        plugins[spec].load()(registry.register)
    return registry
