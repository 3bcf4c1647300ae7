"""ChatSession without a browser: what the Chat tab's buttons do, on a real SQLite file and the tiny model."""

from __future__ import annotations

import pytest

from tests.conftest import last
from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.engine import SamplingParams

GREEDY = SamplingParams(temperature=0, max_new_tokens=4, ban_eos=True)
KEY = ("tab-1", "chat")


@pytest.fixture
def session(services, active):
    return ChatSession(services, active)



def roles(session, chat_id):
    return [m.role for m in session.chats.messages(chat_id)]


def test_send_stores_the_message_and_the_streamed_reply(session):
    views = list(session.send(None, "Hello there", "Be brief.", GREEDY, KEY))
    assert views[0].stats == "…" and views[0].messages == [{"role": "user", "content": "Hello there"}]
    done = views[-1]
    assert "finish: length" in done.stats and done.title == "Hello there" and done.system_prompt == "Be brief."
    assert roles(session, done.chat_id) == ["user", "assistant"]
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.stats["completion_tokens"] == 4 and len(reply.stats["token_ids"]) == 4
    library = session.library
    assert library.listed() == [("Hello there", done.chat_id)] and library.listed("nothing like it") == []
    assert session.library.view(done.chat_id) == done  # the stored chat is what was shown


def test_a_cfg_reply_shows_what_the_negative_prompt_cost(session):
    done = list(session.send(None, "Hello there", "", GREEDY.replace(guidance_scale=1.5, negative_prompt="Go away"),
                             KEY))[-1]
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.stats["guidance_tokens"] > 3 and f"CFG ran {reply.stats['guidance_tokens']} more tokens" in done.stats


def test_mistakes_are_user_errors_and_store_nothing(session, services):
    with pytest.raises(UserError, match="Type a message"):
        list(session.send(None, "  ", "", GREEDY, KEY))
    services.models.unload()
    with pytest.raises(UserError, match="No model is loaded; load one in the Model tab"):
        list(session.send(None, "Hi", "", GREEDY, KEY))
    assert session.library.listed() == []
    for action in (lambda: list(session.regenerate(None, GREEDY, KEY)), lambda: session.library.remove_last(None),
                   lambda: session.library.delete(None), lambda: session.library.export(None)):
        with pytest.raises(UserError, match="Start a chat first"):
            action()


def test_send_while_a_reply_is_being_written_says_so(session):
    long = GREEDY.replace(max_new_tokens=200)
    first = session.send(None, "Tell me a story", "", long, KEY)
    chat_id = next(first).chat_id
    next(first)  # the reply is streaming
    with pytest.raises(UserError, match="still being written"):
        next(session.send(chat_id, "And another", "", GREEDY, KEY))
    other_tab = list(session.send(None, "Elsewhere", "", GREEDY, ("tab-2", "chat")))
    assert "finish" in other_tab[-1].stats  # another browser tab is not blocked
    other_chat = list(session.send(None, "Meanwhile", "", GREEDY, KEY))
    assert "finish: length" in other_chat[-1].stats  # nor another chat in this tab
    assert not session.stop(KEY, other_chat[-1].chat_id)  # Stop there stops nothing of this chat's reply
    assert session.stop(KEY, chat_id)
    assert "finish: cancelled" in last(first).stats
    assert roles(session, chat_id) == ["user", "assistant"]


def test_regenerate_adds_a_version_and_the_arrows_move_between_them(session):
    done = last(session.send(None, "Name a color", "", GREEDY, KEY))
    before = session.chats.messages(done.chat_id)[-1]
    again = last(session.regenerate(done.chat_id, GREEDY.replace(temperature=1.0, seed=5), KEY))
    after = session.chats.messages(done.chat_id)
    assert [m.role for m in after] == ["user", "assistant"] and after[-1].id != before.id
    assert session.library.version_of(done.chat_id, 1) == (2, 2)
    assert session.library.describe(done.chat_id, 1) == f"Message 2: version 2 of 2 · {again.stats}"
    back = session.library.switch_version(done.chat_id, 1, -1)
    assert session.chats.messages(done.chat_id)[-1].id == before.id and back.messages[-1]["content"] == before.content
    assert session.library.describe(done.chat_id, 1) == f"Message 2: version 1 of 2 · {before.stats['summary']}"
    assert session.library.describe(done.chat_id, 0) == \
        "Message 1: version 1 of 1 (edit or regenerate it to add another)"
    with pytest.raises(UserError, match="first version"):
        session.library.switch_version(done.chat_id, 1, -1)
    session.library.switch_version(done.chat_id, 1, +1)
    assert session.chats.messages(done.chat_id)[-1].id == after[-1].id


