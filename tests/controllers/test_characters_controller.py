"""CharactersController and ChatSession in the chat modes, on a real SQLite file, a real characters folder and the
tiny model: characters edited, imported and exported; a chat started with a greeting; replies in each mode stored
with the mode and the character by content, so their records reproduce after the character is edited."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import last
from webui.chat.characters import Character
from webui.chat.modes import DEFAULT_COMMAND
from webui.controllers import UserError
from webui.controllers.characters import CharactersController
from webui.controllers.chat import ChatSession
from webui.controllers.insight import InsightController
from webui.engine import SamplingParams
from webui.reproduce import parse_record, record_for_reply

GREEDY = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)
KEY = ("tab-1", "chat")
DATA = Path(__file__).resolve().parents[1] / "data" / "characters"


@pytest.fixture
def session(services, active):
    return ChatSession(services, active)


@pytest.fixture
def characters(session):
    controller = CharactersController(session)
    controller.save(None, "Ann", "Ahoy, {{user}}!", "{{char}} is a pirate captain.", "Zed", "{{user}} is a sailor.")
    return controller


def test_a_chat_with_a_character_starts_with_its_greeting_and_replies_in_its_mode(session, characters):
    view = characters.start_chat("chat", "Ann")
    assert view.messages == [{"role": "assistant", "content": "Ahoy, Zed!"}]
    assert (view.mode, view.character, view.title) == ("chat", "Ann", "Ann")
    done = last(session.send(view.chat_id, "Where to?", "", GREEDY, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.record.chat_mode == {"mode": "chat", "character": {
        "name": "Ann", "greeting": "Ahoy, {{user}}!", "context": "{{char}} is a pirate captain.", "user_name": "Zed",
        "user_bio": "{{user}} is a sailor."}}
    assert {"\nZed:", "\nAnn:"} <= set(reply.record.run.params["stop"])
    seen = session.inspect(done.chat_id).seen
    assert seen is not None and seen.text == ("Ann is a pirate captain.\n\nZed is a sailor.\n\nAnn: Ahoy, Zed!\n"
                                              "Zed: Where to?\nAnn:")


def test_a_new_chat_sent_in_a_mode_gets_the_greeting_first(session, characters):
    done = last(session.send(None, "Hi", "", GREEDY, KEY, mode="chat-instruct", character="Ann"))
    assert [m["content"] for m in done.messages][:2] == ["Ahoy, Zed!", "Hi"] and done.mode == "chat-instruct"
    with pytest.raises(UserError, match="no character 'Nobody'"):
        last(session.send(None, "Hi", "", GREEDY, KEY, mode="chat", character="Nobody"))
    with pytest.raises(UserError, match="mode must be one of"):
        last(session.send(None, "Hi", "", GREEDY, KEY, mode="story"))


@pytest.mark.parametrize("mode", ["chat", "chat-instruct"])
def test_new_chat_with_a_character_opens_with_its_greeting_shown_stored_and_sent(session, characters, mode):
    view = characters.new_chat(mode, "Ann")  # before anything is typed: the greeting, stored
    assert view.chat_id is not None and view.messages == [{"role": "assistant", "content": "Ahoy, Zed!"}]
    assert [(m.role, m.content) for m in session.chats.messages(view.chat_id)] == [("assistant", "Ahoy, Zed!")]
    expected = characters.preview(view.chat_id, mode, "Ann", "Where to?").prompt
    assert "Ahoy, Zed!" in expected and "pirate captain" in expected
    done = last(session.send(view.chat_id, "Where to?", "", GREEDY, KEY))
    stored = session.chats.messages(done.chat_id)
    assert [(m.role, m.content) for m in stored[:2]] == [("assistant", "Ahoy, Zed!"), ("user", "Where to?")]
    assert len(stored) == 3 and stored[2].role == "assistant"  # greeting, your message, the reply
    assert session.inspect(done.chat_id).seen.text == expected  # what was shown is what the model read


def test_instruct_mode_leaves_the_characters_greeting_and_context_out(session, characters):
    view = characters.new_chat("instruct", "Ann")  # nothing opens the chat: it stays empty, unstored
    assert (view.chat_id, view.messages) == (None, [])
    expected = characters.preview(None, "instruct", "Ann", "Hi").prompt
    assert "Ahoy" not in expected and "pirate" not in expected
    done = last(session.send(None, "Hi", "", GREEDY, KEY, mode="instruct", character="Ann"))
    assert [m.role for m in session.chats.messages(done.chat_id)] == ["user", "assistant"]
    assert session.inspect(done.chat_id).seen.text == expected
    started = characters.start_chat("instruct", "Ann")  # "New chat with this character" in instruct: no greeting
    assert (started.messages, started.character) == ([], "Ann")
    assert "leaves Ann's greeting and context out" in characters.uses("instruct", "Ann")
    assert characters.uses("chat", "Ann") == "" and characters.new_chat("chat", None).chat_id is None


def test_the_preview_shows_each_modes_prompt(session, characters):
    instruct = characters.preview(None, "instruct", "Ann", "Hello")
    chat = characters.preview(None, "chat", "Ann", "Hello")
    both = characters.preview(None, "chat-instruct", "Ann", "Hello")
    assert instruct.prompt.startswith("<|im_start|>") and "pirate" not in instruct.prompt and "Ahoy" not in \
        instruct.prompt
    assert chat.prompt.endswith("Ann: Ahoy, Zed!\nZed: Hello\nAnn:") and chat.stops == ("\nZed:", "\nAnn:")
    assert ('<|im_start|>user\nContinue the chat dialogue below. Write a single reply for the character "Ann".\n\n'
            "Ann is a pirate captain.") in both.prompt and both.prompt.endswith("<|im_start|>assistant\nAnn:")
    assert chat.seen is not None and len(chat.seen.ids) == len(session.services.loaded.tokenizer.encode(
        chat.prompt, add_special_tokens=False))
    custom = characters.preview(None, "chat-instruct", "Ann", "Hello", command="Act as <|character|>.\n<|prompt|>")
    assert "Act as Ann.\nAnn is a pirate" in custom.prompt
    with pytest.raises(UserError, match="must contain <|prompt|>"):
        characters.preview(None, "chat-instruct", "Ann", command="nothing")


def test_a_record_reproduces_after_the_character_is_edited(session, characters, services):
    view = characters.start_chat("chat-instruct", "Ann")
    done = last(session.send(view.chat_id, "Where to?", "Stay in character.", GREEDY, KEY))
    history = session.chats.messages(done.chat_id)
    reply = history[-1]
    before = session.inspect(done.chat_id).seen
    characters.save("Ann", "Ann", "Hello.", "Ann is a farmer now.", "Zed")
    record = record_for_reply([{"role": m.role, "content": m.content} for m in history[:-1]], "", reply.record)
    again = parse_record(record.to_json())
    assert again.request(services.loaded.tokenizer).prompt == before.text and "pirate captain" in before.text
    assert session.inspect(done.chat_id).seen.text == before.text  # the reply is shown as it was written
    output, _ = InsightController(services).rerun(record.to_json())
    assert output == reply.content
    assert "farmer" in characters.preview(done.chat_id, "chat-instruct", "Ann").prompt  # new replies: the edit


def test_switching_a_chats_mode_changes_its_next_reply(session, characters):
    done = last(session.send(None, "Hi", "", GREEDY, KEY))
    assert done.mode == "instruct"
    view = characters.set_chat_mode(done.chat_id, "chat", "Ann")
    assert (view.mode, view.character) == ("chat", "Ann")
    after = last(session.regenerate(done.chat_id, GREEDY, KEY))
    assert session.chats.messages(after.chat_id)[-1].record.chat_mode["mode"] == "chat"
    assert session.library.chat_params(after.chat_id).stop == ()  # the mode's stops are the mode's, not the chat's
    with pytest.raises(UserError, match="no character 'Ghost'"):
        characters.set_chat_mode(done.chat_id, "chat", "Ghost")
    with pytest.raises(UserError, match="Start a chat first"):
        characters.set_chat_mode(None, "chat", "Ann")


def test_continue_goes_on_in_the_mode_the_reply_was_written_in(session, characters):
    view = characters.start_chat("chat", "Ann")
    done = last(session.send(view.chat_id, "Where to?", "", GREEDY, KEY))
    characters.set_chat_mode(done.chat_id, "instruct", None)
    more = last(session.continue_reply(done.chat_id, GREEDY, KEY))
    assert session.chats.messages(more.chat_id)[-1].record.chat_mode["mode"] == "chat"


def test_characters_are_edited_duplicated_deleted_with_confirmation(characters):
    assert characters.open("Ann").character == Character("Ann", "Ahoy, {{user}}!", "{{char}} is a pirate captain.",
                                                          "Zed", "{{user}} is a sailor.")
    assert characters.duplicate("Ann").character.name == "Ann (copy)"
    with pytest.raises(UserError, match="Press Delete again to confirm"):
        characters.delete("Ann (copy)", confirmed=False)
    assert characters.delete("Ann (copy)", confirmed=True).names == ["Ann"]
    with pytest.raises(UserError, match="Could not save the character: a character named 'Ann' exists"):
        characters.save(None, "Ann", "", "")
    with pytest.raises(UserError, match="plain name"):
        characters.save(None, "a/b", "", "")


def test_import_a_png_card_and_export_both_ways(characters, tmp_path):
    view = characters.import_file(DATA / "Seraphina.png")
    assert view.character.name == "Seraphina" and view.picture is not None and "Seraphina" in view.names
    exported = characters.export("Seraphina", "yaml")
    assert yaml.safe_load(exported.read_text(encoding="utf-8"))["name"] == "Seraphina"
    card = characters.export("Seraphina", "card")
    assert characters.import_file(card).character.context == view.character.context
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(UserError, match="Could not import the character: 'bad.png' is a PNG without a character"):
        characters.import_file(bad)
    with pytest.raises(UserError, match="Export as one of yaml, card"):
        characters.export("Seraphina", "pdf")


def test_branch_and_impersonate_in_a_chat_mode(session, characters):
    view = characters.start_chat("chat", "Ann")
    done = last(session.send(view.chat_id, "Where to?", "", GREEDY, KEY))
    rows, branchable = session.last_tokens(done.chat_id)
    assert branchable and len(rows) >= 2
    alternative = next(a[0] for a in rows[1]["alts"] if a[0] != rows[1]["id"])
    characters.set_chat_mode(done.chat_id, "instruct", None)
    last(session.branch(done.chat_id, 1, alternative, GREEDY, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.stats["token_ids"][:2] == [rows[0]["id"], alternative]
    assert reply.record.chat_mode["mode"] == "chat"  # branched in the mode the reply was written in
    assert {"\nZed:", "\nAnn:"} <= set(reply.record.run.params["stop"])
    characters.set_chat_mode(done.chat_id, "chat", "Ann")
    draft = last(session.impersonate(done.chat_id, "", GREEDY, KEY))
    assert isinstance(draft, str)


def test_a_chat_whose_character_was_deleted_says_what_to_do(session, characters):
    view = characters.start_chat("chat", "Ann")
    characters.delete("Ann", confirmed=True)
    with pytest.raises(UserError, match="This chat's character: there is no character 'Ann'.*choose another "
                                        "character \\(or none\\)"):
        last(session.send(view.chat_id, "Hi", "", GREEDY, KEY))
    assert [m["content"] for m in session.library.view(view.chat_id).messages] == ["Ahoy, Zed!"]
    characters.set_chat_mode(view.chat_id, "chat", None)
    done = last(session.send(view.chat_id, "Hi", "", GREEDY, KEY))
    assert len(done.messages) == 3


def test_the_chat_instruct_command_typed_is_saved_as_typed_and_used_by_replies(session, characters):
    assert characters.command() == DEFAULT_COMMAND
    assert characters.save_command("Play <|char") != ""  # a keystroke on the way: saved, and what is wrong said
    assert session.services.settings.get().chat_instruct_command == "Play <|char"
    with pytest.raises(UserError, match="must contain <|prompt|>"):
        last(session.send(None, "Hi", "", GREEDY, KEY, mode="chat-instruct", character="Ann"))
    assert characters.save_command("Play <|character|> here.\n<|prompt|>") == ""
    assert characters.command() == "Play <|character|> here.\n<|prompt|>"
    done = last(session.send(None, "Hi", "", GREEDY, KEY, mode="chat-instruct", character="Ann"))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.record.chat_mode["command"] == "Play <|character|> here.\n<|prompt|>"
    seen = session.inspect(done.chat_id).seen
    assert seen is not None and "Play Ann here.\nAnn is a pirate captain." in seen.text
    plain = last(session.send(None, "Hi", "", GREEDY, KEY, mode="chat", character="Ann"))
    assert "command" not in session.chats.messages(plain.chat_id)[-1].record.chat_mode  # chat-instruct's only
    assert characters.save_command("") == "" and characters.command() == DEFAULT_COMMAND  # empty: the default
