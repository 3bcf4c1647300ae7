"""Hostile images (#43): bytes that try to exhaust the server (decompression bombs, 10,000-frame GIFs, zlib bombs),
bytes in formats we do not read (SVG, TIFF, EPS...) and local paths that try to leave the folder of
--allow-local-images (image URLs: test_image_urls.py). Each is one case, answered with a message that says what
is wrong; most are tried on the functions that read images, a few through the real API server with the official
openai client and through the Chat tab's controller, which must keep serving and store nothing."""

from __future__ import annotations

import io
import os
import struct
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Callable
from urllib.parse import unquote

import pytest

from tests.conftest import run_async
from tests.vision_models import noise_png, png
from webui.api.errors import APIError
from webui.api.images import request_images
from webui.api.protocol import ChatMessage
from webui.api.serving import APIConfig
from webui.images import MAX_IMAGE_PIXELS, ImageError, data_url, read_image

SURFACE = "images"
RED = png((200, 30, 30), stripe=5)  # 40 x 30
NOISE = noise_png((64, 64))  # 12 KB, whose pixel data end only at its end
FIELD = "messages[0].content[0].image_url"


# --- hostile bytes, built here -------------------------------------------------------------------------------------

def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bytes(width: int, height: int, idat: bytes, bit_depth: int = 1, extra: bytes = b"") -> bytes:
    """A grey PNG of the given size with ``idat`` (zlib data) as its pixels, ``extra`` chunks before them."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + extra + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def zeros_deflated(size: int) -> bytes:
    """``size`` zero bytes, deflated (about a thousandth of the size)."""
    pack, block = zlib.compressobj(9), bytes(2**20)
    return b"".join(pack.compress(block[:min(2**20, size - i)]) for i in range(0, size, 2**20)) + pack.flush()


def png_bomb(side: int = 20_000) -> bytes:
    """A PNG of a few dozen KB that decodes to ``side`` x ``side`` pixels (1-bit rows of zeros)."""
    return png_bytes(side, side, zeros_deflated(side * (1 + (side + 7) // 8)))


def text_bomb() -> bytes:
    """A 1 x 1 PNG with a compressed text chunk that inflates to 64 MB (PIL's limit for text is 1 MB)."""
    text = _chunk(b"zTXt", b"comment\x00\x00" + zeros_deflated(2**26))
    return png_bytes(1, 1, zlib.compress(b"\x00\x00"), extra=text)


def idat_bomb() -> bytes:
    """A 1 x 1 PNG whose pixel data goes on to inflate to 64 MB: only what the one pixel needs is inflated."""
    return png_bytes(1, 1, zeros_deflated(2**26))


def gif(frames: int, screen: tuple[int, int] = (1, 1), trailer: bool = True) -> bytes:
    """A GIF of ``frames`` 1 x 1 frames on a ``screen``-sized canvas: the first red, the others blue."""
    red, blue = b"\x02\x02\x44\x01\x00", b"\x02\x02\x4c\x01\x00"  # LZW: clear, colour 0 or 1, end

    def frame(pixels: bytes) -> bytes:
        return b"\x21\xf9\x04\x00\x01\x00\x00\x00" + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + pixels

    head = b"GIF89a" + struct.pack("<HHBBB", *screen, 0x80, 0, 0) + bytes((255, 0, 0, 0, 0, 255))
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    return head + loop + frame(red) + frame(blue) * (frames - 1) + (b"\x3b" if trailer else b"")


def pil_image(kind: str, size: tuple[int, int] = (40, 20), **save: object) -> bytes:
    """An image saved by PIL in ``kind`` (JPEG, TIFF, BMP, PPM...): left half red, right half blue."""
    from PIL import Image

    image = Image.new("RGB", size, (220, 20, 20))
    image.paste((20, 20, 220), (size[0] // 2, 0, size[0], size[1]))
    buffer = io.BytesIO()
    image.save(buffer, format=kind, **save)
    return buffer.getvalue()


def jpeg_rotated() -> bytes:
    """A 40 x 20 JPEG (red left, blue right) whose EXIF says: turn me 90 degrees clockwise (orientation 6)."""
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    return pil_image("JPEG", exif=exif.tobytes())


def jpeg_with_size(width: int, height: int) -> bytes:
    """A small JPEG whose frame header (SOF0) claims ``width`` x ``height``."""
    data = bytearray(pil_image("JPEG", (16, 16)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def bmp_with_size(width: int, height: int) -> bytes:
    """A BMP header for ``width`` x ``height`` 24-bit pixels, followed by 64 bytes of them."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + 64, 0, 0, 14 + 40) + info + bytes(64)


def corrupt_png() -> bytes:
    """A real PNG with bytes of its pixel data flipped (the chunk's CRC no longer matches)."""
    data = bytearray(RED)
    start = data.index(b"IDAT") + 8
    data[start:start + 16] = bytes(b ^ 0xFF for b in data[start:start + 16])
    return bytes(data)


def jpeg_with_bad_exif() -> bytes:
    """A JPEG whose EXIF segment is garbage after its header."""
    data = pil_image("JPEG")
    segment = b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff" + bytes(range(256)) * 2
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(segment) + 2) + segment + data[2:]


SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'
SVG_XML = b'\xef\xbb\xbf<?xml version="1.0"?>\n<!DOCTYPE svg>\n' + SVG
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n0 0 moveto 10 10 lineto stroke\nshowpage\n"


# --- read_image: bytes -----------------------------------------------------------------------------------------------

REFUSED: list[tuple[str, Callable[[], bytes], str]] = [
    ("png-bomb-20000x20000", png_bomb, "over the limit of 50 megapixels"),
    ("png-just-over-our-limit-8000x8000", lambda: png_bytes(8000, 8000, zeros_deflated(8000 * 1001)),
     "8000 x 8000 pixels, over the limit of 50 megapixels"),
    ("png-between-our-limit-and-pils-10000x10000", lambda: png_bytes(10_000, 10_000, zeros_deflated(10_000 * 1251)),
     "10000 x 10000 pixels, over the limit of 50 megapixels"),
    ("gif-bomb-screen-65535x65535", lambda: gif(1, (65535, 65535)), "over the limit of 50 megapixels"),
    ("jpeg-header-claims-60000x60000", lambda: jpeg_with_size(60000, 60000), "over the limit of 50 megapixels"),
    ("bmp-header-claims-30000x30000", lambda: bmp_with_size(30000, 30000), "over the limit of 50 megapixels"),
    ("png-text-chunk-bomb", text_bomb, "could not be decoded"),
    ("png-truncated", lambda: NOISE[:len(NOISE) // 2], "could not be decoded"),
    ("jpeg-truncated", lambda: pil_image("JPEG", (200, 200))[:300], "could not be decoded"),
    ("gif-truncated-in-first-frame", lambda: gif(1)[:-4], "could not be decoded"),
    ("png-corrupt-pixel-data", corrupt_png, "could not be decoded"),
    ("random-bytes", lambda: os.urandom(4096), "not a readable image"),
    ("empty", lambda: b"", "empty"),
    ("text", lambda: b"hello, I am not an image", "not a readable image"),
    ("svg", lambda: SVG, "SVG images are not accepted (a vector format"),
    ("svg-with-xml-prolog-and-bom", lambda: SVG_XML, "SVG images are not accepted"),
    ("tiff", lambda: pil_image("TIFF"), "TIFF images are not accepted; send a PNG, JPEG, WebP, GIF or BMP"),
    ("tiff-big-endian", lambda: b"MM\x00*" + bytes(64), "TIFF images are not accepted"),
    ("pdf", lambda: b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n", "PDF images are not accepted"),
    ("heic", lambda: b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "HEIC images are not accepted"),
    ("ico", lambda: pil_image("ICO", (16, 16)), "ICO images are not accepted"),
    ("eps-never-reaches-ghostscript", lambda: EPS, "not a readable image"),
    ("ppm-a-format-pil-reads-but-we-do-not", lambda: pil_image("PPM"), "not a readable image"),
    ("pcx-a-format-pil-reads-but-we-do-not", lambda: pil_image("PCX"), "not a readable image"),
    ("over-the-byte-limit", lambda: bytes(2**20 + 1), "over the limit of 1 MB"),
]


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # PIL's own warning, before our refusal
@pytest.mark.parametrize("make, words", [pytest.param(m, w, id=i) for i, m, w in REFUSED])
def test_hostile_bytes_are_refused_quickly_with_a_message(make, words):
    from PIL import Image

    global_limit = Image.MAX_IMAGE_PIXELS
    data = make()
    start = time.monotonic()
    with pytest.raises(ImageError, match=words.replace("(", r"\(")):
        read_image(data, 2**20)
    assert time.monotonic() - start < 2  # refused before anything large was decoded
    assert Image.MAX_IMAGE_PIXELS == global_limit  # PIL's global limit is left alone


def test_the_pixel_limit_is_ours_and_the_message_gives_it():
    with pytest.raises(ImageError, match="40 x 30 pixels, over the limit of 0.001 megapixels"):
        read_image(RED, 2**20, max_pixels=1000)
    assert read_image(RED, 2**20, max_pixels=1200).image.size == (40, 30)
    assert MAX_IMAGE_PIXELS == 50_000_000


def red_first_frame(image) -> bool:
    return image.image.getpixel((0, 0)) == (255, 0, 0)


READ: list[tuple[str, Callable[[], bytes], Callable]] = [
    # on a 1000 x 1000 canvas, which PIL composes each frame onto: decoding all 10,000 takes about 10 s
    ("gif-of-10000-frames-gives-its-first", lambda: gif(10_000, (1000, 1000)), red_first_frame),
    ("gif-of-10000-frames-cut-off-after-the-first-frames", lambda: gif(10_000, (1000, 1000), trailer=False)[:2000],
     red_first_frame),
    ("png-whose-pixel-data-inflates-to-64-mb", idat_bomb, lambda image: image.image.size == (1, 1)),
    ("jpeg-with-exif-orientation-is-turned-upright",
     jpeg_rotated, lambda image: image.image.size == (20, 40) and image.image.getpixel((10, 5))[0] > 150
     and image.image.getpixel((10, 35))[2] > 150),  # the red left half is now the top
    ("jpeg-with-garbage-exif-reads-as-it-is", jpeg_with_bad_exif, lambda image: image.image.size == (40, 20)),
]


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")  # PIL's warning for the garbage EXIF, which it skips
@pytest.mark.parametrize("make, check", [pytest.param(m, c, id=i) for i, m, c in READ])
def test_odd_but_readable_images_are_read_quickly_as_the_model_should_see_them(make, check):
    data = make()
    start = time.monotonic()
    image = read_image(data, 2**20)
    assert time.monotonic() - start < 1  # one frame decoded, not 10,000
    assert image.image.mode == "RGB" and check(image), image.image.size


# --- --allow-local-images DIR -------------------------------------------------------------------------------------

VISION = SimpleNamespace(name="a-vlm", capabilities=SimpleNamespace(images=True))


def image_request(url: str) -> list[ChatMessage]:
    return [ChatMessage.model_validate({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})]


def read_request(url: str, config: APIConfig):
    return run_async(request_images(image_request(url), VISION, config), timeout=30)  # type: ignore[arg-type]


@pytest.fixture
def folders(tmp_path):
    """``allowed`` (with red.png) and, beside it, a secret that is a valid image (so reading it would succeed)."""
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (allowed / "red.png").write_bytes(RED)
    (tmp_path / "secret.png").write_bytes(RED)
    (other / "secret.png").write_bytes(RED)
    (tmp_path / "allowed-evil").mkdir()
    (tmp_path / "allowed-evil" / "red.png").write_bytes(RED)
    (allowed / "link.png").symlink_to(tmp_path / "secret.png")
    (allowed / "sub").symlink_to(other, target_is_directory=True)
    (allowed / "inner.png").symlink_to(allowed / "red.png")
    (allowed / "loop.png").symlink_to(allowed / "loop.png")
    (allowed / "folder.png").mkdir()
    os.mkfifo(allowed / "fifo.png")
    return tmp_path


LOCAL_REFUSED: list[tuple[str, Callable[[Path], str], str, str]] = [
    ("absolute-path-outside", lambda t: str(t / "secret.png"), "outside the folder", "image_url_not_allowed"),
    ("dot-dot-out-of-the-folder", lambda t: f"{t}/allowed/../secret.png", "outside the folder",
     "image_url_not_allowed"),
    ("file-url-with-encoded-dot-dot", lambda t: f"file://{t}/allowed/%2e%2e/secret.png", "outside the folder",
     "image_url_not_allowed"),
    ("symlink-in-the-folder-to-a-file-outside", lambda t: f"{t}/allowed/link.png", "outside the folder",
     "image_url_not_allowed"),
    ("symlinked-subfolder-outside", lambda t: f"{t}/allowed/sub/secret.png", "outside the folder",
     "image_url_not_allowed"),
    ("sibling-folder-with-the-same-prefix", lambda t: f"{t}/allowed-evil/red.png", "outside the folder",
     "image_url_not_allowed"),
    ("etc-passwd", lambda t: "/etc/passwd", "outside the folder", "image_url_not_allowed"),
    ("proc-self-environ", lambda t: "file:///proc/self/environ", "outside the folder", "image_url_not_allowed"),
    ("fifo-in-the-folder-does-not-block", lambda t: f"{t}/allowed/fifo.png", "not a regular file", "invalid_image"),
    ("folder-in-the-folder", lambda t: f"{t}/allowed/folder.png", "Is a directory", "invalid_image"),
    ("symlink-loop-in-the-folder", lambda t: f"{t}/allowed/loop.png", "loop", "invalid_image"),
    ("missing-file-in-the-folder", lambda t: f"{t}/allowed/missing.png", "No such file", "invalid_image"),
    ("relative-path", lambda t: "red.png", "must be a data: URL", "invalid_image"),
]


@pytest.mark.parametrize("path, words, code", [pytest.param(p, w, c, id=i) for i, p, w, c in LOCAL_REFUSED])
def test_local_paths_outside_the_folder_are_refused_naming_the_path(folders, path, words, code):
    url = path(folders)
    start = time.monotonic()
    with pytest.raises(APIError, match=words) as caught:
        read_request(url, APIConfig(local_images_dir=folders / "allowed"))
    assert caught.value.param == FIELD and caught.value.code == code and caught.value.status == 400
    assert time.monotonic() - start < 5
    if code == "image_url_not_allowed":
        message = caught.value.message
        assert unquote(url.removeprefix("file://")) in message and "--allow-local-images" in message


@pytest.mark.parametrize("path", [pytest.param(lambda t: f"{t}/allowed/red.png", id="file-in-the-folder"),
                                  pytest.param(lambda t: f"file://{t}/allowed/inner.png",
                                               id="symlink-that-stays-in-the-folder")])
def test_files_in_the_folder_are_read(folders, path):
    assert read_request(path(folders), APIConfig(local_images_dir=folders / "allowed"))[0].image.size == (40, 30)


def test_local_paths_without_the_flag_are_refused_naming_it(folders):
    with pytest.raises(APIError, match="--allow-local-images DIR") as caught:
        read_request(f"{folders}/allowed/red.png", APIConfig())
    assert caught.value.code == "image_url_not_allowed"


def test_the_flag_takes_a_folder_and_says_so(tmp_path, capsys):
    from webui.config import build_parser, config_from_args

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--allow-local-images"])
    assert "--allow-local-images: expected one argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--allow-local-images", str(tmp_path / "missing")])
    assert "must be a folder that exists" in capsys.readouterr().err
    assert config_from_args(["--allow-local-images", str(tmp_path)]).local_images_dir == tmp_path.resolve()
    assert "DIR" in build_parser().format_help()
    with pytest.raises(SystemExit, match="--allow-private-image-urls widens --allow-image-urls"):
        config_from_args(["--allow-private-image-urls"])


# --- through the real API server and the Chat tab --------------------------------------------------------------------

@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir, tiny_llava_dir):
    """The API with the tiny LLaVA, local images allowed under a folder, URLs allowed (public addresses only)."""
    import openai

    from tests.api.conftest import API_KEY, start_api

    models = tmp_path_factory.mktemp("hostile-models") / "models"
    models.mkdir()
    (models / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    folder = tmp_path_factory.mktemp("hostile-images")
    ctx, base, _ = start_api(tmp_path_factory, default_model_dir, "--models-dir", str(models), "--model",
                             "tiny-llava", "--allow-local-images", str(folder), "--allow-image-urls")
    with ctx:
        yield openai.OpenAI(base_url=base, api_key=API_KEY, max_retries=0)


def ask(client, url: str):
    return client.chat.completions.create(model="tiny-llava", max_tokens=1, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is it?"}, {"type": "image_url",
                                                                                "image_url": {"url": url}}]}])


API_REFUSED = [
    ("png-bomb", lambda: data_url(png_bomb()), "invalid_image", "over the limit of 50 megapixels"),
    ("svg", lambda: "data:image/svg+xml;base64," + __import__("base64").b64encode(SVG).decode(), "invalid_image",
     "SVG images are not accepted"),
    ("truncated-png", lambda: data_url(NOISE[:len(NOISE) // 2]), "invalid_image", "could not be decoded"),
    ("file-outside-the-folder", lambda: "/etc/passwd", "image_url_not_allowed", "outside the folder"),
    ("cloud-metadata-url", lambda: "http://169.254.169.254/latest/meta-data/", "image_url_not_allowed",
     "cloud metadata"),
    ("loopback-url", lambda: "http://127.0.0.1:9/x.png", "image_url_not_allowed", "--allow-private-image-urls"),
]


@pytest.mark.parametrize("url, code, words", [pytest.param(u, c, w, id=i) for i, u, c, w in API_REFUSED])
def test_hostile_images_over_the_api_get_a_400_naming_the_part_and_the_server_keeps_serving(api, url, code, words):
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        ask(api, url())
    body = caught.value.body
    assert body["param"] == "messages[0].content[1].image_url" and body["code"] == code and words in body["message"]
    assert ask(api, data_url(RED)).usage.completion_tokens == 1  # still serving


def test_a_10000_frame_gif_over_the_api_is_read_as_its_first_frame(api):
    assert ask(api, data_url(gif(10_000, (1000, 1000)))).usage.completion_tokens == 1


@pytest.fixture(scope="module")
def chat(tmp_path_factory, tiny_llava_dir):
    """A Chat tab session with the tiny LLaVA."""
    from tests.conftest import TEST_THREADS
    from webui.config import AppConfig
    from webui.controllers.chat import ChatSession
    from webui.controllers.generation import ActiveRequests
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path_factory.mktemp("hostile-chat") / "data", threads=TEST_THREADS,
                       device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    services = Services.create(config)
    services.models.load("tiny-llava")
    yield ChatSession(services, ActiveRequests())
    services.close()


@pytest.mark.parametrize("make, words", [pytest.param(png_bomb, "over the limit of 50 megapixels", id="png-bomb"),
                                         pytest.param(lambda: SVG, "SVG images are not accepted", id="svg"),
                                         pytest.param(lambda: pil_image("TIFF"), "TIFF", id="tiff")])
def test_hostile_images_attached_in_the_chat_tab_are_refused_and_nothing_is_stored(chat, make, words):
    from webui.controllers import UserError
    from webui.engine import SamplingParams

    from webui.images import image_digest
    from webui.store import StoreError

    chats = [c.id for c in chat.chats.list()]
    with pytest.raises(UserError, match=f"Image 2: .*{words}"):
        list(chat.send(None, "What is it?", "", SamplingParams(temperature=0, max_new_tokens=1), ("tab", "chat"),
                       images=[RED, make()]))
    assert [c.id for c in chat.chats.list()] == chats  # no chat, no message
    with pytest.raises(StoreError):
        chat.chats.image(image_digest(RED))  # and not the good image either
