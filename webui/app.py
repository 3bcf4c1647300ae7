"""Wires one Engine to the UI (and, later, the API) and serves them."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from loaders.base import LoaderError, LoadOptions
from webui.config import AppConfig, config_from_args
from webui.models import DEFAULT_MODEL, ModelEntry
from webui.names import InvalidName
from webui.services import Services
from webui.store import StoreError

log = logging.getLogger("webui")


def startup_entry(services: Services) -> ModelEntry | None:
    """The model named by --model (a models-dir name or a path), or the default model."""
    config = services.config
    if config.no_model:
        return None
    if config.model is None:
        return services.models.resolve(DEFAULT_MODEL)
    candidate = Path(config.model).expanduser()
    if candidate.exists() or os.sep in config.model:
        return services.models.entry_for_path(candidate)
    return services.models.resolve(config.model)


def load_startup_model(services: Services) -> None:
    """--model if given (failure is fatal), else the last model used (falling back to the default); then the
    models of --also-load beside it."""
    _load_model_in_use(services)
    for name in services.config.also_load:
        services.models.ensure(name)
        print(f"loaded {name} beside {services.models.current.name if services.models.current else 'none'}",
              flush=True)


def _load_model_in_use(services: Services) -> None:
    config, settings = services.config, services.settings.get()
    if config.model and config.model.startswith(("http://", "https://")):
        services.models.load_remote(config.model, os.environ.get("REMOTE_API_KEY"), config.remote_model)
        return
    remembered = config.model is None and not config.no_model and settings.last_model
    if remembered:
        try:
            options = LoadOptions(**{"device": config.device, "dtype": config.dtype, "threads": config.threads,
                                     **{k: v for k, v in settings.load_options.items() if v is not None}},
                                  extra=dict(config.load_options))
            services.models.load(settings.last_model, config.loader or settings.last_loader, options,
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


def create_server(services: Services):
    """A FastAPI app with /health and the Gradio UI mounted at /."""
    import gradio as gr
    from fastapi import FastAPI

    from webui.auth import authenticator
    from webui.ui.app import CSS, build_ui

    app = FastAPI(title="LLM Workbench", docs_url=None, redoc_url=None)

    @app.get("/health")
    def health() -> dict:
        return services.health()

    demo = build_ui(services)
    demo.queue(default_concurrency_limit=None)
    users = dict(services.config.ui_users)
    return gr.mount_gradio_app(app, demo, path="", css=CSS, footer_links=[],
                               auth=authenticator(users) if users else None,
                               auth_message="Log in to the LLM Workbench" if users else None)


def run(argv: list[str]) -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "gradio", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("torchao").setLevel(logging.ERROR)  # with the gptq extra: CUDA kernels it cannot load here
    config = config_from_args(argv)
    config.make_dirs()
    try:
        services = Services.create(config)
    except StoreError as exc:
        sys.exit(f"error: {exc}")
    try:
        load_startup_model(services)
    except (LoaderError, InvalidName, ValueError) as exc:
        services.close()
        sys.exit(f"error: {exc}")
    serve(services, config)


def serve(services: Services, config: AppConfig) -> None:
    """Serve the UI (and the API with --api) from one event loop until interrupted."""
    import asyncio

    import uvicorn

    warn_exposure(config)
    servers = [uvicorn.Server(uvicorn.Config(create_server(services), host=config.host, port=config.port,
                                             log_level="warning", timeout_graceful_shutdown=3))]
    print(f"Workbench ready: http://{'127.0.0.1' if not config.listen else config.host}:{config.port}", flush=True)
    if config.api:
        from webui.api.app import create_api_app
        from webui.api.serving import APIConfig

        api = create_api_app(services, APIConfig(
            config.api_keys, config.admin_keys, config.served_model_names, config.api_timeout,
            config.api_queue_timeout, config.log_prompts, int(config.api_max_body_mb * 2**20) or None))
        servers.append(uvicorn.Server(uvicorn.Config(api, host=config.api_host, port=config.api_port,
                                                     log_level="warning", timeout_graceful_shutdown=3)))
        print(f"OpenAI-compatible API ready: http://{config.api_host}:{config.api_port}/v1"
              f"{' (API key required)' if config.api_keys or config.admin_keys else ''}", flush=True)

    async def main() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        services.close()


def warn_exposure(config: AppConfig) -> None:
    """With --listen: say exactly what other machines can reach."""
    if not config.listen:
        return
    log.warning("!" * 70)
    if config.ui_users:
        log.warning("--listen: the UI on port %d asks for a login (%d user(s)). Each user has their own chats, "
                    "notebooks, batch runs, presets and settings; every user can load and unload models, which "
                    "all of them share.", config.port, len(config.ui_users))
    else:
        log.warning("--listen: the UI on port %d is reachable from other machines WITHOUT a login: anyone on your "
                    "network can read, change and delete every chat, notebook, batch run, preset and setting, load "
                    "and unload models and run generations.", config.port)
        log.warning("Add a login with --ui-auth USER:PASSWORD (or --ui-auth-file), or stop it unless that is "
                    "intended.")
    if config.api and not (config.api_keys or config.admin_keys):
        log.warning("The API stays on 127.0.0.1 because no --api-key is set.")
    log.warning("!" * 70)
