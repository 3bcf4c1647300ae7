"""Instruction templates: the built-ins, the user's own (saved, checked, deleted), guessing one for a model
without a template, and chats rendered with them."""

from __future__ import annotations

import pytest

from tests.conftest import load_model
from webui.chat import ChatPromptError, render_chat_prompt
from webui.chat.templates import (BUILTIN, FALLBACK, SAMPLE, ChatTemplate, TemplateError, TemplateStore, check_source,
                                  guess, render_source)

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


@pytest.mark.parametrize("name", list(BUILTIN))
def test_every_built_in_writes_every_message_and_asks_for_a_reply(name):
    text = render_source(BUILTIN[name], SAMPLE, True, SPECIAL)
    assert all(m["content"] in text for m in SAMPLE)
    assert text.index("Hi!") < text.index("Hello.") < text.index("How are you?")
    without = render_source(BUILTIN[name], SAMPLE, False, SPECIAL)
    assert text.startswith(without) and len(text) > len(without) or name == "Mistral"  # [/INST] is the prompt


def test_chatml_is_exactly_the_default_models_own_on_a_chat_with_a_system_prompt(tiny_model):
    messages = SAMPLE
    ours = render_chat_prompt(tiny_model.tokenizer, messages, template=ChatTemplate("ChatML", BUILTIN["ChatML"]))
    assert ours == render_chat_prompt(tiny_model.tokenizer, messages)


class FakeTokenizer:
    """A tokenizer whose vocabulary has only the given special tokens as single tokens."""

    chat_template = None

    def __init__(self, *special: str):
        self.special = special

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1] if text in self.special else [1] * len(text)


@pytest.mark.parametrize("tokens, expected", [
    (("<|im_start|>",), "ChatML"), (("<|start_header_id|>",), "Llama 3"), (("<start_of_turn>",), "Gemma"),
    (("<|assistant|>", "<|end|>"), "Phi-3"), (("[INST]",), "Mistral"), ((), FALLBACK),
])
def test_a_template_is_guessed_from_the_special_tokens(tokens, expected):
    assert guess(FakeTokenizer(*tokens)) == expected


@pytest.mark.parametrize("source, said", [
    ("", "the template is empty"),
    ("{% for m in messages %}{{ m['content'] }", "could not be rendered"),
    ("{% for m in messages %}x{% endfor %}", "does not write the messages' content"),
    ("{{ raise_exception('no system role') }}", "no system role"),
])
def test_a_template_that_cannot_work_is_refused_with_the_reason(source, said):
    with pytest.raises(TemplateError, match=said):
        check_source(source)


def test_user_templates_are_saved_listed_and_deleted_and_a_bad_one_saves_nothing(tmp_path):
    store = TemplateStore(tmp_path / "templates")
    assert store.names() == list(BUILTIN)
    source = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant]"
    assert store.save(" Mine ", source) == "Mine"
    assert store.names()[-1] == "Mine" and store.source("Mine") == source
    with pytest.raises(TemplateError, match="does not write the messages' content"):
        store.save("Mine", "{% for m in messages %}x{% endfor %}")
    assert store.source("Mine") == source  # the saved one is kept
    with pytest.raises(TemplateError, match="'ChatML' is a built-in"):
        store.save("ChatML", source)
    with pytest.raises(TemplateError, match="must be a plain name"):
        store.save("../evil", source)
    with pytest.raises(TemplateError, match="there is no template 'Nope'; choose one of: ChatML"):
        store.source("Nope")
    store.delete("Mine")
    assert store.names() == list(BUILTIN)
    with pytest.raises(TemplateError, match="built in and cannot be deleted"):
        store.delete("Alpaca")


def test_a_model_without_a_template_gets_a_guessed_built_in_and_a_note(untemplated_model_dir, tmp_path):
    model = load_model(untemplated_model_dir)
    try:
        assert not model.tokenizer.chat_template
        with pytest.raises(ChatPromptError, match="has no chat template of its own; choose an instruction "
                                                  "template \\(the built-in 'ChatML' fits"):
            render_chat_prompt(model.tokenizer, [{"role": "user", "content": "Hi"}])
        chosen = TemplateStore(tmp_path).resolve("", model.tokenizer)
        assert chosen.name == "ChatML" and "no chat template; using the built-in 'ChatML'" in chosen.note
        text = render_chat_prompt(model.tokenizer, [{"role": "user", "content": "Hi"}], template=chosen)
        assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        plain = TemplateStore(tmp_path).resolve("User/Assistant", model.tokenizer)
        assert plain.stops == ("\nUser:",) and render_chat_prompt(
            model.tokenizer, [{"role": "user", "content": "Hi"}], template=plain) == "User: Hi\nAssistant:"
    finally:
        model.close()


def test_the_api_names_chat_template_when_a_model_has_none(tmp_path):
    from types import SimpleNamespace

    from loaders.base import Capabilities
    from webui.api.errors import APIError
    from webui.api.routes import request_template

    model = SimpleNamespace(name="bare", tokenizer=FakeTokenizer("<start_of_turn>"),
                            capabilities=Capabilities())
    store = TemplateStore(tmp_path)
    with pytest.raises(APIError) as info:
        request_template(store, None, model)
    assert info.value.param == "chat_template" and "suggest 'Gemma'" in str(info.value)
    assert request_template(store, "Gemma", model).source == BUILTIN["Gemma"]

