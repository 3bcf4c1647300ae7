"""Chat tab: streaming replies with the model's chat template, stored as they happen.

Every message goes to SQLite before it is shown (the assistant's reply is
appended with its first text and updated as it streams), so a restart or a
kill -9 loses nothing already on screen.
"""

from __future__ import annotations

import html
import tempfile
from pathlib import Path
from typing import Any, Iterator

import gradio as gr

from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.engine import GenerationEvent, SamplingParams
from webui.reproduce import record_for_reply
from webui.services import Services
from webui.store import StoreError
from webui.token_view import VIEW_TOP, BranchError, branch_request, branched_row, token_rows
from webui.insight import InsightUnavailable, inspect_rendered
from webui.ui.generation import ActiveRequests, session_key, stats_text, stream_request, stream_text
from webui.ui.parameters_tab import ParametersTab
from webui.ui.inspection import create_inspector_panel, inspection_views, record_views
from webui.ui.token_view import branch_of, create_token_view, view_value

PANEL = "chat"
TITLE_LENGTH = 48


def reply_stats(event: GenerationEvent, params: SamplingParams, model=None, loras=()) -> dict[str, Any]:
    u, t = event.usage, event.timings
    return {"model": getattr(model, "name", None), "loader": getattr(model, "loader", None),
            "loras": [list(x) for x in loras],
            "completion_tokens": u.completion_tokens, "prompt_tokens": u.prompt_tokens,
            "cached_tokens": u.cached_tokens,
            "time_to_first_token": t.first_token, "tokens_per_second": t.tokens_per_second,
            "finish_reason": event.finish_reason, "stop_string": event.stop_string, "seed": event.seed,
            "params": params.to_dict(), "summary": stats_text(event)}


def to_chatbot(messages) -> list[dict[str, str]]:
    out = []
    for m in messages:
        content = m.content
        if m.role == "assistant" and m.stats and m.stats.get("summary"):
            content += f"\n\n<span class='reply-stats'>{html.escape(m.stats['summary'])}</span>"
        out.append({"role": m.role, "content": content})
    return out


def plain_text(content: Any) -> str:
    """Chatbot values may come back as a list of blocks in Gradio 6."""
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "")


