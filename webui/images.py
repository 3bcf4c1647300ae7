"""Images that come with prompts (the API's image_url parts, the Chat tab's attachments): read once into a
PromptImage (decoded pixels and the SHA-256 of the bytes), with an error that says what is wrong.

Where an image may come from is the caller's rule (webui/api/images.py: data URLs always, local files and
remote URLs only with a flag); this module only reads bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import warnings

from loaders.base import LoadedModel, PromptImage, SupportsImages

IMAGE_FORMATS = "PNG, JPEG, WebP, GIF or BMP"


class ImageError(ValueError):
    """An image that cannot be used: over the size limit, or not a readable image."""


def image_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_image(data: bytes, max_bytes: int) -> PromptImage:
    """``data`` (an encoded image) decoded to RGB pixels, keyed by its content hash."""
    if len(data) > max_bytes:
        raise ImageError(f"the image is {len(data) / 2**20:.3g} MB, over the limit of {max_bytes / 2**20:.3g} MB "
                         f"(--max-image-mb); send a smaller image")
    if not data:
        raise ImageError("the image is empty (0 bytes)")
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # a bomb is refused, not decoded
            with Image.open(io.BytesIO(data)) as opened:
                opened.load()
                pixels = opened.convert("RGB")
    except (UnidentifiedImageError, Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise ImageError(f"not a readable image ({IMAGE_FORMATS}): {exc}") from None
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt files
        raise ImageError(f"the image could not be decoded ({IMAGE_FORMATS} expected): {exc}") from None
    return PromptImage(image_digest(data), pixels)


def image_placeholder(model: LoadedModel) -> str:
    """The text that marks an image in ``model``'s prompts ("" for a model that takes none)."""
    return model.image_placeholder if model.capabilities.images and isinstance(model, SupportsImages) else ""


def max_image_bytes(max_image_mb: float) -> int:
    """--max-image-mb in bytes (0: no limit)."""
    return int(max_image_mb * 2**20) or 2**62


def data_url(data: bytes) -> str:
    """``data`` (an encoded image) as a data: URL, its type read from its first bytes."""
    kinds = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"GIF8", "gif"), (b"RIFF", "webp"), (b"BM", "bmp"))
    kind = next((name for magic, name in kinds if data.startswith(magic)), "png")
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def data_url_bytes(url: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (ImageError for another URL or bad base64)."""
    import binascii

    header, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma or not header.lower().endswith(";base64"):
        raise ImageError(f"a data URL must be base64, like data:image/png;base64,iVBORw0..., got {header[:40]!r}")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"the data URL's base64 is invalid: {exc}") from None
