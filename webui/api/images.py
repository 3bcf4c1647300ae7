"""The images of a chat request's ``image_url`` parts, read with the server's rules.

A ``data:`` URL (base64) is always read. A file on this machine (``file:///path`` or an absolute path) only with
``--allow-local-images DIR`` and only under that folder (symlinks resolved first), and an ``http(s)`` URL is fetched
only with ``--allow-image-urls``, from public addresses only unless ``--allow-private-image-urls`` (webui/fetch.py):
without them a request could make the server read its files or reach any address it can. Each problem is a 400
naming the part (``messages[0].content[1].image_url``).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from loaders.base import LoadedModel, PromptImage
from webui.api.errors import APIError
from webui.api.protocol import ChatMessage, ImageURL, image_parts
from webui.fetch import FetchError, FetchRefused, FetchRules, FetchTooLarge, fetch
from webui.images import ImageError, data_url_bytes, read_image
from webui.userpaths import PathRefused, inside

if TYPE_CHECKING:
    from webui.api.serving import APIConfig


async def request_images(messages: list[ChatMessage], model: LoadedModel,
                         config: APIConfig) -> tuple[PromptImage, ...]:
    """Every image part of ``messages`` read, in order; a 400 naming the part for a model that takes no images,
    a source ``config`` does not allow, an unreadable image or one over ``config.max_image_bytes``."""
    parts = image_parts(messages)
    if parts and not model.capabilities.images:
        raise APIError(400, f"{parts[0][0]}: the model '{model.name}' takes no images (it is a text-only model); "
                            "send text only, or load a vision-language model", param=parts[0][0],
                       code="images_not_supported")
    limit = config.max_image_bytes or 2**62
    images = []
    for field, part in parts:
        data = await _image_bytes(field, part, limit, config)
        try:
            images.append(await asyncio.to_thread(read_image, data, limit))
        except ImageError as exc:
            raise APIError(400, f"{field}: {exc}", param=field, code="invalid_image") from exc
    return tuple(images)


async def _image_bytes(field: str, part: ImageURL, limit: int, config: APIConfig) -> bytes:
    url = part.url.strip()
    scheme = urlparse(url).scheme.lower()
    if scheme == "data":
        return _data_url(field, url, limit)
    folder = config.local_images_dir
    if scheme in ("http", "https"):
        if not config.allow_image_urls:
            raise APIError(400, f"{field}: this server does not fetch images from URLs (start it with "
                                "--allow-image-urls to allow that); send the image inline as a data: URL "
                                "(data:image/png;base64,...)", param=field, code="image_url_not_allowed")
        rules = FetchRules(limit, config.image_fetch_timeout, config.allow_private_image_urls)
        try:
            return await fetch(url, rules)
        except FetchTooLarge as exc:
            raise _too_big(field, exc.size, limit) from None
        except FetchRefused as exc:
            raise APIError(400, f"{field}: {exc}", param=field, code="image_url_not_allowed") from None
        except FetchError as exc:
            raise APIError(400, f"{field}: {exc}", param=field, code="invalid_image") from None
    if scheme == "file" or (scheme == "" and url.startswith("/")):
        if folder is None:
            raise APIError(400, f"{field}: this server does not read local image files (start it with "
                                "--allow-local-images DIR to allow files under DIR); send the image inline as a "
                                "data: URL (data:image/png;base64,...)", param=field, code="image_url_not_allowed")
        path = Path(unquote(urlparse(url).path) if scheme == "file" else url)
        return await asyncio.to_thread(_local_file, field, path, folder, limit)
    raise APIError(400, f"{field}: the url must be a data: URL (data:image/png;base64,...)"
                        f"{', an http(s) URL' if config.allow_image_urls else ''}"
                        f"{' or a local file path' if folder is not None else ''}; got {url[:40]!r}",
                   param=field, code="invalid_image")


def _too_big(field: str, size: int, limit: int) -> APIError:
    return APIError(400, f"{field}: the image is {size / 2**20:.3g} MB, over this server's limit of "
                         f"{limit / 2**20:.3g} MB (--max-image-mb); send a smaller image", param=field,
                    code="image_too_large")


def _data_url(field: str, url: str, limit: int) -> bytes:
    size = len(url.partition(",")[2]) * 3 // 4
    if size > limit + 3:  # refused before decoding
        raise _too_big(field, size, limit)
    try:
        return data_url_bytes(url)
    except ImageError as exc:
        raise APIError(400, f"{field}: {exc}", param=field, code="invalid_image") from None


def _local_file(field: str, path: Path, folder: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` names, if it is under ``folder`` once every symlink is resolved."""
    try:
        resolved = inside(folder, path, "the folder this server reads images from")
    except PathRefused as exc:
        if not exc.outside:
            raise APIError(400, f"{field}: cannot resolve the image path: {exc}", param=field,
                           code="invalid_image") from None
        raise APIError(400, f"{field}: '{path}' is outside the folder this server reads images from (only files "
                            "under the folder given to --allow-local-images, symlinks resolved, are read); send the "
                            "image inline as a data: URL", param=field, code="image_url_not_allowed") from None
    try:  # no symlink swapped in after the check, and no FIFO or device that blocks or never ends
        fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise APIError(400, f"{field}: '{path}' is not a regular file", param=field, code="invalid_image")
            if info.st_size > limit:
                raise _too_big(field, info.st_size, limit)
            data = file.read(limit + 1)
    except OSError as exc:
        raise APIError(400, f"{field}: cannot read the image file '{path}': {exc.strerror or exc}", param=field,
                       code="invalid_image") from None
    if len(data) > limit:  # it grew after fstat
        raise _too_big(field, len(data), limit)
    return data
