"""ChatLibrary: the stored chats as the Chat tab lists, opens, renames, deletes, exports, imports and branches them,
and the versions of their messages, with no Gradio in it.

Methods take the open chat's id and return what the tab shows (a :class:`ChatView`), so no panel can describe
another chat. Writing replies into a chat is :class:`webui.controllers.chat.ChatSession`'s.
"""

from __future__ import annotations

import io
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from webui.chat.modes import INSTRUCT, ChatMode, ModeError
from webui.chat.tool_steps import ToolStep
from webui.chat.templates import STOPS, ChatTemplate
from webui.controllers.errors import UserError
from webui.engine import SamplingParams
from webui.services import Services
from webui.store import StoreError
from webui.store.chats import ChatStore, Message
from webui.fsutil import scratch_folder

NO_CHAT = "Start a chat first: type a message and press Send."


@dataclass(frozen=True)
class ChatView:
    """What the Chat tab shows for one chat (chat_id None: a new, unsaved chat)."""

    chat_id: int | None
    title: str = ""
    system_prompt: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Chatbot messages: {"role", "content"}, the stored text only (a message with images: its images' files,
    then its text)."""
    stats: str = ""
    """The last reply's stats line ("generating…" while one streams)."""
    mode: str = INSTRUCT
    """The chat's mode (webui.chat.modes.MODES)."""
    character: str | None = None
    """The name of the chat's character (None: none)."""
    replying: bool = False
    """Whether the last message is a reply still being written (its text grows with the next views)."""


@dataclass(frozen=True)
class Entry:
    """What one entry of the log shows: a stored message (its place in the chat's path), or, for a reply that
    called tools, one of its call blocks (shown before the reply's text): a step's own words, or a call's
    arguments or result."""

    index: int
    step: int = -1
    call: int = -1
    part: str = ""
    """"" (the message itself), "said" (a step's text besides its calls), "arguments" or "result"."""


def _entries(message: Message, index: int, chats: ChatStore) -> list[tuple[Entry, dict[str, Any]]]:
    """The log entries of one stored message: a reply's tool steps as blocks, then the message itself (its text
    exactly as stored, nothing added: Copy and Edit take it as it is; a message with images shows them first)."""
    out = tool_blocks(message.record.tool_steps, index) if message.role == "assistant" else []
    files = [*({"path": image_file(chats, name)} for name in message.images),
             *({"path": document_file(chats, d.digest, d.name)} for d in message.documents)]
    content: Any = [*files, message.content] if files else message.content
    out.append((Entry(index), {"role": message.role, "content": content}))
    return out


def tool_blocks(steps: Sequence[ToolStep], index: int) -> list[tuple[Entry, dict[str, Any]]]:
    """The blocks that show a reply's tool steps (message ``index`` of the chat's path): each step's own words,
    and each of its calls' arguments and result."""
    out: list[tuple[Entry, dict[str, Any]]] = []
    for s, step in enumerate(steps):
        if step.text:
            out.append((Entry(index, s, -1, "said"), block(step.text, "Written before its calls")))
        for c, call in enumerate(step.calls):
            held = " · held to its schema by a grammar" if step.constrained else " · written freely"
            out.append((Entry(index, s, c, "arguments"), block(call.arguments,
                                                               f"Tool call: {call.name} · arguments{held}")))
            took = f" · {call.seconds:.2f}s" + (f" · error: {call.error}" if call.error else "") + (
                " · cut to the output limit" if call.truncated else "")
            out.append((Entry(index, s, c, "result"), block(call.result, f"{call.name} · result{took}")))
    return out


def block(text: str, title: str, running: bool = False) -> dict[str, Any]:
    """A collapsible block of the log (Gradio's metadata message)."""
    return {"role": "assistant", "content": text,
            "metadata": {"title": title, "status": "pending" if running else "done"}}


def entries(messages: list[Message], chats: ChatStore) -> list[Entry]:
    """What each entry of the log (``to_chatbot``'s list) shows, in its order."""
    return [entry for i, m in enumerate(messages) for entry, _ in _entries(m, i, chats)]


def to_chatbot(messages: list[Message], chats: ChatStore) -> list[dict[str, Any]]:
    """Chatbot messages: each one's text exactly as stored (a message's versions and a reply's stats are shown
    beside the log, see ``ChatLibrary.describe``), a reply's tool calls as blocks before it."""
    return [shown for i, m in enumerate(messages) for _, shown in _entries(m, i, chats)]


IMAGE_FILES = Path(tempfile.gettempdir()) / "llm-workbench-images"
"""Where a chat's images are written for the browser to show (Gradio serves files from the temp dir)."""


