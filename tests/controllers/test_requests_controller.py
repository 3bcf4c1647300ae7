"""The Requests tab's controller (#33) on a real SQLite store: who sees the traffic, the table's filters, what a
request shows, replay's errors; and --ui-admin's checks at start."""

from __future__ import annotations

import dataclasses

import pytest

from webui.config import config_from_args
from webui.controllers.errors import UserError
from webui.controllers.requests import RequestsController
from webui.store.requests import CapturedRequest


def kept(n: int, status: int = 200, text: str = "hello", **extra) -> CapturedRequest:
    return CapturedRequest(f"chatcmpl-{n}", 1000.0 + n, "/v1/chat/completions", status, "key 1",
                           {"model": "tiny", "messages": [{"role": "user", "content": text}]},
                           {"error": {"message": "bad"}} if status >= 400 else
                           {"id": f"chatcmpl-{n}", "choices": [{"index": 0, "message": {"content": f"answer {n}"}}]},
                           model="tiny", details={"prompt": f"<user>{text}", "params": {"temperature": 0.5, "top_p": 1.0},
                                                  "sources": {"temperature": "request", "top_k": "preset Mine",
                                                              "max_new_tokens": "server default"}}, **extra)


def test_only_admins_see_the_traffic_with_a_login(services):
    services.requests.add(kept(1))
    open_ui = RequestsController(services)
    assert open_ui.allowed(None) and len(open_ui.table(None)) == 1
    services.config = dataclasses.replace(services.config, ui_users=(("alice", "x"), ("bob", "y")),
                                          ui_admins=("alice",))
    c = RequestsController(services)
    assert c.allowed("alice") and not c.allowed("bob") and not c.allowed(None)
    assert c.table("bob") == [] and "Only admin users" in c.note("bob")
    for act in (lambda: c.show("chatcmpl-1", "bob"), lambda: c.set_capture(True, "bob"),
                lambda: c.delete("chatcmpl-1", "bob")):
        with pytest.raises(UserError, match="Only admin users"):
            act()
    assert c.show("chatcmpl-1", "alice").reply == "answer 1"


def test_filters_and_what_a_request_shows(services):
    for n, status, text in ((1, 200, "the sky"), (2, 400, "oops"), (3, 200, "the sea")):
        services.requests.add(kept(n, status, text))
    c = RequestsController(services)
    assert [r[0] for r in c.table(None)] == ["chatcmpl-3", "chatcmpl-2", "chatcmpl-1"]
    assert [r[0] for r in c.table(None, text="SKY")] == ["chatcmpl-1"]
    assert [r[0] for r in c.table(None, status="refused (4xx)")] == ["chatcmpl-2"]
    assert c.table(None, model="other") == []
    services.requests.add(dataclasses.replace(kept(4), client="admin 1", endpoint="/v1/completions"))
    assert [r[0] for r in c.table(None, endpoint="completions")] == ["chatcmpl-4"]
    assert [r[0] for r in c.table(None, client="admin 1")] == ["chatcmpl-4"]
    assert [r[0] for r in c.table(None, endpoint="chat/completions", client="key 1")] == [
        "chatcmpl-3", "chatcmpl-2", "chatcmpl-1"]
    shown = c.show("chatcmpl-3", None)  # (the filters above: chatcmpl-4 is the newest now)
    assert shown.prompt == "<user>the sea" and '"temperature": 0.5' in shown.params and "top_p" not in shown.params
    assert shown.sources == ("from the request: `temperature` · from preset Mine: `top_k` · from the server default: "
                             "`max_new_tokens`")
    assert c.show("chatcmpl-2", None).reply == "error: bad"
    with pytest.raises(UserError, match="Choose a request"):
        c.show(None, None)
    with pytest.raises(UserError, match="JSON object of request fields"):
        c.replay("chatcmpl-3", "{temperature", None)
    with pytest.raises(UserError, match="JSON object"):
        c.replay("chatcmpl-3", "[1]", None)


def test_ui_admin_names_a_user_of_the_login():
    with pytest.raises(SystemExit, match="need a login"):
        config_from_args(["--ui-admin", "alice"])
    with pytest.raises(SystemExit, match="no such user"):
        config_from_args(["--ui-auth", "bob:pw", "--ui-admin", "alice"])
    assert config_from_args(["--ui-auth", "alice:pw", "--ui-admin", "alice"]).ui_admins == ("alice",)


def test_a_request_opens_as_a_chat_or_as_the_prompt_the_model_saw(services):
    item = kept(4, text="hi")
    item.request["messages"] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": None, "tool_calls": [
                                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                                {"role": "tool", "tool_call_id": "c", "content": "42"},
                                {"role": "user", "content": [{"type": "text", "text": "and?"}]}]
    services.requests.add(item)
    services.requests.add(dataclasses.replace(kept(5, status=400), details={}))  # refused before the model
    c = RequestsController(services)
    chat_id = c.as_chat("chatcmpl-4", None)
    chat = services.chats.get(chat_id)
    assert chat.system_prompt == "Be brief." and chat.title == "API request chatcmpl-4"
    assert [(m.role, m.content) for m in services.chats.messages(chat_id)] == [
        ("user", "hi"), ("assistant", "→ f({})"), ("user", "[tool result] 42"), ("user", "and?"),
        ("assistant", "answer 4")]
    assert c.as_text("chatcmpl-4", None) == "<user>hi"
    with pytest.raises(UserError, match="never reached the model"):
        c.as_text("chatcmpl-5", None)