def test_continue_extends_the_last_reply(session):
    done = last(session.send(None, "Count", "", GREEDY, KEY))
    before = session.chats.messages(done.chat_id)[-1]
    last(session.continue_reply(done.chat_id, GREEDY, KEY))
    after = session.chats.messages(done.chat_id)[-1]
    assert after.id == before.id and after.content.startswith(before.content)
    assert len(after.stats["token_ids"]) == 8 and after.stats["token_ids"][:4] == before.stats["token_ids"]


def test_an_edit_is_a_new_branch_and_the_models_message_can_be_edited_too(session):
    done = last(session.send(None, "First question", "", GREEDY, KEY))
    last(session.send(done.chat_id, "Second question", "", GREEDY, KEY))
    kept = last(session.edit(done.chat_id, 1, "A reply I wrote", GREEDY, KEY))
    assert [m["content"].split("\n\n")[0] for m in kept.messages] == ["First question", "A reply I wrote"]
    assert session.chats.messages(done.chat_id)[-1].stats["edited"]
    assert session.library.version_of(done.chat_id, 1) == (2, 2)
    edited = last(session.edit(done.chat_id, 0, "Edited question", GREEDY, KEY))
    history = session.chats.messages(done.chat_id)
    assert [(m.role, m.content) for m in history][0] == ("user", "Edited question")
    assert roles(session, done.chat_id) == ["user", "assistant"] and "finish" in edited.stats
    old = session.library.switch_version(done.chat_id, 0, -1)  # the first branch, its own continuation all there
    assert len(old.messages) == 2 and session.chats.messages(done.chat_id)[1].content == "A reply I wrote"
    session.library.switch_version(done.chat_id, 1, -1)
    assert [m.content for m in session.chats.messages(done.chat_id)][2] == "Second question"
    with pytest.raises(UserError, match="cannot be edited"):
        list(session.edit(done.chat_id, 9, "nowhere", GREEDY, KEY))


def test_branch_to_a_new_chat_from_any_message(session):
    done = last(session.send(None, "One", "", GREEDY, KEY))
    last(session.send(done.chat_id, "Two", "", GREEDY, KEY))
    branched = session.library.branch_chat(done.chat_id, 1)
    assert branched.chat_id != done.chat_id and branched.title == "One (branch)" and len(branched.messages) == 2
    assert len(session.chats.messages(done.chat_id)) == 4


def test_remove_last_drops_your_last_message_and_its_reply(session):
    done = last(session.send(None, "One", "", GREEDY, KEY))
    last(session.send(done.chat_id, "Two", "", GREEDY, KEY))
    view, removed = session.library.remove_last(done.chat_id)
    assert [m["content"] for m in view.messages][0] == "One" and len(view.messages) == 2
    assert removed == "Two"  # back in the message box, to edit and send again


def test_remove_last_again_keeps_what_the_box_holds(session):
    """#46 (12): a second Remove last, with the first removed message (or a draft) in the box, puts the message
    it removes before it: nothing removed or typed is lost."""
    done = last(session.send(None, "One", "", GREEDY, KEY))
    last(session.send(done.chat_id, "Two", "", GREEDY, KEY))
    _, box = session.library.remove_last(done.chat_id)
    view, box = session.library.remove_last(done.chat_id, box)
    assert view.messages == [] and box == "One\n\nTwo"
    _, box = session.library.remove_last(done.chat_id, "a draft")  # nothing left to remove: the draft stays
    assert box == "a draft"


