"""Chat replies that call tools (#44): the chat's tools are offered, a call runs through the ToolBox and its result
goes back to the model, each call is stored with the reply (blocks in the log, versions, export/import, the
inspector), a call's arguments or result can be edited into a new version, Stop ends the loop, and a chat that
cannot use tools says why. The model is scripted by its prompt: it calls the calculator until the prompt holds a
result, then answers with that result (so the answer proves the result reached it)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
import torch

from tests.conftest import last
from tests.engine.scripted import ScriptedModel, loader_of
from webui.chat.tool_steps import ToolStep
from webui.controllers import UserError
from webui.controllers.chat import ChatSession
from webui.engine import SamplingParams
from webui.reproduce import parse_record

KEY = ("tab", "chat")
GREEDY = SamplingParams(temperature=0, max_new_tokens=60)
RESULT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.S)


def calls_calculator(prompt: str, expression: str = "6*7") -> str:
    """A call until the prompt holds a result; then the answer, naming the last result."""
    results = RESULT.findall(prompt)
    if results:  # the calculator's result: {"expression": ..., "result": ...}; an edited one may be any text
        try:
            return f"The answer is {json.loads(results[-1])['result']}."
        except (ValueError, TypeError, KeyError):
            return f"The answer is {results[-1]}."
    return f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


class PromptScripted(ScriptedModel):
    """A scripted model whose reply is ``answer(prompt text)``, decided when it reads the prompt."""

    def __init__(self, tokenizer, answer, step_delay: float = 0.0) -> None:
        super().__init__(tokenizer, [], name="toolscript", context_length=4096, step_delay=step_delay)
        self.answer = answer
        self.prompts: list[str] = []

    def forward(self, caches, new_ids):
        rows = []
        for cache, ids in zip(caches, new_ids):
            if len(ids) > 1 or "script" not in cache:  # (a prompt may come in parts: a cached prefix, then the rest)
                cache["prompt"] = cache.get("prompt", "") + self.tokenizer.decode(list(ids))
                cache["script"] = self.tokenizer.encode(self.answer(cache["prompt"]), add_special_tokens=False)
                cache["made"] = 0
            else:
                cache["made"] += 1
            if cache["made"] == 0:
                self.prompts.append(cache["prompt"])
            script, made = cache["script"], cache["made"]
            row = torch.zeros(self.vocab)
            row[script[made] if made < len(script) else min(self.tokenizer.eos_token_ids)] = 100.0
            rows.append(row)
        if self.step_delay:
            threading.Event().wait(self.step_delay)
        return torch.stack(rows)


def load_scripted(services, tmp_path: Path, answer=calls_calculator, step_delay: float = 0.0) -> PromptScripted:
    tokenizer = services.loaded.tokenizer
    made: list[PromptScripted] = []

    def make() -> PromptScripted:
        made.append(PromptScripted(tokenizer, answer, step_delay))
        return made[-1]

    services.registry.register(loader_of(make, "promptscripted", "a model scripted by its prompt"))
    services.models.load(services.models.catalog.entry_for_path(tmp_path), loader="promptscripted")
    return made[-1]


@pytest.fixture
def session(services, active):
    return ChatSession(services, active)


def tool_chat(session: ChatSession, tools=("calculate",)) -> int:
    return session.new_chat("tools", tools=tools)


def send(session: ChatSession, cid: int, text: str = "What is six times seven?"):
    return last(session.send(cid, text, "", GREEDY, KEY))


def test_a_call_runs_its_result_reaches_the_model_and_the_call_is_stored_with_the_reply(services, session, tmp_path):
    model = load_scripted(services, tmp_path)
    cid = tool_chat(session)
    view = send(session, cid)
    reply = services.chats.messages(cid)[-1]
    assert reply.content == "The answer is 42."
    [step] = reply.record.tool_steps
    [call] = step.calls
    assert (call.name, json.loads(call.arguments), json.loads(call.result)["result"], call.error) == (
        "calculate", {"expression": "6*7"}, 42, None)
    assert '"name": "calculate"' in model.prompts[0]  # the tool was offered ...
    assert f"<tool_response>\n{call.result}\n</tool_response>" in model.prompts[1]  # ... and its result read back
    assert [t["function"]["name"] for t in reply.record.tools_offered] == ["calculate"]
    # the log: your message, the call's arguments and result as blocks, then the answer
    assert [(m.get("metadata") or {}).get("title", m["content"]) for m in view.messages] == [
        "What is six times seven?", "Tool call: calculate · arguments · written freely", f"calculate · result · {call.seconds:.2f}s",
        "The answer is 42."]
    assert view.messages[1]["content"] == call.arguments and view.messages[2]["content"] == call.result
    assert "1 tool call" in view.stats
    rows, branchable = session.last_tokens(cid, 1, 0)  # a call's block clicked: the tokens that wrote the call
    assert "".join(r["text"] for r in rows).startswith('<tool_call>{"name": "calculate"') and not branchable
    assert step.constrained == "" and view.messages[1]["metadata"]["title"].endswith("written freely")
    # the inspector shows the answer's turn as it was read: the tools, the call, its result
    seen = session.inspect(cid).seen
    assert seen is not None and f"<tool_response>\n{call.result}\n</tool_response>" in seen.text \
        and '"calculate"' in seen.text
    # its reproduce record runs the same prompt (the tools, the call, its result), here and over the API
    record = parse_record(session.inspect(cid).record.to_json())
    assert record.request(services.loaded.tokenizer).prompt == seen.text
    route, body = record.api_body()
    assert [t["function"]["name"] for t in body["tools"]] == ["calculate"]
    assert [m["role"] for m in body["messages"]][-3:] == ["user", "assistant", "tool"]
    # a later reply reads the earlier calls too (here it answers from them, calling nothing)
    send(session, cid, "And again?")
    assert f"<tool_response>\n{call.result}\n</tool_response>" in model.prompts[-1]
    assert services.chats.messages(cid)[-1].record.tool_steps == ()


def test_edit_a_calls_arguments_or_its_result_into_a_new_version(services, session, tmp_path):
    load_scripted(services, tmp_path)
    cid = tool_chat(session)
    send(session, cid)
    shown = [m.get("metadata", {}).get("title", "") for m in session.library.view(cid).messages]
    arguments = shown.index("Tool call: calculate · arguments · written freely")
    last(session.edit_shown(cid, arguments, '{"expression": "6*9"}', GREEDY, KEY))
    reply = services.chats.messages(cid)[-1]
    assert reply.content == "The answer is 54." and '"result": 54' in reply.record.tool_steps[0].calls[0].result
    assert session.library.version_of(cid, 1) == (2, 2)  # the first version stays, a click away
    last(session.edit_shown(cid, arguments + 1, "100", GREEDY, KEY))  # the result, as if the tool gave it
    reply = services.chats.messages(cid)[-1]
    assert reply.content == "The answer is 100." and reply.record.tool_steps[0].calls[0].result == "100"
    with pytest.raises(UserError, match="must be JSON"):
        last(session.edit_shown(cid, arguments, "6*9", GREEDY, KEY))
    assert services.chats.messages(cid)[-1].content == "The answer is 100."  # nothing lost


def test_the_step_limit_makes_the_model_answer_without_tools(services, session, tmp_path):
    model = load_scripted(services, tmp_path, answer=lambda prompt: calls_calculator("", "1+1"))  # always calls
    services.settings.update(max_tool_steps=2)
    cid = tool_chat(session)
    send(session, cid)
    reply = services.chats.messages(cid)[-1]
    assert len(reply.record.tool_steps) == 2 and reply.record.tools_offered == ()
    assert "You can call functions" in model.prompts[0] and "You can call functions" not in model.prompts[-1]


def test_stop_while_a_tool_runs_ends_the_loop_and_keeps_the_call(services, session, tmp_path):
    load_scripted(services, tmp_path)
    cid = tool_chat(session)
    views = session.send(cid, "What is six times seven?", "", GREEDY, KEY)
    for view in views:
        if view.stats.startswith("calling"):
            assert session.stop(KEY, cid)
    reply = services.chats.messages(cid)[-1]
    assert len(reply.record.tool_steps) == 1 and reply.content == ""
    assert not session.tool_replies.busy(("tab", f"chat:{cid}"))


def test_export_import_and_branch_keep_the_calls_and_the_chats_tools(services, session, tmp_path):
    load_scripted(services, tmp_path)
    cid = tool_chat(session)
    send(session, cid)
    path = session.library.export(cid)
    data = json.loads(path.read_text())
    assert data["tools"] == ["calculate"]
    imported = session.library.import_file(path)
    assert services.chats.get(imported.chat_id).tools == ("calculate",)
    assert imported.messages == session.library.view(cid).messages
    copied = session.library.branch_chat(cid, 1)
    assert services.chats.get(copied.chat_id).tools == ("calculate",)
    assert services.chats.messages(copied.chat_id)[-1].record.tool_steps == \
        services.chats.messages(cid)[-1].record.tool_steps


def test_a_hand_edited_reply_keeps_its_calls_and_a_tool_gone_is_named(services, session, tmp_path):
    load_scripted(services, tmp_path)
    cid = tool_chat(session)
    send(session, cid)
    shown = len(session.library.view(cid).messages) - 1
    last(session.edit_shown(cid, shown, "Forty-two.", GREEDY, KEY))
    reply = services.chats.messages(cid)[-1]
    assert reply.content == "Forty-two." and reply.record.edited and len(reply.record.tool_steps) == 1
    session.set_tools(cid, ["calculate", "no_such_tool"])
    with pytest.raises(UserError, match="no_such_tool is not installed"):
        last(session.regenerate(cid, GREEDY, KEY))
    assert services.chats.messages(cid)[-1].content == "Forty-two."


def test_tools_need_the_instruct_mode_and_a_new_chat_takes_the_tools_picked(services, session, tmp_path):
    load_scripted(services, tmp_path)
    session.set_tools(None, ["calculate"])
    assert session.chat_tools(None) == ["calculate"]
    view = last(session.send(None, "What is six times seven?", "", GREEDY, KEY, tools=session.chat_tools(None)))
    assert services.chats.get(view.chat_id).tools == ("calculate",)
    assert services.chats.messages(view.chat_id)[-1].content == "The answer is 42."
    services.chats.set_mode(view.chat_id, "chat", None)
    with pytest.raises(UserError, match="instruct mode"):
        last(session.regenerate(view.chat_id, GREEDY, KEY))
    with pytest.raises(UserError, match="no_such_tool is not installed"):
        last(session.send(None, "Hi", "", GREEDY, KEY, tools=["no_such_tool"]))


def test_steps_survive_their_json(services):
    step = ToolStep("thinking", [])
    assert ToolStep.from_dict(step.to_dict()) == step


def test_a_first_turn_that_must_call_is_held_to_the_schemas_and_says_so(services, session, tmp_path):
    compact = '<tool_call>{"name":"calculate","arguments":{"expression":"6*7"}}</tool_call>'
    load_scripted(services, tmp_path, answer=lambda p: "The answer is 42." if RESULT.search(p) else compact)
    services.settings.update(tool_choice="required")
    cid = tool_chat(session)
    view = send(session, cid)
    [step] = services.chats.messages(cid)[-1].record.tool_steps
    assert step.constrained.startswith("a grammar") and json.loads(step.calls[0].arguments) == {"expression": "6*7"}
    assert view.messages[1]["metadata"]["title"] == \
        "Tool call: calculate · arguments · held to its schema by a grammar"
    assert services.chats.messages(cid)[-1].content == "The answer is 42."
