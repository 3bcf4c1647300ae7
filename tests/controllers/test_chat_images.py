"""Images in the Chat tab's messages, without a browser: a message to the tiny random LLaVA carries an image, the
reply reads it (the same as the engine alone gives for that prompt and image), regenerate, edit and impersonate
read it, and a text-only model or a bad image is a clear UserError that stores nothing."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_THREADS, last
from tests.vision_models import png
from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.engine import GenerationRequest, SamplingParams
from webui.images import read_image

GREEDY = SamplingParams(temperature=0, max_new_tokens=6, ban_eos=True)
KEY = ("tab-1", "chat")
RED, BLUE = png((200, 30, 30), stripe=5), png((20, 40, 220), size=(30, 44), stripe=9)


@pytest.fixture
def vision_services(tmp_path, tiny_llava_dir, tiny_model_dir):
    """Services with the tiny LLaVA in use and the tiny text-only Llama in the models dir."""
    from webui.config import AppConfig
    from webui.services import Services

    config = AppConfig(user_data_dir=tmp_path / "data", threads=TEST_THREADS, device="cpu", max_image_mb=0.01)
    config.make_dirs()
    (config.models_dir / "tiny-llava").symlink_to(tiny_llava_dir, target_is_directory=True)
    (config.models_dir / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    made = Services.create(config)
    made.models.load("tiny-llava")
    yield made
    made.close()


@pytest.fixture
def session(vision_services, active):
    return ChatSession(vision_services, active)


def engine_reply(services, text: str, image: bytes) -> str:
    model = services.loaded
    prompt = model.tokenizer.apply_chat_template([{"role": "user", "content": model.image_placeholder + text}])
    return services.in_use().engine.generate(GenerationRequest(
        prompt, GREEDY, add_special_tokens=False, images=(read_image(image, 2**20),))).text


def test_a_message_with_an_image_gets_a_reply_that_reads_it(session, vision_services):
    done = last(session.send(None, "What is this?", "", GREEDY, KEY, images=[RED]))
    history = session.chats.messages(done.chat_id)
    assert len(history[0].images) == 1 and history[1].content == engine_reply(vision_services, "What is this?", RED)
    assert history[1].content != engine_reply(vision_services, "What is this?", BLUE)
    assert history[1].stats["prompt_tokens"] > 16  # the image's 16 tokens are counted
    again = last(session.regenerate(done.chat_id, GREEDY, KEY))
    assert session.chats.messages(again.chat_id)[1].content == history[1].content  # greedy, the image kept
    last(session.edit(done.chat_id, 0, "Describe it.", GREEDY, KEY))
    edited = session.chats.messages(done.chat_id)
    assert edited[0].content == "Describe it." and edited[0].images == history[0].images
    assert edited[1].content == engine_reply(vision_services, "Describe it.", RED)


def test_an_image_alone_is_a_message_and_its_chat_is_titled(session):
    done = last(session.send(None, "", "", GREEDY, KEY, images=[BLUE]))
    assert done.title == "Image" and [m.role for m in session.chats.messages(done.chat_id)] == ["user", "assistant"]


def test_images_a_model_cannot_take_are_refused_and_nothing_is_stored(session, vision_services):
    from tests.vision_models import noise_png

    with pytest.raises(UserError, match="Image 1: the image is .* over the limit of 0.01 MB"):
        list(session.send(None, "Big", "", GREEDY, KEY, images=[noise_png((80, 80))]))
    with pytest.raises(UserError, match="Image 2: not a readable image"):
        list(session.send(None, "Broken", "", GREEDY, KEY, images=[RED, b"not an image"]))
    done = last(session.send(None, "Red?", "", GREEDY, KEY, images=[RED]))
    vision_services.models.load("tiny", keep_others=False)
    with pytest.raises(UserError, match="tiny takes no images"):
        list(session.send(None, "Hi", "", GREEDY, KEY, images=[RED]))
    with pytest.raises(UserError, match="This chat has images and tiny takes none"):
        list(session.regenerate(done.chat_id, GREEDY, KEY))
    assert [c.title for c in session.chats.list()] == ["Red?"]


def test_impersonate_reads_the_chats_images(session, vision_services):
    """Your next message, written by the model, reads the chat's images as the replies do (the same chat with
    another image gives another message); a text-only model says it takes none."""
    def impersonated(image: bytes) -> tuple[int, str]:
        chat_id = last(session.send(None, "What is this?", "", GREEDY, KEY, images=[image])).chat_id
        return chat_id, last(session.impersonate(chat_id, "", GREEDY, KEY))

    red_chat, red = impersonated(RED)
    assert red and red != impersonated(BLUE)[1]
    assert impersonated(RED)[1] == red  # greedy: the same image, the same message
    vision_services.models.load("tiny", keep_others=False)
    with pytest.raises(UserError, match="This chat has images and tiny takes none"):
        list(session.impersonate(red_chat, "", GREEDY, KEY))


def test_the_oldest_messages_leave_with_their_images_when_the_context_is_full(session):
    """Fitting a chat counts each image's tokens (16 here), not just its placeholder: the oldest messages are left
    out, and the reply is written (counted as text alone, the chat would seem to fit and the model refuse it)."""
    tight = GREEDY.replace(truncation_length=100)
    chat_id = None
    for text, image in (("First picture.", RED), ("Second picture.", BLUE), ("Third picture.", RED)):
        chat_id = last(session.send(chat_id, text, "", tight, KEY, images=[image])).chat_id
    reply = session.chats.messages(chat_id)[-1]
    assert reply.role == "assistant" and reply.record.dropped >= 2 and "not sent" in last(
        session.regenerate(chat_id, tight, KEY)).stats
