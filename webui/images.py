"""Images that come with prompts (the API's image_url parts, the Chat tab's attachments): read once into a
PromptImage (decoded pixels and the SHA-256 of the bytes), with an error that says what is wrong.

Where an image may come from is the caller's rule (webui/api/images.py: data URLs always, local files and
remote URLs only with a flag); this module only reads bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import struct

from loaders.base import LoadedModel, PromptImage, SupportsImages

IMAGE_FORMATS = "PNG, JPEG, WebP, GIF or BMP"
PIL_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")  # the only PIL plugins that may parse a prompt's bytes
# The most pixels an image may have (about 8660 x 5770), checked from its header before it is decoded. Models see
# images of at most a few megapixels (their processors scale them down), and 50 megapixels covers a 48-megapixel
# phone photo; decoded to RGB it takes 150 MB. Ours, not PIL's global Image.MAX_IMAGE_PIXELS (which is left alone).
MAX_IMAGE_PIXELS = 50_000_000
# Formats people send that we do not read, known by their first bytes, so the refusal can name them.
_REFUSED_MAGIC = ((b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"%PDF", "PDF"), (b"\x00\x00\x01\x00", "ICO"),
                  (b"8BPS", "PSD"), (b"\xff\x0a", "JPEG XL"), (b"\x00\x00\x00\x0cJXL ", "JPEG XL"))
_FTYP_BRANDS = {b"avif": "AVIF", b"avis": "AVIF", b"heic": "HEIC", b"heix": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF"}


class ImageError(ValueError):
    """An image that cannot be used: over the size limit, or not a readable image."""


def image_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_image(data: bytes, max_bytes: int, max_pixels: int = MAX_IMAGE_PIXELS) -> PromptImage:
    """``data`` (an encoded image) decoded to upright RGB pixels, keyed by its content hash.

    Only the formats in IMAGE_FORMATS are parsed; an image over ``max_pixels`` is refused from its header, before
    it is decoded; an animated image gives its first frame (the others are never decoded); a photo's EXIF
    orientation is applied, so the model sees it the right way up."""
    if len(data) > max_bytes:
        raise ImageError(f"the image is {len(data) / 2**20:.3g} MB, over the limit of {max_bytes / 2**20:.3g} MB "
                         f"(--max-image-mb); send a smaller image")
    if not data:
        raise ImageError("the image is empty (0 bytes)")
    refused = refused_format(data)
    if refused:
        why = " (a vector format, not a raster image: export it as PNG)" if refused == "SVG" else ""
        raise ImageError(f"{refused} images are not accepted{why}; send a {IMAGE_FORMATS} image")
    from PIL import Image, ImageOps, UnidentifiedImageError

    too_large = (f"over the limit of {max_pixels / 1e6:g} megapixels for an image; scale it down (models see at "
                 "most a few megapixels) and send it again")
    try:
        with Image.open(io.BytesIO(data), formats=PIL_FORMATS) as opened:
            width, height = opened.size
            if width * height > max_pixels:  # known from the header: nothing is decoded yet
                raise ImageError(f"the image is {width} x {height} pixels, {too_large}")
            upright = ImageOps.exif_transpose(opened)  # decodes the first frame only
            pixels = upright.convert("RGB")
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):  # PIL's own, larger limit, in open()
        raise ImageError(f"the image is {too_large}") from None
    except UnidentifiedImageError:
        raise ImageError(f"not a readable image: its bytes are not a {IMAGE_FORMATS} image") from None
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, struct.error) as exc:  # truncated or corrupt
        raise ImageError(f"the image could not be decoded (a truncated or corrupt {_format_name(data)} file?): "
                         f"{exc}") from None
    return PromptImage(image_digest(data), pixels)


def refused_format(data: bytes) -> str | None:
    """The name of a format we recognise in ``data`` but do not read (SVG, TIFF, PDF, HEIC...), or None."""
    for magic, name in _REFUSED_MAGIC:
        if data.startswith(magic):
            return name
    if data[4:8] == b"ftyp" and data[8:12] in _FTYP_BRANDS:
        return _FTYP_BRANDS[data[8:12]]
    head = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<") and b"<svg" in head:
        return "SVG"
    return None


def _format_name(data: bytes) -> str:
    kinds = ((b"\x89PNG", "PNG"), (b"\xff\xd8", "JPEG"), (b"GIF8", "GIF"), (b"RIFF", "WebP"), (b"BM", "BMP"))
    return next((name for magic, name in kinds if data.startswith(magic)), "image")


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