def test_branch_continues_from_the_chosen_alternative(session):
    done = last(session.send(None, "Hello", "", GREEDY, KEY))
    rows, branchable = session.last_tokens(done.chat_id)
    assert branchable and len(rows) == 4
    alternative = next(a[0] for a in rows[1]["alts"] if a[0] != rows[1]["id"])
    last(session.branch(done.chat_id, 1, alternative, GREEDY, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.stats["token_ids"][:2] == [rows[0]["id"], alternative]
    with pytest.raises(UserError, match="outside the reply"):
        list(session.branch(done.chat_id, 99, alternative, GREEDY, KEY))


def test_chat_list_rename_delete_and_a_new_chat_shows_nothing_of_the_old(session, services):
    services.settings.update(system_prompt="Saved prompt")
    done = last(session.send(None, "Keep me", "Chat prompt", GREEDY, KEY))
    assert session.library.rename(done.chat_id, "Renamed").title == "Renamed"
    with pytest.raises(UserError, match="title"):
        session.library.rename(done.chat_id, "  ")
    new = session.library.view(None)
    assert (new.chat_id, new.title, new.messages, new.stats, new.system_prompt) == (None, "", [], "", "Saved prompt")
    gone = session.library.delete(done.chat_id)
    assert gone.chat_id is None and gone.title == "" and session.library.listed() == []
    with pytest.raises(UserError, match="deleted"):
        session.library.view(done.chat_id)


def test_a_reloaded_page_opens_the_latest_chat_with_its_system_prompt(session):
    assert session.library.latest().chat_id is None
    older = last(session.send(None, "Older", "Prompt A", GREEDY, KEY))
    newer = last(session.send(None, "Newer", "Prompt B", GREEDY, KEY))
    latest = session.library.latest()
    assert latest.chat_id == newer.chat_id and latest.system_prompt == "Prompt B" and "finish" in latest.stats
    session.library.save_system(older.chat_id, "Prompt C")  # touches the older chat: now it is the latest
    assert session.library.latest().system_prompt == "Prompt C"
    assert session.library.view(None).system_prompt == ""  # a chat's own prompt is not new chats' (#30)
    session.library.save_system(None, "Prompt D")  # typed in a new chat: that is
    assert session.library.view(None).system_prompt == "Prompt D"
    assert session.library.view(older.chat_id).system_prompt == "Prompt C"


def test_export_then_import_and_a_bad_file_changes_nothing(session, tmp_path):
    done = last(session.send(None, "Export me", "", GREEDY, KEY))
    path = session.library.export(done.chat_id)
    copy = session.library.import_file(path)
    assert copy.chat_id != done.chat_id and copy.messages == done.messages
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "llm-workbench.chat", "version": 1, "title": "x", "messages": [{"role": "bot"}]}')
    with pytest.raises(UserError, match="Could not import the chat"):
        session.library.import_file(bad)
    assert len(session.library.listed()) == 2


def test_inspect_shows_what_the_model_read_and_the_record(session, services):
    done = last(session.send(None, "What is 2+2?", "Be exact.", GREEDY, KEY))
    seen = session.inspect(done.chat_id)
    assert seen.which == "message 2 (the reply)" and "What is 2+2?" in seen.seen.text
    assert seen.record.params.temperature == 0 and seen.record.messages[-1]["content"] == "What is 2+2?"
    mine = session.inspect(done.chat_id, 0)
    assert mine.record is None and mine.seen.text == seen.seen.text
    services.models.unload()
    assert "need a local model" in session.inspect(done.chat_id).note
    assert session.last_tokens(done.chat_id)[1] is False


def test_a_model_without_a_template_chats_through_a_guessed_one_and_the_record_keeps_it(
        session, services, untemplated_model_dir):
    from webui.reproduce import parse_record

    (services.config.models_dir / "bare").symlink_to(untemplated_model_dir, target_is_directory=True)
    services.models.load("bare")
    assert session.template().note.startswith("this model has no chat template; using the built-in 'ChatML'")
    done = last(session.send(None, "Hello there", "", GREEDY, KEY))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.stats["chat_template"]["name"] == "ChatML"
    record = parse_record(session.inspect(done.chat_id).record.to_json())
    assert record.chat_template["name"] == "ChatML" and "chat_template" in record.api_body()[1]
    again = services.engine.generate(record.request(services.loaded.tokenizer))
    assert again.token_ids == reply.stats["token_ids"]  # the record re-creates the reply


def test_a_chosen_template_renders_the_chat_and_its_stop_strings_end_the_reply(session, services):
    services.settings.update(chat_template="User/Assistant")
    done = last(session.send(None, "Hi", "Be brief.", GREEDY, KEY))
    seen = session.inspect(done.chat_id)
    assert seen.seen.text == "Be brief.\n\nUser: Hi\nAssistant:"
    reply = session.chats.messages(done.chat_id)[-1]
    assert "\nUser:" in reply.stats["params"]["stop"] and reply.stats["chat_template"]["name"] == "User/Assistant"
    services.settings.update(chat_template="Deleted one")
    with pytest.raises(UserError, match="Instruction template: there is no template 'Deleted one'"):
        last(session.send(done.chat_id, "Again", "", GREEDY, KEY))
    assert roles(session, done.chat_id) == ["user", "assistant"]  # nothing stored


def test_a_chat_longer_than_the_context_leaves_out_its_oldest_turns_and_says_so(session, services):
    params = GREEDY.replace(max_new_tokens=40)  # the tiny model's context is 256 tokens
    chat_id = None
    for n in range(8):
        chat_id = last(session.send(chat_id, f"Message number {n}: " + "word " * 12, "Stay brief.", params,
                                    KEY)).chat_id
    reply = session.chats.messages(chat_id)[-1]
    dropped = reply.stats["dropped"]
    assert dropped >= 2 and dropped % 2 == 0  # whole turns: the chat sent still starts with a user message
    assert f"{dropped} oldest messages were not sent" in session.library.view(chat_id).stats
    seen = session.inspect(chat_id)
    assert "Stay brief." in seen.seen.text and "Message number 7" in seen.seen.text
    assert "Message number 0" not in seen.seen.text and f"{dropped} oldest messages were not sent" in seen.note
    assert len(seen.seen.ids) <= 256 - 40
    assert seen.record.messages[0]["content"] == "Stay brief." and seen.record.messages[1]["role"] == "user"
    again = services.engine.generate(seen.record.request(services.loaded.tokenizer))
    assert again.token_ids == reply.stats["token_ids"]  # the record holds what was sent, and re-creates the reply
    services.settings.update(context_policy="refuse")
    with pytest.raises(UserError, match="the context leaves 216 for it .*start a new chat"):
        last(session.regenerate(chat_id, params, KEY))
    assert session.chats.messages(chat_id)[-1] == reply  # refused before the reply was taken away
    services.settings.update(context_policy="drop oldest messages")
    with pytest.raises(UserError, match="the last message .* shorten it"):
        last(session.send(chat_id, "word " * 300, "", params, KEY))
    assert len(session.chats.messages(chat_id)) == 16  # nothing stored


def test_the_log_holds_each_messages_text_only_so_copy_and_edit_take_nothing_else(session):
    """#30 (4): the version and stats lines live beside the log (``describe``), not in a message's content."""
    done = last(session.send(None, "Hi", "", GREEDY, KEY))
    last(session.regenerate(done.chat_id, GREEDY, KEY))
    stored = session.chats.messages(done.chat_id)
    assert session.library.view(done.chat_id).messages == [{"role": m.role, "content": m.content} for m in stored]
    assert "<span" not in str(session.library.view(done.chat_id).messages)


def test_records_of_continued_and_branched_replies_re_create_them_exactly(session, services):
    from webui.controllers.insight import InsightController

    sampled = GREEDY.replace(temperature=1.0, top_k=40, seed=11)
    done = last(session.send(None, "Tell me about cats", "", sampled, KEY))
    last(session.continue_reply(done.chat_id, sampled.replace(seed=12), KEY))
    continued = session.chats.messages(done.chat_id)[-1]
    assert len(continued.stats["token_ids"]) == 8 and "8 tokens, 4 new" in continued.stats["summary"]
    rows, _ = session.last_tokens(done.chat_id)
    alternative = next(a[0] for a in rows[1]["alts"] if a[0] != rows[1]["id"])
    last(session.branch(done.chat_id, 1, alternative, sampled.replace(seed=13), KEY))
    branched = session.chats.messages(done.chat_id)[-1]
    assert branched.stats["token_ids"][:2] == [continued.stats["token_ids"][0], alternative]
    assert len(branched.stats["token_ids"]) == 4
    tokenizer = services.loaded.tokenizer
    for reply in (continued, branched):
        session.chats.show(reply.id)
        record = session.inspect(done.chat_id).record
        result = services.engine.generate(record.request(tokenizer))
        assert [*record.continue_from.token_ids, *result.token_ids] == reply.stats["token_ids"]
        output, _ = InsightController(services).rerun(record.to_json())
        assert output == reply.content  # what the Insight tab's "Re-run a record" shows


def test_start_reply_with_is_continued_by_the_model_and_kept_in_the_record(session, services):
    done = last(session.send(None, "What is 2+2?", "", GREEDY, KEY, start="The answer is"))
    reply = session.chats.messages(done.chat_id)[-1]
    assert reply.content.startswith("The answer is") and len(reply.stats["token_ids"]) == 4
    assert reply.stats["continue_from"] == {"text": "The answer is"}
    record = session.inspect(done.chat_id).record
    assert record.api_body()[1]["continue_final_message"] is True
    result = services.engine.generate(record.request(services.loaded.tokenizer))
    assert record.reply(services.loaded.tokenizer, list(result.token_ids), result.text) == reply.content
    again = last(session.regenerate(done.chat_id, GREEDY, KEY, start="Four"))
    assert again.messages[-1]["content"].startswith("Four")


def test_impersonate_writes_the_users_next_message_without_storing_it(session, services):
    done = last(session.send(None, "Hi", "Be brief.", GREEDY, KEY))
    draft = last(session.impersonate(done.chat_id, "", GREEDY, KEY))
    assert isinstance(draft, str) and len(session.chats.messages(done.chat_id)) == 2
    template = session.template()
    prompt = template.user_turn_prompt(services.loaded.tokenizer,
                                       [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                        {"role": "assistant", "content": session.chats.messages(done.chat_id)[1].content}])
    assert prompt.endswith("<|im_end|>\n<|im_start|>user\n")
    services.settings.update(chat_template="User/Assistant")
    plain = session.template().user_turn_prompt(services.loaded.tokenizer, [{"role": "user", "content": "Hi"}])
    assert plain == "User: Hi\nUser: " and session.template().user_stops == ("\nAssistant:",)


def test_the_token_view_shows_any_stored_reply_and_only_the_last_can_be_branched(session):
    done = last(session.send(None, "One", "", GREEDY, KEY))
    last(session.send(done.chat_id, "Two", "", GREEDY, KEY))
    history = session.chats.messages(done.chat_id)
    first, branchable = session.last_tokens(done.chat_id, 1)
    assert [r["id"] for r in first] == history[1].stats["token_ids"] and not branchable
    latest, branchable = session.last_tokens(done.chat_id, 0)  # a user message: the last reply
    assert [r["id"] for r in latest] == history[3].stats["token_ids"] and branchable


def test_a_chats_parameters_can_be_taken_back(session, services):
    from webui.controllers.parameters import ParametersController

    services.settings.update(chat_template="User/Assistant")
    done = last(session.send(None, "Hi", "", GREEDY.replace(top_k=7, stop=("END",)), KEY))
    params = session.library.chat_params(done.chat_id)
    assert params.top_k == 7 and params.stop == ("END",)  # not the template's own "\nUser:"
    ParametersController(services).use(params)
    assert services.settings.get().params["top_k"] == 7 and services.settings.get().last_preset is None
    with pytest.raises(UserError, match="no reply made here yet"):
        session.library.chat_params(session.chats.create().id)


def test_a_chat_sent_to_the_notebook_ends_with_its_last_reply_so_generate_continues_it(session):
    done = list(session.send(None, "Hello there", "", GREEDY, KEY))[-1]
    reply = session.chats.messages(done.chat_id)[-1].content
    text = session.as_text(done.chat_id)
    assert text.endswith(reply) and text.count("<|im_start|>assistant") == 1  # no second, empty reply opened


def test_a_reply_cut_off_by_closing_the_tab_is_stored_as_stop_stores_it(session):
    """#30 (6): Gradio closes the handler's generator when the tab goes away; the request ends (cancelled) and the
    reply is stored with its stats, marked as Stop marks it."""
    views = session.send(None, "Tell me a long story", "", GREEDY.replace(max_new_tokens=200), KEY)
    for view in views:
        if view.messages and view.messages[-1]["role"] == "assistant" and len(view.messages[-1]["content"]) > 5:
            break
    views.close()
    reply = session.chats.messages(view.chat_id)[-1]
    assert reply.role == "assistant" and reply.stats and reply.stats["finish_reason"] == "cancelled"
    assert "finish: cancelled" in reply.stats["summary"] and reply.stats["completion_tokens"] < 200
    assert len(reply.stats["token_ids"]) == reply.stats["completion_tokens"]
    assert session.active.cancel(KEY) is False  # nothing of it is still running


def test_oldest_turns_left_out_by_truncation_length_say_so(session):
    """#30 (7): the note names the limit that left them out: truncation_length, not a full context."""
    params = GREEDY.replace(max_new_tokens=8, truncation_length=80)
    chat_id = None
    for n in range(4):
        chat_id = last(session.send(chat_id, f"Message number {n}: " + "word " * 12, "", params, KEY)).chat_id
    reply = session.chats.messages(chat_id)[-1]
    assert reply.stats["dropped"] >= 2 and reply.stats["dropped_over"] == 80
    assert "not sent (over truncation_length 80)" in session.library.view(chat_id).stats
    assert "the context is full" not in session.library.view(chat_id).stats
    assert "over truncation_length 80" in session.inspect(chat_id).note


def test_a_reply_names_its_model_and_is_inspected_as_that_model_read_it(session, services, other_tiny_model_dir):
    """#30 (10): the stats name the model that wrote the reply; the inspector counts with that model while it is
    loaded, and says so when it is not (not silently with the model in use now)."""
    (services.config.models_dir / "tiny-b").symlink_to(other_tiny_model_dir, target_is_directory=True)
    services.models.load("tiny-b")
    done = last(session.send(None, "Hi", "", GREEDY, KEY))
    assert done.stats.endswith(" · by tiny-b (transformers)")
    services.models.use("tiny", services.owner)
    seen = session.inspect(done.chat_id)
    assert seen.seen is not None and "not loaded" not in seen.note
    services.models.unload("tiny-b")
    assert session.inspect(done.chat_id).note == ("written by tiny-b (transformers), not loaded now: tokens and the "
                                                  "share of the context are tiny (transformers)'s")


def test_a_reply_records_the_adapters_it_ran_with_though_they_change_meanwhile(session, services, tiny_lora_dir):
    """#31 (1): the record held the adapters attached when the reply ended, not those it ran with (an adapter
    attached during a reply made a record that does not re-create it)."""
    (services.config.loras_dir / "secret").symlink_to(tiny_lora_dir, target_is_directory=True)
    views = session.send(None, "The secret word is", "", GREEDY.replace(max_new_tokens=24), KEY)
    chat_id = next(views).chat_id
    next(views)  # the reply is being written, with no adapter
    services.models.attach_lora("secret")
    done = last(views)
    reply = session.chats.messages(chat_id)[-1]
    assert "finish: length" in done.stats and reply.stats["loras"] == []
    record = session.inspect(chat_id).record
    result = services.engine.generate(record.request(services.loaded.tokenizer))
    assert list(result.token_ids) == reply.stats["token_ids"]


def test_a_reply_runs_and_is_recorded_on_one_model_though_the_model_in_use_changes_meanwhile(
        session, services, other_tiny_model_dir):
    """#31 (1): the model in use is resolved once per reply (its slot: model, engine, adapters), so switching the
    model in use mid-reply changes neither what the reply runs on nor its record, which re-creates it."""
    (services.config.models_dir / "tiny-b").symlink_to(other_tiny_model_dir, target_is_directory=True)
    services.models.load("tiny-b", make_current=False)
    views = session.send(None, "Once upon a time", "", GREEDY.replace(max_new_tokens=24), KEY)
    chat_id = next(views).chat_id
    next(views)  # the reply is being written by tiny
    services.models.use("tiny-b", services.owner)
    done = last(views)
    reply = session.chats.messages(chat_id)[-1]
    assert "finish: length" in done.stats and reply.stats["model"] == "tiny"
    record = session.inspect(chat_id).record
    assert record is not None and record.model == "tiny"
    tiny = services.models.slot("tiny")
    result = tiny.engine.generate(record.request(tiny.model.tokenizer))
    assert list(result.token_ids) == reply.stats["token_ids"]
