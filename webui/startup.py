"""What the workbench loads when it starts (the server, or the batch CLI): --model or the last model used, the
models of --also-load, the adapters of --lora."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from loaders.base import LoaderError, LoadOptions
from webui.catalog import DEFAULT_MODEL, ModelEntry
from webui.names import InvalidName
from webui.services import Services

log = logging.getLogger("webui")


def startup_entry(services: Services) -> ModelEntry | None:
    """The model named by --model (a models-dir name or a path), or the default model."""
    config = services.config
    if config.no_model:
        return None
    if config.model is None:
        return services.models.catalog.resolve(DEFAULT_MODEL)
    candidate = Path(config.model).expanduser()
    if candidate.exists() or os.sep in config.model:
        return services.models.catalog.entry_for_path(candidate)
    return services.models.catalog.resolve(config.model)


def load_startup_model(services: Services) -> None:
    """--model if given (failure is fatal), else the last model used (falling back to the default); then the
    models of --also-load beside it."""
    _load_model_in_use(services)
    for name in services.config.also_load:
        services.models.ensure(name)
        in_use = services.in_use()
        print(f"loaded {name} beside {in_use.name if in_use else 'none'}", flush=True)


def _load_model_in_use(services: Services) -> None:
    config, settings = services.config, services.settings.get()
    if config.model and config.model.startswith(("http://", "https://")):
        services.models.load_remote(config.model, os.environ.get("REMOTE_API_KEY"), config.remote_model)
        return
    remembered = settings.last_model if config.model is None and not config.no_model else None
    if remembered:
        try:
            options = LoadOptions(**{"device": config.device, "dtype": config.dtype, "threads": config.threads,
                                     **{k: v for k, v in settings.load_options.items() if v is not None}},
                                  extra=dict(config.load_options))
            services.models.load(remembered, config.loader or settings.last_loader, options,
                                 progress=_print_progress)
            attach_startup_loras(services)
            return
        except (LoaderError, InvalidName, ValueError, TypeError) as exc:
            log.warning("could not load the last model used, %r (%s); loading the default model instead",
                        settings.last_model, exc)
    entry = startup_entry(services)
    if entry is not None:
        services.models.load(entry, loader=config.loader, progress=_print_progress,
                             options=LoadOptions(config.device, config.dtype, config.threads,
                                                 extra=dict(config.load_options)))
    attach_startup_loras(services)


def attach_startup_loras(services: Services) -> None:
    """--lora NAME ...: attach each adapter from the loras dir to the model just loaded."""
    for name in services.config.loras:
        services.models.attach_lora(name)
        print(f"attached LoRA adapter {name}", flush=True)


def _print_progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", flush=True)
