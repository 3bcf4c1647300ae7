"""The services the UI and API adapters share; built once by webui.app."""

from __future__ import annotations

from dataclasses import dataclass

from loaders.registry import LoaderRegistry
from webui.config import AppConfig
from webui.engine import Engine
from webui.models import ModelManager
from webui.presets import PresetStore


@dataclass
class Services:
    config: AppConfig
    registry: LoaderRegistry
    engine: Engine
    models: ModelManager
    presets: PresetStore

    @classmethod
    def create(cls, config: AppConfig, registry: LoaderRegistry | None = None) -> "Services":
        from loaders.registry import default_registry

        registry = registry or default_registry()
        engine = Engine()
        return cls(config, registry, engine, ModelManager(config, engine, registry),
                   PresetStore(config.presets_dir))

    def close(self) -> None:
        self.models.unload()
        self.engine.close()
