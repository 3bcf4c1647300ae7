"""ChatModes without generating: which instruction template and chat mode (character, command, greeting) a chat's
reply is written in, from the settings, the chat and a stored reply's record, on the tiny model and a real
characters folder."""

from __future__ import annotations

import pytest

from webui.chat.characters import Character
from webui.chat.modes import CHAT, CHAT_INSTRUCT, DEFAULT_COMMAND, INSTRUCT, ChatMode
from webui.chat.reply import ReplyRecord
from webui.controllers import UserError
from webui.controllers.chat_modes import ChatModes, greeting_turns

ANN = Character("Ann", "Ahoy, {{user}}!", "{{char}} is a pirate captain.", "Zed")


@pytest.fixture
def modes(services):
    services.characters.create(ANN)
    return ChatModes(services)


def test_the_template_is_the_chat_tabs_choice_and_a_wrong_one_says_where_it_is_chosen(modes, services):
    own = modes.template()  # no choice: the model's own (or a built-in guessed when it has none)
    assert own == services.templates.resolve("", services.loaded.tokenizer)
    services.settings.update(chat_template="ChatML")
    assert modes.template().name == "ChatML" and modes.template(services.loaded).name == "ChatML"
    services.settings.update(chat_template="No such template")
    with pytest.raises(UserError, match="^Instruction template: "):
        modes.template()


def test_a_stored_reply_keeps_the_template_and_mode_its_record_names(modes, services):
    services.settings.update(chat_template="ChatML", chat_instruct_command="Now <|prompt|>")
    chat = services.chats.create("t", mode=CHAT, character="Ann")
    unrecorded = ReplyRecord()  # (edited by hand: no model) -> as the chat and settings are now
    assert modes.reply_template(services.loaded, unrecorded).name == "ChatML"
    assert modes.reply_mode(chat.id, unrecorded) == ChatMode(CHAT, ANN)
    assert modes.reply_template(services.loaded, None).name == "ChatML"
    recorded = ReplyRecord(model="tiny", chat_template={"name": "Mine", "source": "{{ messages }}"},
                           chat_mode=ChatMode(CHAT_INSTRUCT, Character("Bo"), command="Be <|prompt|>").to_record())
    assert modes.reply_template(services.loaded, recorded).source == "{{ messages }}"
    assert modes.reply_mode(chat.id, recorded) == ChatMode(CHAT_INSTRUCT, Character("Bo"), command="Be <|prompt|>")
    own = ReplyRecord(model="tiny")  # recorded with the model's own template and plain instruct
    assert modes.reply_template(services.loaded, own).name == "" and modes.reply_mode(chat.id, own) == ChatMode()
    with pytest.raises(UserError, match="^this reply's record: "):
        modes.reply_mode(chat.id, ReplyRecord(model="tiny", chat_mode={"mode": "shouting"}))
    with pytest.raises(UserError, match="chat_template"):
        modes.reply_template(services.loaded, ReplyRecord(model="tiny", chat_template={"name": "x"}))


def test_a_mode_takes_its_character_and_in_chat_instruct_the_saved_command(modes, services):
    assert modes.mode(None) == ChatMode() and modes.mode_of(INSTRUCT, None) == ChatMode()
    assert modes.mode_of(CHAT, "Ann") == ChatMode(CHAT, ANN)
    assert modes.command() == DEFAULT_COMMAND and modes.mode_of(CHAT_INSTRUCT, "Ann").command == DEFAULT_COMMAND
    services.settings.update(chat_instruct_command="Play <|character|>.\n<|prompt|>")
    assert modes.mode_of(CHAT_INSTRUCT, None).command == "Play <|character|>.\n<|prompt|>"
    assert modes.mode_of(CHAT, None).command == DEFAULT_COMMAND  # only chat-instruct reads it
    for mode, character, said in [("shouting", None, "mode must be one of"), (CHAT, "Nobody", "Nobody")]:
        with pytest.raises(UserError, match=said):
            modes.mode_of(mode, character)


def test_a_chats_mode_is_its_own_and_a_lost_character_says_what_to_do(modes, services):
    chat = services.chats.create("t", mode=CHAT, character="Ann")
    assert modes.mode(chat.id) == ChatMode(CHAT, ANN)
    services.characters.delete("Ann")
    with pytest.raises(UserError, match="^This chat's character: .*choose another character \\(or none\\)"):
        modes.mode(chat.id)


def test_the_greeting_opens_a_chat_only_in_the_chat_modes():
    assert greeting_turns(ChatMode(CHAT, ANN)) == [{"role": "assistant", "content": "Ahoy, Zed!"}]
    assert greeting_turns(ChatMode(CHAT_INSTRUCT, ANN)) == [{"role": "assistant", "content": "Ahoy, Zed!"}]
    assert greeting_turns(ChatMode(INSTRUCT, ANN)) == [] and greeting_turns(ChatMode(CHAT)) == []
