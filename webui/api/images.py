"""The images of a chat request's ``image_url`` parts, read with the server's rules.

A ``data:`` URL (base64) is always read. A file on this machine (``file:///path`` or an absolute path) only with
``--allow-local-images``, and an ``http(s)`` URL is fetched only with ``--allow-image-urls``: without the flags a
request could make the server read its files or reach any address it can. Each problem is a 400 naming the part
(``messages[0].content[1].image_url``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import unquote, urlparse

from loaders.base import LoadedModel, PromptImage
from webui.api.errors import APIError
from webui.api.protocol import ChatMessage, ImageURL, image_parts
from webui.images import ImageError, data_url_bytes, read_image

FETCH_TIMEOUT = 20.0  # seconds a remote image may take to download (--allow-image-urls)


async def request_images(messages: list[ChatMessage], model: LoadedModel, max_bytes: int | None,
                         allow_local: bool, allow_urls: bool) -> tuple[PromptImage, ...]:
    """Every image part of ``messages`` read, in order; a 400 naming the part for a model that takes no images,
    a source the server's flags do not allow, an unreadable image or one over ``max_bytes`` (None: no limit)."""
    parts = image_parts(messages)
    if parts and not model.capabilities.images:
        raise APIError(400, f"{parts[0][0]}: the model '{model.name}' takes no images (it is a text-only model); "
                            "send text only, or load a vision-language model", param=parts[0][0],
                       code="images_not_supported")
    limit = max_bytes or 2**62
    images = []
    for field, part in parts:
        data = await _image_bytes(field, part, limit, allow_local, allow_urls)
        try:
            images.append(await asyncio.to_thread(read_image, data, limit))
        except ImageError as exc:
            raise APIError(400, f"{field}: {exc}", param=field, code="invalid_image") from exc
    return tuple(images)


async def _image_bytes(field: str, part: ImageURL, limit: int, allow_local: bool, allow_urls: bool) -> bytes:
    url = part.url.strip()
    scheme = urlparse(url).scheme.lower()
    if scheme == "data":
        return _data_url(field, url, limit)
    if scheme in ("http", "https"):
        if not allow_urls:
            raise APIError(400, f"{field}: this server does not fetch images from URLs (start it with "
                                "--allow-image-urls to allow that); send the image inline as a data: URL "
                                "(data:image/png;base64,...)", param=field, code="image_url_not_allowed")
        return await _fetch(field, url, limit)
    if scheme == "file" or (scheme == "" and url.startswith("/")):
        if not allow_local:
            raise APIError(400, f"{field}: this server does not read local image files (start it with "
                                "--allow-local-images to allow that); send the image inline as a data: URL "
                                "(data:image/png;base64,...)", param=field, code="image_url_not_allowed")
        return _local_file(field, Path(unquote(urlparse(url).path) if scheme == "file" else url), limit)
    raise APIError(400, f"{field}: the url must be a data: URL (data:image/png;base64,...)"
                        f"{', an http(s) URL' if allow_urls else ''}{' or a local file path' if allow_local else ''}; "
                        f"got {url[:40]!r}", param=field, code="invalid_image")


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


def _local_file(field: str, path: Path, limit: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise _too_big(field, size, limit)
        return path.read_bytes()
    except OSError as exc:
        raise APIError(400, f"{field}: cannot read the image file '{path}': {exc.strerror or exc}", param=field,
                       code="invalid_image") from None


async def _fetch(field: str, url: str, limit: int) -> bytes:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=True) as client:
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise APIError(400, f"{field}: fetching the image gave HTTP {response.status_code}",
                                   param=field, code="invalid_image")
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise _too_big(field, len(data), limit)
                return bytes(data)
    except httpx.HTTPError as exc:
        raise APIError(400, f"{field}: the image could not be fetched: {exc}", param=field,
                       code="invalid_image") from None