def create_chat_tab(services: Services, params: ParametersTab, active: ActiveRequests) -> dict:
    chats, settings = services.chats, services.settings.get()
    chat_id = gr.State(None)
    confirm = gr.State(False)
    with gr.Row():
        with gr.Column(scale=1, min_width=240):
            new_btn = gr.Button("New chat", variant="primary", elem_id="chat-new")
            search = gr.Textbox(label="Search chats", placeholder="title or content", elem_id="chat-search")
            chat_list = gr.Radio(choices=[], label="Past chats", elem_id="chat-list")
            title = gr.Textbox(label="Title", elem_id="chat-title")
            with gr.Row():
                rename_btn = gr.Button("Rename", size="sm", elem_id="chat-rename")
                delete_btn = gr.Button("Delete", size="sm", variant="stop", elem_id="chat-delete")
            with gr.Row():
                export_btn = gr.Button("Export JSON", size="sm", elem_id="chat-export")
                import_btn = gr.UploadButton("Import JSON", file_types=[".json"], size="sm", elem_id="chat-import")
            export_file = gr.File(label="Exported chat", visible=False, elem_id="chat-export-file")
        with gr.Column(scale=4):
            system = gr.Textbox(value=settings.system_prompt, label="System prompt", lines=2, elem_id="chat-system",
                                placeholder="(empty: the model's own default)")
            chatbot = gr.Chatbot(elem_id="chat-log", height=460, editable="user", buttons=["copy"],
                                 sanitize_html=True)
            # lines=1 (growing to max_lines): Gradio sends on Enter and keeps Shift+Enter for a new line
            message = gr.Textbox(label="Message", placeholder="Type a message; Enter sends, Shift+Enter adds a line",
                                 lines=1, max_lines=10, elem_id="chat-message")
            with gr.Row():
                send_btn = gr.Button("Send", variant="primary", elem_id="chat-send")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="chat-stop")
                regen_btn = gr.Button("Regenerate", elem_id="chat-regenerate")
                continue_btn = gr.Button("Continue", elem_id="chat-continue")
                remove_btn = gr.Button("Remove last", elem_id="chat-remove-last")
            stats = gr.Markdown("", elem_id="chat-stats")
            with gr.Accordion("Tokens of the last reply", open=False, elem_id="chat-tokens-panel"):
                token_view = create_token_view("chat-tokens")
            with gr.Accordion("Prompt and reproduce record (click a message; default: the last reply)",
                              open=False, elem_id="chat-inspect-panel"):
                inspector = create_inspector_panel("chat", with_record=True)

    def message_views(cid: int | None, index: int | None = None):
        """What the model read for a message (a reply: the chat before it; your message: the chat up to it),
        its tokens and share of the context, and a reply's record; ``index`` None: the last reply."""
        history = chats.messages(cid) if cid is not None else []
        if index is None:
            index = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "assistant"), None)
        if index is None or not 0 <= index < len(history):
            return "", "", None, "", "", ""
        message, system_prompt = history[index], chats.get(cid).system_prompt
        reply = message.role == "assistant"
        turns = [{"role": m.role, "content": m.content} for m in history[:index + (0 if reply else 1)]]
        stats = message.stats or {}
        record = record_for_reply(turns, system_prompt, stats) if reply and "params" in stats else None
        which = f"message {index + 1} ({'the reply' if reply else 'your message'})"
        try:
            prompt = render_chat_prompt(services.models.loaded.tokenizer, turns, system_prompt)
            rendered, tokens, note = inspection_views(inspect_rendered(services.models.loaded, prompt, False))
        except (InsightUnavailable, ChatPromptError, AttributeError) as exc:
            rendered, tokens, note = "", None, f"Tokens need a local model ({exc})."
        return (f"{which} · {note}", rendered, tokens, *record_views(record, services.config.api_port))

    def select_message(cid: int | None, selected: gr.SelectData):
        index = selected.index if isinstance(selected.index, int) else selected.index[0]
        return message_views(cid, index)

    def last_reply(cid: int | None):
        history = chats.messages(cid) if cid is not None else []
        return history[-1] if history and history[-1].role == "assistant" else None

    def token_views(cid: int | None):
        """The last reply's tokens (branchable when a local model made them and it is still loaded)."""
        last = last_reply(cid)
        rows = (last.stats or {}).get("tokens", []) if last else []
        model = services.models.loaded
        return view_value(rows, branchable=model is not None and not model.capabilities.text_only)

    def listed_chats(query: str = "", **value) -> dict:
        """The past-chats list for a search (``value=`` selects a chat)."""
        return gr.update(choices=[(c.title, c.id) for c in chats.list(query)], **value)

    def view(cid: int | None) -> list[dict[str, str]]:
        return to_chatbot(chats.messages(cid)) if cid is not None else []

    def reply(cid: int, sampling: SamplingParams, request: gr.Request, continue_last: bool = False) -> Iterator:
        """Stream the assistant's reply into the chat; yields (chatbot, stats)."""
        model = services.models.loaded
        if model is None:
            raise gr.Error("No model is loaded; load one in the Model tab.")
        history = chats.messages(cid)
        turns = [{"role": m.role, "content": m.content} for m in history]
        system_prompt = chats.get(cid).system_prompt
        if continue_last and model.capabilities.text_only:
            raise gr.Error("Continue needs a local model: a remote server cannot extend a reply it did not start.")
        try:
            prompt = render_chat_prompt(model.tokenizer, turns, system_prompt, continue_last=continue_last)
            messages = chat_messages(turns, system_prompt)
        except ChatPromptError as exc:
            raise gr.Error(str(exc)) from exc
        target = history[-1] if continue_last else None
        before = (target.content, (target.stats or {}).get("token_ids", []), (target.stats or {}).get("tokens", [])
                  ) if target else ("", [], [])
        logprobs = None if model.capabilities.text_only else VIEW_TOP
        events = stream_text(services, active, session_key(request, PANEL), prompt, sampling, False, messages,
                             logprobs)
        yield from store_reply(cid, target, before, events, sampling, model)

    def store_reply(cid: int, target, before: tuple[str, list[int], list[dict]], events, sampling: SamplingParams,
                    model) -> Iterator:
        """Store the streamed reply as it grows (after ``before``: text, token ids, token rows)."""
        base, ids, rows = before[0], list(before[1]), list(before[2])
        for text, event in events:
            ids += event.token_ids
            rows += token_rows(event.logprobs)
            if event.text or event.finish_reason:
                content = base + text
                final = event.finish_reason is not None
                stat = None
                if final:
                    stat = reply_stats(event, sampling, model, services.models.active_loras)
                    stat.update(token_ids=ids, tokens=rows)
                if target is None and (content or final):
                    target = chats.append(cid, "assistant", content, stats=stat)
                elif target is not None:
                    chats.update(target.id, content=content, stats=stat)
                yield view(cid), stats_text(event) if final else "generating…"

    def branch(data: dict, request: gr.Request):
        """Continue the last reply from a token position with the alternative clicked in the token view."""
        cid = _require_chat(data[chat_id])
        model, last = services.models.loaded, last_reply(cid)
        try:
            pos, token_id = branch_of(data[token_view])
            if model is None or model.capabilities.text_only:
                raise BranchError("branching needs a local model: load one in the Model tab")
            stats = (last.stats or {}) if last else {}
            ids, rows = stats.get("token_ids"), stats.get("tokens")
            if not ids or not rows or len(ids) != len(rows):
                raise BranchError("the last reply has no token record to branch from; regenerate it first")
            history = chats.messages(cid)[:-1]
            turns = [{"role": m.role, "content": m.content} for m in history]
            prompt = render_chat_prompt(model.tokenizer, turns, chats.get(cid).system_prompt)
            sampling = params.params(data)
            prefix_ids, prefix_rows = ids[:pos] + [token_id], rows[:pos] + [branched_row(rows[pos], token_id)]
            req = branch_request(model.tokenizer.encode(prompt, add_special_tokens=False), ids, pos, token_id,
                                 sampling, loras=services.models.active_loras, logprobs=VIEW_TOP)
        except (BranchError, ChatPromptError) as exc:
            raise gr.Error(str(exc)) from exc
        chats.truncate(cid, last.position)
        prefix = model.tokenizer.decode(prefix_ids)
        target = chats.append(cid, "assistant", prefix)
        yield view(cid), "…"
        if req is None:  # the alternative was the reply's last allowed token
            chats.update(target.id, stats={**(last.stats or {}), "token_ids": prefix_ids, "tokens": prefix_rows})
            yield view(cid), "finish: length (branched at the last token)"
            return
        events = stream_request(services, active, session_key(request, PANEL), req)
        yield from store_reply(cid, target, (prefix, prefix_ids, prefix_rows), events, sampling, model)

    def send(data: dict, request: gr.Request):
        text, cid = data[message], data[chat_id]
        if not text.strip():
            raise gr.Error("Type a message first.")
        if services.models.loaded is None:
            raise gr.Error("No model is loaded; load one in the Model tab.")
        sampling = params.params(data)
        if cid is None:
            cid = chats.create(title=" ".join(text.split())[:TITLE_LENGTH], system_prompt=data[system]).id
        chats.append(cid, "user", text)
        new_choices = listed_chats(data[search], value=cid)
        yield view(cid), "", cid, new_choices, chats.get(cid).title, "…"
        for shown, stat in reply(cid, sampling, request):
            yield shown, gr.skip(), gr.skip(), gr.skip(), gr.skip(), stat

    def regenerate(data: dict, request: gr.Request):
        cid = _require_chat(data[chat_id])
        history = chats.messages(cid)
        if history and history[-1].role == "assistant":
            chats.truncate(cid, history[-1].position)
        yield from reply(cid, params.params(data), request)

    def continue_reply(data: dict, request: gr.Request):
        yield from reply(_require_chat(data[chat_id]), params.params(data), request, continue_last=True)

    def edit(data: dict, edited: gr.EditData, request: gr.Request):
        cid = _require_chat(data[chat_id])
        history = chats.messages(cid)
        index = edited.index if isinstance(edited.index, int) else edited.index[0]
        if index >= len(history) or history[index].role != "user":
            raise gr.Error("Only your own messages can be edited.")
        chats.update(history[index].id, content=plain_text(edited.value))
        chats.truncate(cid, history[index].position + 1)
        yield view(cid), "…"
        yield from reply(cid, params.params(data), request)

    def remove_last(cid: int | None):
        cid = _require_chat(cid)
        history = chats.messages(cid)
        users = [m for m in history if m.role == "user"]
        if users:
            chats.truncate(cid, users[-1].position)
        return view(cid), ""

    def _require_chat(cid: int | None) -> int:
        if cid is None:
            raise gr.Error("Start a chat first: type a message and press Send.")
        return cid

    def stop(request: gr.Request) -> None:
        active.cancel(session_key(request, PANEL))

    def select(cid: int | None):
        if cid is None:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), False
        try:
            chat = chats.get(cid)
        except StoreError as exc:
            raise gr.Error(str(exc)) from exc
        return view(cid), cid, chat.title, chat.system_prompt, False

    def new_chat(query: str):
        return [], None, "", services.settings.get().system_prompt, listed_chats(query), "", False

    def rename(cid: int | None, new_title: str, query: str):
        try:
            chats.rename(_require_chat(cid), new_title)
        except StoreError as exc:
            raise gr.Error(str(exc)) from exc
        return listed_chats(query, value=cid)

    def delete(cid: int | None, confirmed: bool, query: str):
        cid = _require_chat(cid)
        if not confirmed:
            return (gr.skip(), gr.skip(), gr.skip(), gr.update(value="Confirm delete"), True,
                    f"Click **Confirm delete** to delete '{chats.get(cid).title}' for good.")
        chats.delete(cid)
        return [], None, listed_chats(query), gr.update(value="Delete"), False, "Chat deleted."

    def save_system(cid: int | None, text: str) -> None:
        services.settings.update(system_prompt=text)
        if cid is not None:
            chats.set_system_prompt(cid, text)

    def export(cid: int | None):
        cid = _require_chat(cid)
        folder = Path(tempfile.mkdtemp(prefix="chat-export-"))
        path = folder / f"chat-{cid}.json"
        path.write_text(chats.export_json(cid), encoding="utf-8")
        return gr.update(value=str(path), visible=True)

    def import_chat(file, query: str):
        try:
            chat = chats.import_json(Path(file if isinstance(file, str) else file.name).read_text(encoding="utf-8"))
        except (StoreError, UnicodeDecodeError) as exc:
            raise gr.Error(f"Could not import the chat: {exc}") from exc
        return (view(chat.id), chat.id, listed_chats(query, value=chat.id),
                chat.title, chat.system_prompt)

    stats.change(message_views, [chat_id], inspector.outputs, show_progress="hidden")
    chatbot.select(select_message, [chat_id], inspector.outputs)
    stats.change(token_views, [chat_id], [token_view], show_progress="hidden")
    token_view.submit(branch, {chat_id, token_view, *params.inputs}, [chatbot, stats], concurrency_limit=None)
    send_inputs = {message, chat_id, system, search, *params.inputs}
    send_outputs = [chatbot, message, chat_id, chat_list, title, stats]
    send_btn.click(send, send_inputs, send_outputs, concurrency_limit=None)
    message.submit(send, send_inputs, send_outputs, concurrency_limit=None)
    stop_btn.click(stop, None, None, concurrency_limit=None)
    regen_btn.click(regenerate, {chat_id, *params.inputs}, [chatbot, stats], concurrency_limit=None)
    continue_btn.click(continue_reply, {chat_id, *params.inputs}, [chatbot, stats], concurrency_limit=None)
    chatbot.edit(edit, {chat_id, *params.inputs}, [chatbot, stats], concurrency_limit=None)
    remove_btn.click(remove_last, [chat_id], [chatbot, stats])
    chat_list.input(select, [chat_list], [chatbot, chat_id, title, system, confirm])
    new_btn.click(new_chat, [search], [chatbot, chat_id, title, system, chat_list, stats, confirm])
    chatbot.clear(new_chat, [search], [chatbot, chat_id, title, system, chat_list, stats, confirm])  # keeps it stored
    search.change(listed_chats, [search], [chat_list], show_progress="hidden")
    rename_btn.click(rename, [chat_id, title, search], [chat_list])
    delete_btn.click(delete, [chat_id, confirm, search], [chatbot, chat_id, chat_list, delete_btn, confirm, stats])
    system.blur(save_system, [chat_id, system], None)
    export_btn.click(export, [chat_id], [export_file])
    import_btn.upload(import_chat, [import_btn, search], [chatbot, chat_id, chat_list, title, system])
    return {"chatbot": chatbot, "chat_list": chat_list, "refresh": lambda: listed_chats("")}