def test_a_responses_api_request_is_listed_shown_and_opened_as_a_chat(services):
    """A kept /v1/responses request: its input (a string or items) is what it said, its output items the reply."""
    sent = {"model": "tiny", "instructions": "Be brief.",
            "input": [{"role": "user", "content": "weather?"},
                      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c", "output": "sunny"},
                      {"role": "user", "content": [{"type": "input_text", "text": "so?"}]}]}
    answer = {"id": "resp_1", "object": "response", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"type": "function_call", "name": "f", "arguments": '{"a": 1}', "call_id": "d"}]}
    services.requests.add(CapturedRequest("resp_1", 1000.0, "/v1/responses", 200, "key 1", sent, answer,
                                          model="tiny", details={"prompt": "<user>weather?"}))
    services.requests.add(CapturedRequest("resp_2", 1001.0, "/v1/responses", 200, "key 1",
                                          {"model": "tiny", "input": "just text"}, {"output": []}, model="tiny"))
    c = RequestsController(services)
    assert [(r[0], r[2], r[6]) for r in c.table(None, endpoint="responses")] == [
        ("resp_2", "responses", "just text"), ("resp_1", "responses", "so?")]
    assert c.show("resp_1", None).reply == 'Sunny.\n→ f({"a": 1})'
    chat_id = c.as_chat("resp_1", None)
    assert services.chats.get(chat_id).system_prompt == "Be brief."
    assert [(m.role, m.content) for m in services.chats.messages(chat_id)] == [
        ("user", "weather?"), ("assistant", "→ f({})"), ("user", "[tool result] sunny"), ("user", "so?"),
        ("assistant", 'Sunny.\n→ f({"a": 1})')]


def test_the_requests_listed_become_batch_prompts_as_the_model_saw_them(services):
    services.requests.add(dataclasses.replace(kept(1, text="two\nlines"), details={"prompt": "<u>two\nlines\\x"}))
    services.requests.add(dataclasses.replace(kept(2, status=400), details={}))
    services.requests.add(dataclasses.replace(kept(3), details={"prompt": ["<a>", "<b>"]}))  # several prompts
    c = RequestsController(services)
    text, note = c.as_batch(["chatcmpl-1", "chatcmpl-2", "chatcmpl-3"], None)
    from webui.batch.run.prompts import parse_lines
    assert [row.text for row in parse_lines(text)] == ["<u>two\nlines\\x", "<a>", "<b>"]  # back exactly
    assert note.startswith("3 prompt(s)") and "1 left out" in note
    with pytest.raises(UserError, match="None of the requests listed reached the model"):
        c.as_batch(["chatcmpl-2"], None)


def test_the_requests_listed_become_a_promptfoo_suite_file(services, tmp_path):
    from webui.batch.promptfoo.reader import load_config

    services.requests.add(kept(1, text="Name a colour."))
    services.requests.add(kept(2, status=400))
    c = RequestsController(services)
    path, note = c.as_promptfoo(["chatcmpl-1", "chatcmpl-2"], None)
    assert path.name == "promptfooconfig.yaml"
    assert note == ("1 request(s) as a promptfoo suite (run it with launch.py batch or promptfoo eval): chatcmpl-2: "
                    "left out (refused with status 400, so no model read it)")
    _, rows, settings = load_config(path)
    assert [r.messages for r in rows] == [({"role": "user", "content": "Name a colour."},)]
    assert settings[0].model == "tiny"
    with pytest.raises(UserError, match="No promptfoo suite: none of these requests can be a prompt"):
        c.as_promptfoo(["chatcmpl-2"], None)


def test_a_replay_says_which_fields_it_changed(services):
    """#46 item 11: the replay line names each field sent otherwise, with what the original sent."""
    services.requests.add(kept(1))
    c = RequestsController(services)
    again = c.replay("chatcmpl-1", '{"seed": 3, "max_tokens": 2, "temperature": 0}', None)
    said = c.replay_said("chatcmpl-1", again, None)
    assert said.startswith(f"Replayed as `{again.id}`: a different reply from the original; changed `max_tokens` 2 "
                           "(was not sent), `seed` 3 (was not sent), `temperature` 0 (was not sent).")
    same = c.replay(again.id, "", None)
    assert c.replay_said(again.id, same, None).startswith(f"Replayed as `{same.id}`: the same reply as the "
                                                          "original; sent as the original was.")


def test_the_keep_every_request_switch_is_read_only_for_a_non_admin(services):
    """#46 item 11: a non-admin sees the switch read-only and why (not on and clickable until refused)."""
    services.config = dataclasses.replace(services.config, ui_users=(("alice", "x"), ("bob", "y")),
                                          ui_admins=("alice",))
    c = RequestsController(services)
    assert c.capture_switch("alice")["interactive"] is True
    bob = c.capture_switch("bob")
    assert bob["interactive"] is False and bob["info"].startswith("Read-only: only admin users")