def image_file(chats: ChatStore, digest: str) -> str:
    """A file holding the image ``digest`` of the caller's chats (written once; named by its content)."""
    from PIL import Image, UnidentifiedImageError

    data = chats.image(digest)
    try:
        with Image.open(io.BytesIO(data)) as opened:
            suffix = "." + (opened.format or "png").lower()
    except (UnidentifiedImageError, OSError):
        suffix = ".png"
    path = IMAGE_FILES / f"{digest}{suffix}"
    if not path.is_file():
        IMAGE_FILES.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        scratch.write_bytes(data)
        scratch.replace(path)  # whole or not there, whichever request writes it first
    return str(path)


def document_file(chats: ChatStore, digest: str, name: str) -> str:
    """A file holding the document ``digest`` of the caller's chats, under the name it was attached with (written
    once; its folder named by its content), for the log to show as a chip."""
    base = Path(name).name
    path = IMAGE_FILES / "documents" / digest / (base if base not in ("", ".", "..") else "document")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.parent / f".{time.monotonic_ns()}.tmp"
        scratch.write_bytes(chats.document_bytes(digest))
        scratch.replace(path)
    return str(path)


def require_chat(chat_id: int | None) -> int:
    """The open chat's id; UserError when the tab shows a new chat, not saved yet."""
    if chat_id is None:
        raise UserError(NO_CHAT)
    return chat_id


