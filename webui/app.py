"""Wires one Engine to the UI (and, later, the API) and serves them."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from loaders.base import LoaderError
from webui.config import AppConfig, config_from_args
from webui.exposure import exposure_report
from webui.names import InvalidName
from webui.services import Services
from webui.startup import load_startup_model
from webui.store import StoreError

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("webui")


def create_server(services: Services) -> FastAPI:
    """A FastAPI app with /health and the Gradio UI mounted at /."""
    import gradio as gr
    from fastapi import FastAPI

    from webui.auth import authenticator
    from webui.training.data import MAX_DATASET_BYTES
    from webui.ui.app import CSS, build_ui
    from webui.ui.chat_tab import PASTE_IMAGES_JS
    from webui.ui.live import LIVE_CSS, LIVE_JS, LiveReplies
    from webui.ui.page_channel import PAGE_JS, PageChannel
    from webui.ui.typed_slider import TYPED_BOXES_HEAD

    app = FastAPI(title="LLM Workbench", docs_url=None, redoc_url=None)

    @app.get("/health")
    def health() -> dict:
        return services.health()

    live = LiveReplies()
    live.mount(app)  # before the UI's catch-all mount at /
    channel = PageChannel()
    channel.mount(app)
    demo = build_ui(services, live, channel)
    demo.queue(default_concurrency_limit=None)
    users = dict(services.config.ui_users)
    page_js = f"() => {{ {LIVE_JS}; {PAGE_JS}; ({PASTE_IMAGES_JS})(); }}"
    return gr.mount_gradio_app(app, demo, path="", css=CSS + LIVE_CSS, js=page_js, head=TYPED_BOXES_HEAD,
                               footer_links=[],
                               auth=authenticator(users) if users else None,
                               auth_message="Log in to the LLM Workbench" if users else None,
                               max_file_size=MAX_DATASET_BYTES)  # the largest any tab takes: a 1 GB upload
                               # is cut off while it arrives, before a tab reads any of it (#43)


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
    """Serve the UI (and the API with --api; the API alone with --nowebui) from one event loop until interrupted."""
    import asyncio

    import uvicorn

    warn_exposure(config)
    servers = []
    if not config.nowebui:
        servers.append(uvicorn.Server(uvicorn.Config(create_server(services), host=config.host, port=config.port,
                                                     log_level="warning", timeout_graceful_shutdown=3)))
        print(f"Workbench ready: http://{'127.0.0.1' if not config.listen else config.host}:{config.port}",
              flush=True)
    if config.api:
        from webui.api.app import create_api_app
        from webui.api.serving import APIConfig

        api = create_api_app(services, APIConfig(
            config.api_keys, config.admin_keys, config.served_model_names, config.api_timeout,
            config.api_queue_timeout, config.log_prompts, int(config.api_max_body_mb * 2**20) or None,
            int(config.max_image_mb * 2**20) or None, local_images_dir=config.local_images_dir,
            allow_image_urls=config.allow_image_urls, allow_private_image_urls=config.allow_private_image_urls,
            max_file_bytes=int(config.api_max_file_mb * 2**20) or None))
        servers.append(uvicorn.Server(uvicorn.Config(api, host=config.api_host, port=config.api_port,
                                                     log_level="warning", timeout_graceful_shutdown=3)))
        print(f"OpenAI-compatible API ready: http://{config.api_host}:{config.api_port}/v1"
              f"{' (API key required)' if config.api_keys or config.admin_keys else ''}", flush=True)

    async def main() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # (uvicorn shuts down on SIGTERM, then raises it again: end as Ctrl+C does)

    if threading.current_thread() is threading.main_thread():  # SIGTERM (a service manager's stop): the models,
        signal.signal(signal.SIGTERM, stop)  # the engines and the store are closed, temporary files removed
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        services.close()


def warn_exposure(config: AppConfig) -> None:
    """With --listen: say exactly what other machines can reach and what a remote user can do (#43)."""
    lines = exposure_report(config)
    if not lines:
        return
    print("\n".join(["!" * 70, *lines, "!" * 70]), flush=True)
    if not config.ui_users:
        log.warning("--listen without a login: anyone on your network can use and change everything here. Add "
                    "--ui-auth USER:PASSWORD (or --ui-auth-file), or stop it unless that is intended.")
