"""Chat modes: instruct (unchanged), chat (a "Name: text" transcript ending with "Char:") and chat-instruct (the
instruction template around the command around the transcript), their stop strings, continuing a reply, and the
mode's record."""

from __future__ import annotations

import pytest

from webui.chat import ChatPromptError, render_chat_prompt
from webui.chat.characters import Character
from webui.chat.context import fit_chat
from webui.chat.modes import CHAT_TEMPLATE, DEFAULT_COMMAND, ChatMode, ModeError
from webui.chat.templates import BUILTIN, ChatTemplate

CHATML = ChatTemplate("ChatML", BUILTIN["ChatML"])
ALPACA = ChatTemplate("Alpaca", BUILTIN["Alpaca"])
ANN = Character("Ann", "Hi {{user}}!", "{{char}} is a pirate. <USER> is her friend.", "Zed", "{{user}} is tall.")
TURNS = [{"role": "assistant", "content": "Hi Zed!"}, {"role": "user", "content": "Where to?"}]


class NoTemplate:
    """A base model's tokenizer: no chat template, no special tokens."""

    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(range(len(text.split())))


TOK = NoTemplate()


def test_chat_mode_is_a_plain_transcript_ending_with_the_characters_name() -> None:
    prompt = render_chat_prompt(TOK, TURNS, mode=ChatMode("chat", ANN))
    assert prompt == ("Ann is a pirate. Zed is her friend.\n\nZed is tall.\n\n"
                      "Ann: Hi Zed!\nZed: Where to?\nAnn:")


def test_chat_mode_without_a_character_uses_the_system_prompt_and_default_names() -> None:
    prompt = render_chat_prompt(TOK, TURNS, "Be brief.", mode=ChatMode("chat"))
    assert prompt == "Be brief.\n\nAssistant: Hi Zed!\nYou: Where to?\nAssistant:"
    assert render_chat_prompt(TOK, TURNS[1:], mode=ChatMode("chat", user_name="Mo")) == "Mo: Where to?\nAssistant:"


def test_chat_mode_continues_the_last_reply_mid_sentence() -> None:
    turns = [*TURNS, {"role": "assistant", "content": "To the"}]
    assert render_chat_prompt(TOK, turns, continue_last=True, mode=ChatMode("chat", ANN)).endswith(
        "Zed: Where to?\nAnn: To the")


def test_chat_instruct_wraps_the_command_around_the_transcript_in_the_template() -> None:
    prompt = render_chat_prompt(TOK, TURNS, "Stay in character.", template=CHATML,
                                mode=ChatMode("chat-instruct", ANN))
    transcript = "Ann is a pirate. Zed is her friend.\n\nZed is tall.\n\nAnn: Hi Zed!\nZed: Where to?\n"
    assert prompt == ("<|im_start|>system\nStay in character.<|im_end|>\n"
                      "<|im_start|>user\nContinue the chat dialogue below. Write a single reply for the character "
                      f"\"Ann\".\n\n{transcript}<|im_end|>\n<|im_start|>assistant\nAnn:")


def test_chat_instruct_command_is_editable_and_continuing_keeps_the_partial_reply() -> None:
    mode = ChatMode("chat-instruct", ANN, command="Play {{char}} for {{user}}:\n<|prompt|>")
    turns = [*TURNS, {"role": "assistant", "content": "To the"}]
    prompt = render_chat_prompt(TOK, turns, template=ALPACA, continue_last=True, mode=mode)
    assert prompt.endswith("### Instruction:\nPlay Ann for Zed:\nAnn is a pirate. Zed is her friend.\n\nZed is tall."
                           "\n\nAnn: Hi Zed!\nZed: Where to?\n\n\n### Response:\nAnn: To the")


def test_instruct_is_unchanged_and_ignores_the_character() -> None:
    plain = render_chat_prompt(TOK, TURNS, "sys", template=CHATML)
    assert render_chat_prompt(TOK, TURNS, "sys", template=CHATML, mode=ChatMode("instruct", ANN)) == plain