class ChatLibrary:
    """The stored chats (SQLite, through ``services.chats``) for any browser tab."""

    def __init__(self, services: Services) -> None:
        self.services, self.chats = services, services.chats

    def listed(self, query: str = "") -> list[tuple[str, int]]:
        """(label, id) of the chats matching ``query``, most recent first: the title, and where two chats share
        one (an import, say), when each was last written, so they can be told apart."""
        chats = self.chats.list(query)
        titles = Counter(c.title for c in chats)
        labels = [c.title if titles[c.title] == 1 else
                  f"{c.title} · {time.strftime('%b %d %H:%M:%S', time.localtime(c.updated))}" for c in chats]
        again = Counter(labels)
        return [(label if again[label] == 1 else f"{label} · #{c.id}", c.id) for label, c in zip(labels, chats)]

    def view(self, chat_id: int | None) -> ChatView:
        """The chat as the tab shows it; None: a new chat, with the system prompt new chats start with."""
        if chat_id is None:
            return ChatView(None, system_prompt=self.services.settings.get().system_prompt)
        try:
            chat, history = self.chats.get(chat_id), self.chats.messages(chat_id)
        except StoreError as exc:
            raise UserError(f"{exc}; it may have been deleted in another tab") from exc
        last = history[-1] if history and history[-1].role == "assistant" else None
        return ChatView(chat.id, chat.title, chat.system_prompt, to_chatbot(history, self.chats),
                        last.record.summary if last else "", chat.mode, chat.character)

    def latest(self) -> ChatView:
        """The most recently used chat (what a reloaded page opens), or a new one."""
        chats = self.chats.list()
        return self.view(chats[0].id if chats else None)

    def rename(self, chat_id: int | None, title: str) -> ChatView:
        try:
            self.chats.rename(require_chat(chat_id), title)
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        return self.view(chat_id)

    def delete(self, chat_id: int | None) -> ChatView:
        """Delete the chat for good; the tab then shows a new chat."""
        try:
            self.chats.delete(require_chat(chat_id))
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        return self.view(None)

    def entry(self, chat_id: int | None, shown: int) -> Entry:
        """What entry ``shown`` of the log shows (the log's index, as a click or an edit gives it)."""
        listed = entries(self.chats.messages(chat_id), self.chats) if chat_id is not None else []
        if not 0 <= shown < len(listed):
            raise UserError("That message is not in this chat any more; click one of the chat's messages.")
        return listed[shown]

    def keep_draft(self, text: str) -> None:
        """The message box as it is now (typed, not sent), for the next page load."""
        if self.services.settings.get().chat_draft != (text or ""):
            self.services.settings.update(chat_draft=text or "")

    def draft(self) -> str:
        """What the message box held last (typed, not sent)."""
        return self.services.settings.get().chat_draft

    def title(self, chat_id: int | None) -> str:
        return self.chats.get(require_chat(chat_id)).title

    def save_system(self, chat_id: int | None, text: str) -> None:
        """The open chat's system prompt, as typed. A new chat (not sent yet) keeps it as the one new chats start
        with; a chat's own prompt stays that chat's (New chat does not copy it)."""
        if chat_id is None:
            if self.services.settings.get().system_prompt != text:
                self.services.settings.update(system_prompt=text)
        else:
            try:
                if self.chats.get(chat_id).system_prompt != text:
                    self.chats.set_system_prompt(chat_id, text)
            except StoreError as exc:
                raise UserError(f"The system prompt was not saved: {exc}") from exc

    def export(self, chat_id: int | None, tgwui: bool = False) -> Path:
        """The chat as a JSON file in a new temporary folder: ours (every version), or text-generation-webui's
        history format (the conversation shown)."""
        cid = require_chat(chat_id)
        name = f"chat-{cid}-text-generation-webui.json" if tgwui else f"chat-{cid}.json"
        path = scratch_folder("chat-export-") / name
        path.write_text(self.chats.export_tgwui(cid) if tgwui else self.chats.export_json(cid), encoding="utf-8")
        return path

    def import_file(self, path: str | Path) -> ChatView:
        try:
            chat = self.chats.import_json(Path(path).read_text(encoding="utf-8"))
        except (StoreError, UnicodeDecodeError) as exc:
            raise UserError(f"Could not import the chat: {exc}") from exc
        return self.view(chat.id)

    def chat_params(self, chat_id: int | None) -> SamplingParams:
        """The parameters the chat's last reply was made with (without the stop strings its template and mode
        added)."""
        cid = require_chat(chat_id)
        made = next((r for r in (m.record for m in reversed(self.chats.messages(cid))) if r.run is not None), None)
        if made is None or made.run is None:
            raise UserError("This chat has no reply made here yet, so it has no parameters to use.")
        try:  # the chat modes' "\nYou:" / "\nChar:" too
            mode_stops = ChatMode.from_record(made.chat_mode).stops(ChatTemplate(""))
        except ModeError:
            mode_stops = ()
        template_stops = (*STOPS.get((made.chat_template or {}).get("name", ""), ()), *mode_stops)
        params = dict(made.run.params)
        params["stop"] = [s for s in params.get("stop", []) if s not in template_stops]
        try:
            return SamplingParams.from_dict(params, source="this chat's last reply")
        except ValueError as exc:
            raise UserError(str(exc)) from exc

    # -- a message's versions, and what is cut from or copied out of a chat ------------------------------
    def switch_version(self, chat_id: int | None, index: int, step: int) -> ChatView:
        """Show message ``index``'s previous (step -1) or next (+1) version, and the conversation after it."""
        cid = require_chat(chat_id)
        history = self.chats.messages(cid)
        if not 0 <= index < len(history):
            raise UserError("Click a message first to move between its versions.")
        versions = self.chats.versions(history[index].id)
        at = versions.index(history[index].id) + step
        if not 0 <= at < len(versions):
            raise UserError(f"This is the {'first' if step < 0 else 'last'} version of that message.")
        self.chats.show(versions[at])
        return self.view(cid)

    def version_of(self, chat_id: int | None, index: int | None) -> tuple[int, int]:
        """(number, count) of message ``index``'s versions; (0, 0) when there is no such message."""
        history = self.chats.messages(chat_id) if chat_id is not None else []
        if chat_id is None or index is None or not 0 <= index < len(history):
            return 0, 0
        return self.chats.version_numbers(chat_id).get(history[index].id, (1, 1))

    def describe(self, chat_id: int | None, index: int | None) -> str:
        """The line beside the log for message ``index``: which version it is, and a reply's stats ("" when there
        is no such message)."""
        history = self.chats.messages(chat_id) if chat_id is not None else []
        if index is None or not 0 <= index < len(history):
            return ""
        number, count = self.version_of(chat_id, index)
        line = f"Message {index + 1}: version {number} of {count}" + (
            "" if count > 1 else " (edit or regenerate it to add another)")
        return " · ".join(part for part in (line, history[index].record.summary) if part)

    def branch_chat(self, chat_id: int | None, index: int) -> ChatView:
        """A new chat holding this chat up to and including message ``index``; the tab then shows it."""
        cid = require_chat(chat_id)
        history = self.chats.messages(cid)
        if not 0 <= index < len(history):
            raise UserError("Click the message to branch from first.")
        title = f"{self.chats.get(cid).title} (branch)"
        return self.view(self.chats.branch(history[index].id, title[-200:]).id)

    def remove_last(self, chat_id: int | None, typed: str = "") -> tuple[ChatView, str]:
        """Remove your last message and everything after it; the chat, and what the message box then holds: that
        message's text (to edit and send again) before what it held (``typed``: a message removed before, or a
        draft), a blank line between, so nothing removed or typed is lost."""
        cid = require_chat(chat_id)
        users = [m for m in self.chats.messages(cid) if m.role == "user"]
        if users:
            self.chats.truncate(cid, users[-1].position)
        removed = users[-1].content if users else ""
        return self.view(cid), "\n\n".join(part for part in (removed, typed) if part.strip())
