"""Images over /v1/chat/completions with the official openai client: image_url parts (data: URLs; local files
under the folder of --allow-local-images DIR) to a tiny random vision model, and a 400 naming the part for a
text-only model, an unreadable image, one over --max-image-mb, or a source the server does not allow."""

from __future__ import annotations

import urllib.request

import openai
import pytest

from tests.api.conftest import API_KEY, start_api
from tests.conftest import run_async
from tests.vision_models import noise_png, png
from webui.images import data_url, read_image

RED = png((200, 30, 30), stripe=5)
BLUE = png((20, 40, 220), size=(30, 44), stripe=9)
BIG = noise_png((200, 200))  # over the 0.05 MB limit this server is started with
GGUF = "tiny-idefics3.gguf"
GGUF_MODEL = GGUF.removesuffix(".gguf")  # its name over the API


def message(*urls: str, text: str = "What is in the picture?") -> list[dict]:
    return [{"role": "user", "content": [*({"type": "image_url", "image_url": {"url": u}} for u in urls),
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def local_images(tmp_path_factory):
    """The folder the server below reads local image files from, with red.png in it."""
    folder = tmp_path_factory.mktemp("local-images")
    (folder / "red.png").write_bytes(RED)
    return folder


@pytest.fixture(scope="module")
def api(tmp_path_factory, default_model_dir, tiny_llava_dir, tiny_model_dir, tiny_idefics3_gguf, local_images):
    """The tiny LLaVA in use, the tiny text-only Llama and a tiny Idefics3 .gguf with its projector (llama.cpp)
    beside it; local image files allowed under ``local_images``, images up to 0.05 MB."""
    assert len(BIG) > 0.05 * 2**20 > len(RED)
    models = tmp_path_factory.mktemp("vision-models") / "models"
    models.mkdir()
    (models / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    (models / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    for file in tiny_idefics3_gguf[1].parent.iterdir():  # the .gguf and its mmproj .gguf side by side
        (models / file.name).symlink_to(file)
    ctx, base, key = start_api(tmp_path_factory, default_model_dir, "--models-dir", str(models), "--model",
                               "tiny-llava", "--also-load", "tiny", f"{GGUF}@llamacpp", "--allow-local-images",
                               str(local_images), "--max-image-mb", "0.05")
    with ctx:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10):
            pass
        yield openai.OpenAI(base_url=base, api_key=API_KEY, max_retries=0)


def ask(client, messages: list[dict], model: str = "tiny-llava"):
    return client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)


def bad_request(client, messages: list[dict], model: str = "tiny-llava") -> dict:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, messages, model)
    return caught.value.body


def test_an_image_message_gets_a_reply_that_depends_on_the_image(api, tiny_llava_dir, local_images):
    red, blue = ask(api, message(data_url(RED))), ask(api, message(data_url(BLUE)))
    assert red.choices[0].message.content and red.choices[0].message.content != blue.choices[0].message.content
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_llava_dir)
    text_only = ask(api, [{"role": "user", "content": "What is in the picture?"}])
    image_tokens = len(processor(text=["<image>"], images=[read_image(RED, 2**20).image])["input_ids"][0])
    assert red.usage.prompt_tokens == text_only.usage.prompt_tokens + image_tokens  # image tokens are counted
    again = ask(api, message(data_url(RED)))
    assert again.choices[0].message.content == red.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > image_tokens  # the image's KV came from the cache
    path = local_images / "red.png"  # --allow-local-images DIR: a file path under DIR reads the same image
    assert ask(api, message(f"file://{path}")).choices[0].message.content == red.choices[0].message.content


def test_an_image_message_to_a_llamacpp_model_with_its_projector(api):
    red, blue = ask(api, message(data_url(RED)), model=GGUF_MODEL), ask(api, message(data_url(BLUE)), model=GGUF_MODEL)
    assert red.choices[0].message.content and red.choices[0].message.content != blue.choices[0].message.content
    text_only = ask(api, [{"role": "user", "content": "What is in the picture?"}], model=GGUF_MODEL)
    assert red.usage.prompt_tokens > text_only.usage.prompt_tokens + 20  # tiles of 4 image tokens, with marks
    assert ask(api, message(data_url(RED)), model=GGUF_MODEL).choices[0].message.content == red.choices[0].message.content


def test_two_images_in_one_message_stream(api):
    stream = api.chat.completions.create(model="tiny-llava", messages=message(data_url(RED), data_url(BLUE)),
                                         max_tokens=6, temperature=0, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.prompt_tokens > 32  # two images of 16 tokens each


def test_a_text_only_model_gets_a_400_naming_the_part(api):
    body = bad_request(api, [{"role": "system", "content": "Be brief."}, *message(data_url(RED))], model="tiny")
    assert body["param"] == "messages[1].content[0].image_url" and "takes no images" in body["message"]


@pytest.mark.parametrize("url, words", [
    ("data:image/png;base64,bm90IGFuIGltYWdl", "not a readable image"),
    ("data:image/png;base64,***", "base64"),
    (data_url(BIG), "over this server's limit of 0.05 MB"),
    ("https://example.com/cat.png", "--allow-image-urls"),
    ("ftp://example.com/cat.png", "data: URL"),
])
def test_bad_images_get_a_400_naming_the_part(api, url, words):
    body = bad_request(api, message(data_url(RED), url))
    assert body["param"] == "messages[0].content[1].image_url" and words in body["message"], body


def test_local_files_and_urls_need_their_flags(tmp_path, tiny_llava_dir):
    """Without --allow-local-images DIR a path is refused (the server above allows them)."""
    from tests.conftest import load_model
    from webui.api.errors import APIError
    from webui.api.images import request_images
    from webui.api.protocol import ChatMessage
    from webui.api.serving import APIConfig

    model = load_model(tiny_llava_dir)
    path = tmp_path / "red.png"
    path.write_bytes(RED)
    for url, flag in ((str(path), "--allow-local-images"), (f"file://{path}", "--allow-local-images"),
                      ("http://127.0.0.1:9/x.png", "--allow-image-urls")):
        messages = [ChatMessage.model_validate(m) for m in message(url)]
        with pytest.raises(APIError, match=flag) as caught:
            run_async(request_images(messages, model, APIConfig(max_image_bytes=2**20)))
        assert caught.value.param == "messages[0].content[0].image_url"
    read = run_async(request_images([ChatMessage.model_validate(m) for m in message(str(path))], model,
                                    APIConfig(max_image_bytes=2**20, local_images_dir=tmp_path)))
    assert len(read) == 1 and read[0].image.size == (40, 30)


def test_a_chat_reply_with_an_image_reproduces_over_the_api(api, tmp_path, tiny_llava_dir):
    """The reproduce record of a Chat tab reply keeps its image (a data: URL): its API request, sent to a server
    with the same model, gives the same reply, as does running it in the Insight tab."""
    from tests.conftest import TEST_THREADS, last
    from webui.config import AppConfig
    from webui.controllers.chat import ChatSession
    from webui.controllers.generation import ActiveRequests
    from webui.controllers.insight import InsightController
    from webui.engine import SamplingParams
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu")
    config.make_dirs()
    (config.models_dir / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    services = Services.create(config)
    try:
        services.models.load("tiny-llava")
        session = ChatSession(services, ActiveRequests())
        done = last(session.send(None, "What is in the picture?", "", SamplingParams(temperature=0, max_new_tokens=8),
                                 ("tab", "chat"), images=[BLUE]))
        reply = session.chats.messages(done.chat_id)[-1].content
        record = session.inspect(done.chat_id).record
        assert InsightController(services).rerun(record.to_json())[0] == reply
    finally:
        services.close()
    route, body = record.api_body()
    assert route == "/chat/completions" and body["messages"][0]["content"][0]["image_url"]["url"] == data_url(BLUE)
    again = api.chat.completions.create(**body)
    assert again.choices[0].message.content == reply


def test_urls_are_fetched_with_their_flag(tmp_path, tiny_llava_dir):
    """--allow-image-urls: the server downloads the image (here from a local HTTP server, so with
    --allow-private-image-urls too), within the limit."""
    import functools
    import http.server
    import threading

    from tests.conftest import load_model
    from webui.api.errors import APIError
    from webui.api.images import request_images
    from webui.api.protocol import ChatMessage
    from webui.api.serving import APIConfig

    (tmp_path / "red.png").write_bytes(RED)
    (tmp_path / "big.png").write_bytes(BIG)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    model, base = load_model(tiny_llava_dir), f"http://127.0.0.1:{server.server_address[1]}"

    def read(name: str, limit: int = 2**20):
        messages = [ChatMessage.model_validate(m) for m in message(f"{base}/{name}")]
        return run_async(request_images(messages, model, APIConfig(max_image_bytes=limit, allow_image_urls=True,
                                                                   allow_private_image_urls=True)))

    try:
        assert read("red.png")[0].digest == read_image(RED, 2**20).digest
        with pytest.raises(APIError, match="over this server's limit"):
            read("big.png", int(0.05 * 2**20))
        with pytest.raises(APIError, match="HTTP 404"):
            read("missing.png")
    finally:
        server.shutdown()