def test_stop_strings_of_each_mode() -> None:
    assert ChatMode().stops(ALPACA) == ("### Instruction:",)
    assert ChatMode("chat", ANN).stops(ALPACA) == ("\nZed:", "\nAnn:")
    assert ChatMode("chat").stops(CHATML) == ("\nYou:", "\nAssistant:")
    assert ChatMode("chat-instruct", ANN).stops(ALPACA) == ("### Instruction:", "\nZed:", "\nAnn:")


def test_chat_mode_needs_no_instruction_template_but_chat_instruct_does() -> None:
    assert render_chat_prompt(TOK, TURNS, mode=ChatMode("chat")).endswith("Assistant:")
    with pytest.raises(ChatPromptError, match="no chat template of its own"):
        render_chat_prompt(TOK, TURNS, mode=ChatMode("chat-instruct"))


def test_greeting_is_filled() -> None:
    assert ChatMode("chat", ANN).greeting() == "Hi Zed!"
    assert ChatMode("chat", ANN, user_name="Mo").greeting() == "Hi Mo!"
    assert ChatMode().greeting() == ""
    assert ChatMode("instruct", ANN).greeting() == ""  # instruct leaves the character out (text-generation-webui)


def test_fitting_drops_the_oldest_turns_in_a_chat_mode() -> None:
    turns = [{"role": "user", "content": "one two three"}, {"role": "assistant", "content": "four five"},
             {"role": "user", "content": "six"}]
    fitted = fit_chat(TOK, turns, "", 5, mode=ChatMode("chat"))
    assert fitted.dropped == 2 and fitted.prompt == "You: six\nAssistant:"


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "roleplay"}, "mode must be one of instruct, chat, chat-instruct, got 'roleplay'"),
    ({"name": "chat-instruct", "command": "no prompt here"}, "must contain <|prompt|>"),
    ({"name": "chat", "chat_template": " "}, "chat template is empty"),
    ({"name": "chat", "user_name": 3}, "must be text"),
])
def test_bad_modes_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ModeError, match=message.replace("|", r"\|")):
        ChatMode(**kwargs)


def test_a_bad_chat_template_is_a_prompt_error() -> None:
    with pytest.raises(ChatPromptError, match="could not be rendered"):
        render_chat_prompt(TOK, TURNS, mode=ChatMode("chat", chat_template="{% for %}"))


def test_record_keeps_the_character_by_content_and_only_what_differs() -> None:
    assert ChatMode().to_record() is None and ChatMode.from_record(None) == ChatMode()
    mode = ChatMode("chat-instruct", ANN, "Mo", "", "X <|prompt|>", CHAT_TEMPLATE + " ")
    record = mode.to_record()
    assert record is not None and record["character"]["context"] == ANN.context
    assert ChatMode.from_record(record) == mode
    assert ChatMode.from_record({"mode": "chat"}) == ChatMode("chat")
    assert ChatMode("chat").to_record() == {"mode": "chat"} and DEFAULT_COMMAND.endswith("<|prompt|>")
    with pytest.raises(ModeError, match="unknown keys: colour"):
        ChatMode.from_record({"mode": "chat", "colour": 1})
    with pytest.raises(ModeError, match="chat_mode.character: character field 'context' must be text"):
        ChatMode.from_record({"mode": "chat", "character": {"name": "A", "context": 1}})


def test_impersonate_prompts_end_with_the_users_name() -> None:
    msgs = [{"role": "system", "content": "sys"}, *TURNS, {"role": "assistant", "content": "North."}]
    assert ChatMode("chat", ANN).user_turn_prompt(TOK, msgs, CHATML).endswith("Zed: Where to?\nAnn: North.\nZed:")
    prompt = ChatMode("chat-instruct", ANN).user_turn_prompt(TOK, msgs, CHATML)
    assert 'for the character "Zed"' in prompt and prompt.endswith("<|im_start|>assistant\nZed:")


def test_a_chat_template_with_a_type_error_is_a_prompt_error_not_a_crash() -> None:
    with pytest.raises(ChatPromptError, match="could not be rendered: TypeError"):
        render_chat_prompt(TOK, TURNS, mode=ChatMode("chat", chat_template="{{ 1 + 'a' }}"))
