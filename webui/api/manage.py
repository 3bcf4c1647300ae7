"""Managing what is loaded, over the API, in the shapes other servers use.

* text-generation-webui's ``/v1/internal/model/{list,info,load,unload}`` (its ``args.loader`` is read too);
* vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (``lora_name``; ``lora_path`` may only name the
  adapter's folder in the loras dir, never another path).

Loading and unloading need the admin key (``require_admin``); a load that fails leaves everything loaded as it was
and answers the loader's error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from loaders.base import LoaderError, LoadOptions, ModelLoadError
from loaders.options import LoadOptionError
from loaders.lora import LoRAError
from loaders.registry import UnknownLoader
from webui.api.auth import require_admin
from webui.api.body import JSONBodyRoute
from webui.api.errors import APIError
from webui.api.protocol import TextRequest
from webui.models import ModelManager, NotLoaded

router = APIRouter(route_class=JSONBodyRoute)  # bodies read whole or refused (webui/api/body.py)


def _models(request: Request) -> ModelManager:
    return request.app.state.serving.services.models


def model_info(request: Request) -> dict:
    """The model in use (text-generation-webui's ``model_name`` and ``lora_names``) and every loaded model."""
    models = _models(request)
    current = request.app.state.serving.services.in_use()
    return {"model_name": current.name if current else None,
            "lora_names": [name for name, _ in current.loras.items()] if current else [],
            "models": [{"model_name": s.name, "loader": s.model.loader, "device": s.model.device,
                        "dtype": s.model.dtype, "memory_bytes": s.model.memory_bytes(),
                        "load_options": s.model.load_options,
                        "loras": dict(s.loras), "in_use": s is current} for s in models.slots()],
            "memory_budget_bytes": models.budget_bytes()}


@router.get("/v1/internal/model/list")
def list_models(request: Request) -> dict:
    """Every model in the models dir (loaded or not)."""
    return {"model_names": [e.name for e in _models(request).catalog.available()]}


@router.get("/v1/internal/model/info")
def info(request: Request) -> dict:
    return model_info(request)


class LoadRequest(TextRequest):
    model_name: str
    loader: str | None = None
    keep_others: bool = True  # load beside the models loaded (within the memory budget), or instead of them
    make_current: bool = True  # the model in use afterwards (requests that name no model get it)
    args: dict[str, Any] | None = None  # text-generation-webui's: "loader", and the loader's own options
    options: dict[str, Any] | None = None  # the loader's own options (the Model tab's form; loaders/options.py)
    device: str | None = None  # None: the server's --device
    dtype: str | None = None
    threads: int | None = None

    def chosen_loader(self) -> str | None:
        given = (self.args or {}).get("loader")
        if given is not None and not isinstance(given, str):
            raise APIError(400, "args.loader must be a loader's name", param="args.loader")
        return self.loader or given

    def load_options(self, config: Any) -> LoadOptions:
        """Device, dtype and threads (the server's where not given) and the loader's own options: ``options``
        over text-generation-webui's ``args``. A bad value is refused by the loader, naming the option."""
        extra = {**{k: v for k, v in (self.args or {}).items() if k != "loader"}, **(self.options or {})}
        return LoadOptions(self.device or config.device, self.dtype or config.dtype, self.threads or config.threads,
                           extra=extra)


def _load_error(exc: Exception, param: str) -> APIError:
    if isinstance(exc, NotLoaded):
        return APIError(404, str(exc), type="not_found_error", param=param, code="model_not_found")
    if isinstance(exc, UnknownLoader):
        return APIError(400, str(exc), param="loader")
    if isinstance(exc, LoadOptionError):
        return APIError(400, str(exc), param=f"options.{exc.option}")
    if isinstance(exc, ModelLoadError) and str(exc).startswith("unknown model"):
        return APIError(404, str(exc), type="not_found_error", param=param, code="model_not_found")
    return APIError(400, str(exc), param=param)


@router.post("/v1/internal/model/load", dependencies=[Depends(require_admin)])
async def load(body: LoadRequest, request: Request) -> dict:
    models = _models(request)
    try:
        await asyncio.to_thread(models.load, body.model_name, body.chosen_loader(),
                                body.load_options(request.app.state.serving.services.config), None,
                                keep_others=body.keep_others, make_current=body.make_current,
                                owner=request.app.state.serving.services.owner)
    except (LoaderError, ValueError) as exc:  # ValueError: a name with path characters
        raise _load_error(exc, "model_name") from exc
    return model_info(request)


class UnloadRequest(TextRequest):
    model_name: str | None = None  # None: the model in use


@router.post("/v1/internal/model/unload", dependencies=[Depends(require_admin)])
async def unload(request: Request, body: UnloadRequest | None = None) -> dict:
    models = _models(request)
    name = body.model_name if body else None
    if not models.names():
        raise APIError(400, "no model is loaded, so there is nothing to unload", param="model_name")
    in_use = request.app.state.serving.services.in_use()
    name = name or (in_use.name if in_use is not None else None)
    if name is None:  # never None here (a model is loaded, so one is in use); None would unload them all
        raise APIError(400, "name the model to unload", param="model_name")
    try:
        await asyncio.to_thread(models.unload, name)
    except LoaderError as exc:
        raise _load_error(exc, "model_name") from exc
    return model_info(request)


class LoraRequest(TextRequest):
    lora_name: str
    lora_path: str | None = None  # vLLM's: here only the adapter's own folder in the loras dir
    weight: float = Field(1.0, ge=-10, le=10)
    model: str | None = None  # the loaded model to attach it to (None: the model in use)


def _check_path(request: Request, body: LoraRequest) -> None:
    if body.lora_path is None:
        return
    folder = request.app.state.serving.services.config.loras_dir
    try:
        same = Path(body.lora_path).expanduser().resolve() == (folder / body.lora_name).resolve()
    except (OSError, ValueError):
        same = False
    if not same:
        raise APIError(400, f"lora_path must be the adapter's folder in the loras dir ({folder / body.lora_name}); "
                            f"copy the adapter there and send its name as lora_name", param="lora_path")


@router.post("/v1/load_lora_adapter", dependencies=[Depends(require_admin)])
async def load_lora(body: LoraRequest, request: Request) -> dict:
    _check_path(request, body)
    models = _models(request)
    try:
        await asyncio.to_thread(models.attach_lora, body.lora_name, body.weight, body.model,
                                request.app.state.serving.services.owner)
    except (LoRAError, ValueError) as exc:
        known = [e.name for e in models.catalog.available_loras()]
        raise APIError(404 if body.lora_name not in known else 400,
                       f"{exc}" + ("" if body.lora_name in known else f"; adapters in the loras dir: "
                                                                       f"{', '.join(known) or 'none'}"),
                       type="not_found_error" if body.lora_name not in known else "invalid_request_error",
                       param="lora_name") from exc
    return model_info(request)


class LoraUnloadRequest(TextRequest):
    lora_name: str
    model: str | None = None


@router.post("/v1/unload_lora_adapter", dependencies=[Depends(require_admin)])
async def unload_lora(body: LoraUnloadRequest, request: Request) -> dict:
    try:
        await asyncio.to_thread(_models(request).detach_lora, body.lora_name, body.model,
                                request.app.state.serving.services.owner)
    except (LoRAError, ValueError) as exc:
        raise APIError(404, str(exc), type="not_found_error", param="lora_name") from exc
    return model_info(request)
