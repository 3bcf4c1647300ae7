"""ChatSession: the Chat tab's replies (send, regenerate, continue, edit, impersonate, branch, stop) and what a
message's inspector shows, over Services, with no Gradio in it. The stored chats themselves (list, open, rename,
versions, export) are its ``library`` (:class:`webui.controllers.chat_library.ChatLibrary`).

Every message goes to SQLite before it is shown (the assistant's reply is appended with its first text and updated
with each view of it as it streams), so a restart or a kill -9 loses nothing already on screen. Methods take the open chat's id and
return what the tab shows (a ChatView), so no panel can describe another chat. A reply resolves the model in use
once (its slot: model, engine, adapters) and runs and is recorded on that.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from loaders.base import LoadedModel, PromptImage, SupportsImages
from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.chat.context import FittedChat, fit_chat, kept_messages, left_out
from webui.chat.modes import INSTRUCT, ChatMode, ModeError
from webui.chat.reply import ReplyRecord, written_by
from webui.chat.templates import ChatTemplate, TemplateError
from webui.controllers.chat_library import ChatLibrary, ChatView, require_chat
from webui.controllers.chat_modes import ChatModes, greeting_turns
from webui.controllers.chat_tools import ToolReplies, chat_plan, edited_steps, tool_turns, uses_tools
from webui.chat.tool_steps import history_of
from webui.chat.tools import plan_tools, render_with_tools
from webui.engine.params import InvalidParameter
from webui.store import StoreError
from webui.tools import ToolList
from webui.controllers.errors import UserError
from webui.controllers.generation import STOP, ActiveRequests, Key, Pace, Streamed, VIEW_INTERVAL, new_request, \
    reply_key, stream_request
from webui.controllers.reply_stats import ReplyStart, final_stats
from webui.engine import GenerationEvent, GenerationRequest, SamplingParams
from webui.engine.sequence import token_budget
from webui.documents import DocumentError, read_document, with_documents
from webui.images import ImageError, data_url, image_placeholder, max_image_bytes, read_image
from webui.insight import InsightUnavailable, PromptInspection, inspect_rendered
from webui.models import ModelId, NotLoaded, Slot
from webui.reproduce import ReproduceRecord, record_for_reply
from webui.services import Services
from webui.store.chats import Message
from webui.token_view import VIEW_TOP, BranchError, branch_request, branched_row, token_rows

PANEL = "chat"
TITLE_LENGTH = 48
NO_MODEL = "No model is loaded; load one in the Model tab."

@dataclass(frozen=True)
class MessageInspection:
    """What the model read for one message, and a reply's reproduce record."""

    which: str = ""
    seen: PromptInspection | None = None
    note: str = ""
    record: ReproduceRecord | None = None


def turns_of(messages: list[Message], image_placeholder: str = "") -> list[dict[str, str]]:
    """The messages as chat turns; a message's images are ``image_placeholder`` each, before its text, and its
    documents' text follows it (text-generation-webui's ATTACHMENTS section)."""
    return [{"role": m.role, "content": image_placeholder * len(m.images) + with_documents(m.content, m.documents)}
            for m in messages]


class ChatSession:
    """Chat operations for any browser tab; ``key`` (browser tab, panel) names its running requests (for Stop)."""

    def __init__(self, services: Services, active: ActiveRequests) -> None:
        self.services, self.chats, self.active = services, services.chats, active
        self.library = ChatLibrary(services)
        self.modes = ChatModes(services)  # the template and mode each reply is written in
        self.tool_replies = ToolReplies(self)
        self._shown: dict[str, int | None] = {}  # browser tab (Gradio's session hash) -> the chat on its screen
        self.view_interval = VIEW_INTERVAL  # the shortest time between two views of a streaming reply

    # -- generating -------------------------------------------------------------------------------------
    def send(self, chat_id: int | None, text: str, system_prompt: str, sampling: SamplingParams,
             key: Key, start: str = "", mode: str = INSTRUCT, character: str | None = None,
             images: Sequence[bytes] = (), tools: Sequence[str] | None = None,
             documents: Sequence[tuple[bytes, str]] = ()) -> Iterator[ChatView]:
        """Store the user's message with its ``images`` (a new chat when ``chat_id`` is None: in ``mode``, with
        ``character``, whose greeting comes first), then stream the reply. ``tools``: those the chat offers from
        now on, as the Tools panel shows them (None: as stored; a new chat: those new chats start with).
        ``documents``: (bytes, file name) of the files attached, read as text (webui.documents)."""
        if not text.strip() and not images and not documents:
            raise UserError("Type a message first.")
        attached = self._read_documents(documents)
        self._check_images(self._check_ready(key, chat_id).model, images)
        chat_mode = self.mode(chat_id) if chat_id is not None else self.mode_of(mode, character)
        history = turns_of(self.chats.messages(chat_id)) if chat_id is not None else greeting_turns(chat_mode)
        system = self.chats.get(chat_id).system_prompt if chat_id is not None else system_prompt
        self._check_fits([*history, {"role": "user", "content": with_documents(text, [d for d, _ in attached])}],
                         system, sampling, chat_mode)
        if chat_id is not None:
            if tools is not None:
                self.set_tools(chat_id, tools)
            self.tool_replies.check(chat_id)
        if chat_id is None:
            tools = self.chat_tools(None) if tools is None else tools
            chat_plan(self, tools)  # the tools picked are there, before anything is stored
            title = " ".join(text.split())[:TITLE_LENGTH] or (attached[0][0].name[:TITLE_LENGTH] if attached
                                                               else "Image")
            chat_id = self.new_chat(title, system_prompt, mode, character, tools)
        self.chats.append(chat_id, "user", text, images=list(images), documents=attached)
        yield replace(self.library.view(chat_id), stats="…")
        yield from self._reply(chat_id, sampling, key, start=start)

    def regenerate(self, chat_id: int | None, sampling: SamplingParams, key: Key,
                   start: str = "") -> Iterator[ChatView]:
        """A new version of the last reply (the previous one stays, a click away)."""
        cid = require_chat(chat_id)
        self._check_ready(key, cid)
        history = self.chats.messages(cid)
        self.tool_replies.check(cid)
        if history and history[-1].role == "assistant":
            self._check_fits(turns_of(history[:-1]), self.chats.get(cid).system_prompt, sampling, self.mode(cid))
            self.chats.rewind(cid, history[-1].position)
        yield from self._reply(cid, sampling, key, start=start)

    def continue_reply(self, chat_id: int | None, sampling: SamplingParams, key: Key) -> Iterator[ChatView]:
        """Extend the last reply from where it stopped."""
        cid = require_chat(chat_id)
        self._check_ready(key, cid)
        yield from self._reply(cid, sampling, key, continue_last=True)

    def edit(self, chat_id: int | None, index: int, text: str, sampling: SamplingParams,
             key: Key) -> Iterator[ChatView]:
        """A new version of message ``index``, the earlier one kept. Your message: the model replies to it (a new
        branch). The model's: the edit is kept as it is (Continue or Regenerate go on from there)."""
        cid = require_chat(chat_id)
        history = self.chats.messages(cid)
        if not 0 <= index < len(history) or history[index].role not in ("user", "assistant"):
            raise UserError("That message cannot be edited; click one of the chat's messages.")
        if history[index].role == "assistant":
            if self.active.busy(reply_key(key, cid)):
                raise UserError("A reply is still being written here; wait for it or press Stop.")
            self.chats.rewind(cid, index)
            self.chats.append(cid, "assistant", text, stats=ReplyRecord(
                edited=True, tool_steps=history[index].record.tool_steps))
            yield self.library.view(cid)
            return
        self._check_ready(key, cid)
        self.tool_replies.check(cid)
        kept = history[index].documents
        self._check_fits([*turns_of(history[:index]), {"role": "user", "content": with_documents(text, kept)}],
                         self.chats.get(cid).system_prompt, sampling, self.mode(cid))
        self.chats.rewind(cid, index)
        self.chats.append(cid, "user", text, images=[self.chats.image(name) for name in history[index].images],
                          documents=[(d, self.chats.document_bytes(d.digest)) for d in kept])
        yield replace(self.library.view(cid), stats="…")
        yield from self._reply(cid, sampling, key)

    def edit_shown(self, chat_id: int | None, shown: int, text: str, sampling: SamplingParams,
                   key: Key) -> Iterator[ChatView]:
        """An edit of entry ``shown`` of the log (its index, as the edit gives it): a message (``edit``), or one
        of a reply's calls, whose arguments or result is then ``text`` (``edit_call``)."""
        entry = self.library.entry(require_chat(chat_id), shown)
        if entry.part:
            yield from self.edit_call(chat_id, entry.index, entry.step, entry.call, entry.part, text, sampling, key)
        else:
            yield from self.edit(chat_id, entry.index, text, sampling, key)

    def edit_call(self, chat_id: int | None, index: int, step: int, call: int, part: str, text: str,
                  sampling: SamplingParams, key: Key) -> Iterator[ChatView]:
        """A new version of reply ``index`` going on from its call ``call`` of step ``step`` with ``part``
        ("arguments": the tool runs again with them; "result": what the tool gave) as ``text``; the earlier
        version stays, a click away."""
        cid = require_chat(chat_id)
        history = self.chats.messages(cid)
        if not 0 <= index < len(history) or history[index].role != "assistant":
            raise UserError("That call is not in this chat any more; click one of the chat's messages.")
        self._check_ready(key, cid)
        self.tool_replies.check(cid)
        steps = edited_steps(history[index].record, step, call, part, text, self)
        self.chats.rewind(cid, index)
        yield replace(self.library.view(cid), stats="…")
        yield from self.tool_replies.reply(cid, sampling, reply_key(key, cid), steps)

    def tools(self) -> ToolList:
        """The tools chats can offer now, and the tool files and MCP servers that give none (with why)."""
        return self.services.tools.list()

    def set_tools(self, chat_id: int | None, names: Sequence[str]) -> None:
        """The tools chat ``chat_id`` offers from its next reply on; for a new chat (None), those new chats
        offer (kept until changed)."""
        names = list(names)
        if chat_id is None:
            if self.services.settings.get().new_chat_tools != names:
                self.services.settings.update(new_chat_tools=names)
            return
        try:
            if list(self.chats.get(chat_id).tools) != names:
                self.chats.set_tools(chat_id, names)
        except StoreError as exc:
            raise UserError(f"The tools were not saved: {exc}") from exc

    def chat_tools(self, chat_id: int | None) -> list[str]:
        """The tools chat ``chat_id`` offers (None: those a new chat starts with)."""
        if chat_id is None:
            return list(self.services.settings.get().new_chat_tools)
        try:
            return list(self.chats.get(chat_id).tools)
        except StoreError:
            return []

    def impersonate(self, chat_id: int | None, system_prompt: str, sampling: SamplingParams,
                    key: Key) -> Iterator[str]:
        """The model writes your next message (the text so far, streamed): it goes into the message box, and is
        sent only if you send it."""
        slot = self._check_ready(key)
        model = slot.model
        if model.capabilities.renders_chats:  # your turn is rendered with a template of ours, then continued
            raise UserError("Impersonate needs a local model: a remote server only writes the assistant's turn.")
        stored = self.chats.messages(chat_id) if chat_id is not None else []
        placeholder = self._placeholder(model, stored)
        history = turns_of(stored, placeholder)
        system = self.chats.get(chat_id).system_prompt if chat_id is not None else system_prompt
        template, chat_mode = self.template(model), self.mode(chat_id)
        try:
            prompt = chat_mode.user_turn_prompt(model.tokenizer, chat_messages(history, system), template) \
                if chat_mode.chat_like else template.user_turn_prompt(model.tokenizer, chat_messages(history, system))
        except (TemplateError, ChatPromptError, ModeError) as exc:
            raise UserError(f"Impersonate: {exc}") from exc
        stops = chat_mode.stops(template) if chat_mode.chat_like else template.user_stops
        if stops:
            sampling = sampling.replace(stop=tuple(dict.fromkeys((*sampling.stop, *stops))))
        sampling = sampling.replace(structured_outputs={})  # a constraint is on the model's replies, not your side
        images = self._images(stored) if placeholder else ()  # the chat's images, as its messages place them
        for text, _ in stream_request(slot, self.active, key, new_request(slot, prompt, sampling, False,
                                                                           images=images)):
            yield text.strip()

    def as_text(self, chat_id: int | None) -> str:
        """The chat as the model reads it, for the Notebook to go on by hand: ending with the last reply itself
        (no end of turn), so Generate continues it; or, after the user's message, with the reply's opening."""
        cid = require_chat(chat_id)
        model = self.services.loaded
        if model is None or model.capabilities.renders_chats:
            raise UserError("Sending a chat to the Notebook needs a local model (its template writes the text).")
        history = self.chats.messages(cid)
        try:
            return render_chat_prompt(model.tokenizer, turns_of(history), self.chats.get(cid).system_prompt,
                                      continue_last=bool(history) and history[-1].role == "assistant",
                                      template=self.template(model), mode=self.mode(cid))
        except ChatPromptError as exc:
            raise UserError(str(exc)) from exc

    def stop(self, key: Key, chat_id: int | None = None) -> bool:
        """Stop the reply being written in chat ``chat_id`` and an Impersonate running for ``key``."""
        stopped = self.tool_replies.stop(reply_key(key, chat_id))  # (between calls: no request runs then)
        stopped = self.active.cancel(reply_key(key, chat_id)) or stopped
        return self.active.cancel(key) or stopped

    # -- the chat each browser tab shows ----------------------------------------------------------------
    def show(self, tab: str, chat_id: int | None) -> None:
        """Browser tab ``tab`` shows chat ``chat_id`` now: replies written in other chats stay off its view."""
        self._shown[tab] = chat_id

    def shows(self, tab: str, chat_id: int | None) -> bool:
        return self._shown.get(tab) == chat_id

    def branch(self, chat_id: int | None, position: int, token_id: int, sampling: SamplingParams,
               key: Key) -> Iterator[ChatView]:
        """Continue the last reply from ``position`` with ``token_id`` in place of the token the model chose."""
        cid = require_chat(chat_id)
        slot, last = self.services.in_use(), self._last_reply(cid)
        try:
            if slot is None or not slot.model.capabilities.stepped:  # the reply's tokens and their alternatives
                raise BranchError("branching needs a local model: load one in the Model tab")
            model = slot.model
            made = last.record if last else ReplyRecord()
            if any(m.images for m in self.chats.messages(cid)):
                raise BranchError("branching does not read a chat's images yet; regenerate the reply instead")
            ids, rows = list(made.token_ids), list(made.tokens)
            if last is None or not ids or not rows or len(ids) != len(rows):
                raise BranchError("the last reply has no token record to branch from; regenerate it first")
            template, chat_mode = self.modes.reply_template(model, made), self.modes.reply_mode(cid, made)
            sent = kept_messages(chat_messages(turns_of(self.chats.messages(cid)[:-1]),
                                               self.chats.get(cid).system_prompt), made.dropped)
            prompt = render_chat_prompt(model.tokenizer, sent, template=template, mode=chat_mode)
            if chat_mode.chat_like:  # the branch ends where the next "Name:" turn would begin, as the reply did
                sampling = sampling.replace(stop=tuple(dict.fromkeys((*sampling.stop, *chat_mode.stops(template)))))
            req = branch_request(model.tokenizer.encode(prompt, add_special_tokens=False), ids, position, token_id,
                                 sampling, loras=slot.active_loras, logprobs=VIEW_TOP)
            prefix_ids = ids[:position] + [token_id]
            prefix_rows = rows[:position] + [branched_row(rows[position], token_id)]
        except (BranchError, ChatPromptError) as exc:
            raise UserError(str(exc)) from exc
        self._check_ready(key, cid)
        self.chats.rewind(cid, last.position)  # a new version of the reply; the old one stays
        prefix = model.tokenizer.decode(prefix_ids)
        target = self.chats.append(cid, "assistant", prefix)
        yield replace(self.library.view(cid), stats="…")
        if req is None:  # the alternative was the reply's last allowed token: nothing was generated (no run)
            self.chats.update(target.id, stats=ReplyRecord(made.model, made.loader, made.chat_template, made.loras,
                                                           token_ids=tuple(prefix_ids), tokens=tuple(prefix_rows),
                                                           chat_mode=made.chat_mode))
            yield replace(self.library.view(cid), stats="finish: length (branched at the last token)")
            return
        events = stream_request(slot, self.active, reply_key(key, cid), req)
        yield from self._store_reply(cid, target, ReplyStart(prefix, tuple(prefix_ids), tuple(prefix_rows)), events,
                                     req, model, template, mode=chat_mode)

    # -- looking at a message ---------------------------------------------------------------------------
    def inspect(self, chat_id: int | None, index: int | None = None) -> MessageInspection:
        """What the model read for message ``index`` (None: the last reply) and, for a reply, its record."""
        history = self.chats.messages(chat_id) if chat_id is not None else []
        if index is None:
            index = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "assistant"), None)
        if chat_id is None or index is None or not 0 <= index < len(history):
            return MessageInspection()
        message, system_prompt = history[index], self.chats.get(chat_id).system_prompt
        reply = message.role == "assistant"
        turns = turns_of(history[:index + (0 if reply else 1)])
        made = message.record if reply else ReplyRecord()
        tooled = uses_tools(history[:index + 1]) or bool(made.tools_offered)
        record = None if not made.run else record_for_reply(
            tool_turns(history[:index]) + history_of(list(made.tool_steps)), system_prompt, made, tools=True) \
            if tooled else record_for_reply(self._record_turns(history[:index]), system_prompt, made)
        which = f"message {index + 1} ({'the reply' if reply else 'your message'})"
        model, also = self.services.loaded, ""
        if made.model and model is not None and written_by(model.name, model.loader) != \
                written_by(made.model, made.loader):
            try:  # counted as the model that wrote it read it, where it is loaded
                model = self.services.models.slot(str(ModelId(ModelId.parse(made.model).name, made.loader))).model
            except NotLoaded:
                also = (f"written by {written_by(made.model, made.loader or '?')}, not loaded now: tokens "
                        f"and the share of the context are {written_by(model.name, model.loader)}'s")
        if model is None or not model.capabilities.tokenizes:
            return MessageInspection(which, None, "Tokens need a local model loaded in the Model tab.", record)
        try:
            template = self.modes.reply_template(model, made if reply else None)
            chat_mode = self.modes.reply_mode(chat_id, made)
            if tooled:  # the answer's turn as it was read: the calls before it, the tools it was offered
                sent = kept_messages(chat_messages(
                    tool_turns(history[:index + (0 if reply else 1)]) + history_of(list(made.tool_steps)),
                    system_prompt, tools=True), made.dropped)
                offered = plan_tools(list(made.tools_offered), "auto", True) if made.tools_offered else None
                rendered = render_with_tools(model.tokenizer, sent, offered, template)[0]
            else:
                sent = kept_messages(chat_messages(turns, system_prompt), made.dropped)
                rendered = render_chat_prompt(model.tokenizer, sent, template=template, mode=chat_mode)
            seen = inspect_rendered(model, rendered, False)
        except (InsightUnavailable, ChatPromptError, UserError, InvalidParameter) as exc:
            return MessageInspection(which, None, f"Tokens are not available ({exc}).", record)
        notes = [n for n in (also, left_out(made.dropped, made.dropped_over)) if n]
        return MessageInspection(which, seen, " · ".join(notes), record)

    def last_tokens(self, chat_id: int | None, index: int | None = None,
                    step: int | None = None) -> tuple[list[dict[str, Any]], bool]:
        """The token rows of reply ``index`` (None, or not a reply: the last reply), or of its tool step ``step``
        (the turn that wrote that step's calls), and whether they can be branched (the last reply's own, with a
        local model loaded)."""
        history = self.chats.messages(chat_id) if chat_id is not None else []
        last = history[-1] if history and history[-1].role == "assistant" else None
        chosen = history[index] if index is not None and 0 <= index < len(history) \
            and history[index].role == "assistant" else last
        steps = chosen.record.tool_steps if chosen else ()
        if step is not None and 0 <= step < len(steps):
            return list(steps[step].tokens), False
        rows = list(chosen.record.tokens) if chosen else []
        model = self.services.loaded
        return rows, chosen is last and model is not None and model.capabilities.stepped

    # -- helpers ----------------------------------------------------------------------------------------
    def _check_ready(self, key: Key, chat_id: int | None = None) -> Slot:
        """The model in use, when nothing is being written for ``key`` (in chat ``chat_id``, when given)."""
        slot = self.slot()
        if self.active.busy(key if chat_id is None else reply_key(key, chat_id)) \
                or chat_id is not None and self.tool_replies.busy(reply_key(key, chat_id)):
            raise UserError("A reply is still being written here; wait for it or press Stop.")
        return slot

    def slot(self) -> Slot:
        """The model the caller uses: its slot (model, engine, adapters), resolved once for a whole reply, so the
        reply and its record are of one model and one set of adapters whatever changes meanwhile."""
        if (slot := self.services.in_use()) is None:
            raise UserError(NO_MODEL)
        return slot

    def _last_reply(self, chat_id: int) -> Message | None:
        history = self.chats.messages(chat_id)
        return history[-1] if history and history[-1].role == "assistant" else None

    def _reply(self, cid: int, sampling: SamplingParams, key: Key, continue_last: bool = False,
               start: str = "") -> Iterator[ChatView]:
        """Stream a reply into the chat: a new one (beginning with ``start``, which the model continues, when
        given), or the rest of the last one (``continue_last``)."""
        slot = self.slot()
        model = slot.model
        history = self.chats.messages(cid)
        if self.chats.get(cid).tools or uses_tools(history):
            if continue_last and history and history[-1].record.tool_steps:
                raise UserError("Continue does not go on from a reply that called tools yet; regenerate it, or edit "
                                "one of its calls")
            if start and not continue_last:
                raise UserError("'Start reply with' cannot be used in a chat with tools yet; clear it, or untick "
                                "the tools")
            if not continue_last:
                yield from self.tool_replies.reply(cid, sampling, reply_key(key, cid))
                return
        system_prompt = self.chats.get(cid).system_prompt
        placeholder = self._placeholder(model, history)
        if continue_last and model.capabilities.renders_chats:
            raise UserError("Continue needs a local model: a remote server cannot extend a reply it did not start.")
        target = history[-1] if continue_last else None
        made = target.record if target else ReplyRecord()
        template = self.modes.reply_template(model, made if continue_last else None)
        chat_mode = self.modes.reply_mode(cid, made if continue_last else None)
        given = list(made.token_ids) if target is not None and model.capabilities.tokenizes and not placeholder \
            else None  # (a prompt with images is text, with the images' placeholders)
        if given and target is not None and model.tokenizer.decode(given) != target.content:
            given = None  # edited since: continue from its text
        if given:  # continue from the reply's own tokens (its text could tokenize differently)
            fitted = self._fitted(model, turns_of(history[:-1], placeholder), system_prompt, sampling, template,
                                  chat_mode, reserve=len(given))
            prompt: str | list[int] = [*model.tokenizer.encode(fitted.prompt, add_special_tokens=False), *given]
        elif start and not continue_last:
            if model.capabilities.renders_chats:
                raise UserError("'Start reply with' needs a local model: a remote server starts its replies itself.")
            reserve = len(model.tokenizer.encode(start, add_special_tokens=False))
            fitted = self._fitted(model, turns_of(history, placeholder), system_prompt, sampling, template,
                                  chat_mode, reserve=reserve, extra=self._image_tokens(model, history))
            prompt = fitted.prompt + start
        else:
            fitted = self._fitted(model, turns_of(history, placeholder), system_prompt, sampling, template,
                                  chat_mode, continue_last, extra=self._image_tokens(model, history))
            prompt = fitted.prompt
        if stops := chat_mode.stops(template):  # a turn with no end token of its own ends where the next begins
            sampling = sampling.replace(stop=tuple(dict.fromkeys((*sampling.stop, *stops))))
        before = ReplyStart(target.content if target else start, tuple(given or ()), made.tokens if given else ())
        logprobs = VIEW_TOP if model.capabilities.stepped else None  # the token views under a reply
        images = self._images(history[fitted.dropped:]) if placeholder else ()  # of the messages sent
        request = new_request(slot, prompt, sampling, False, fitted.messages, logprobs, images)
        events = stream_request(slot, self.active, reply_key(key, cid), request)
        yield from self._store_reply(cid, target, before, events, request, model, template, fitted, chat_mode)

    def _read_documents(self, documents: Sequence[tuple[bytes, str]]) -> list[tuple[Any, bytes]]:
        """Each attached file read as a document, with its bytes; UserError names the one that cannot be."""
        read = []
        for i, (data, name) in enumerate(documents):
            try:
                read.append((read_document(data, name), data))
            except DocumentError as exc:
                raise UserError(f"Document {i + 1}: {exc}") from exc
        return read

    def _check_images(self, model: LoadedModel, images: Sequence[bytes]) -> None:
        """Images attached to a message: the model takes images, and each is readable and within the limit."""
        if images and not image_placeholder(model):
            raise UserError(f"{model.name} takes no images (a text-only model); load a vision-language model (the "
                            "Model tab says \"images: yes\"), or send the message without them.")
        for i, data in enumerate(images):
            try:
                read_image(data, max_image_bytes(self.services.config.max_image_mb))
            except ImageError as exc:
                raise UserError(f"Image {i + 1}: {exc}") from exc

    def _placeholder(self, model: LoadedModel, history: list[Message]) -> str:
        """How ``model`` marks an image in a prompt, where the chat has images ("" where it has none); UserError
        when it has images and the model takes none."""
        if not any(m.images for m in history):
            return ""
        placeholder = image_placeholder(model)
        if not placeholder:
            raise UserError(f"This chat has images and {model.name} takes none; load a vision-language model, or "
                            "start a new chat.")
        return placeholder

    def _record_turns(self, messages: list[Message]) -> list[dict[str, Any]]:
        """The turns as a reproduce record keeps them: a message with images as OpenAI's content parts (each image
        a data: URL, then the text), so the record's API request sends the same images."""
        return [{"role": m.role, "content": [*({"type": "image_url", "image_url": {"url": data_url(
            self.chats.image(name))}} for name in m.images), {"type": "text", "text": turn["content"]}]}
                if m.images else turn for m, turn in zip(messages, turns_of(messages))]

    def _image_tokens(self, model: LoadedModel, messages: list[Message]) -> list[int]:
        """The tokens each message's images take in ``model``'s prompts (beyond their placeholders)."""
        if not any(m.images for m in messages) or not isinstance(model, SupportsImages):
            return []
        return [sum(model.image_tokens(self._images([m]))) if m.images else 0 for m in messages]

    def _images(self, messages: list[Message]) -> tuple[PromptImage, ...]:
        """The images ``messages`` carry, in order, read from the store."""
        return tuple(read_image(self.chats.image(name), 2**62) for m in messages for name in m.images)

    def _fitted(self, model: LoadedModel, turns: list[dict[str, str]], system_prompt: str, sampling: SamplingParams,
                template: ChatTemplate, mode: ChatMode, continue_last: bool = False, reserve: int = 0,
                extra: Sequence[int] = ()) -> FittedChat:
        """The chat as it will be sent (in ``mode``): rendered, and within the context less ``reserve`` tokens (a
        reply's given start); UserError says why it cannot be."""
        try:
            if model.capabilities.renders_chats:  # the server renders and fits the chat itself
                if mode.chat_like:
                    raise UserError(f"The {mode.name} mode needs a local model: a remote server writes chats with "
                                    "its own template; choose the instruct mode")
                return FittedChat(render_chat_prompt(model.tokenizer, turns, system_prompt,
                                                     continue_last=continue_last, template=template),
                                  chat_messages(turns, system_prompt))
            fitted = fit_chat(model.tokenizer, turns, system_prompt,
                              max(1, token_budget(model, sampling) - sampling.max_new_tokens - reserve), template,
                              continue_last, self.services.settings.get().context_policy, mode, extra)
            limit = sampling.truncation_length
            return replace(fitted, truncation_length=limit if 0 < limit < model.context_length else 0)
        except ChatPromptError as exc:
            raise UserError(str(exc)) from exc

    def _check_fits(self, turns: list[dict[str, str]], system_prompt: str, sampling: SamplingParams,
                    mode: ChatMode) -> None:
        """Before anything is stored or removed: the chat as it would be sent can be (UserError otherwise)."""
        model = self.services.loaded
        if model is not None:
            self._fitted(model, turns, system_prompt, sampling, self.template(model), mode)

    def template(self, model: LoadedModel | None = None) -> ChatTemplate:
        """The instruction template chats use now (ChatModes.template)."""
        return self.modes.template(model)

    # -- modes and characters -----------------------------------------------------------------------------
    def new_chat(self, title: str, system_prompt: str = "", mode: str = INSTRUCT, character: str | None = None,
                 tools: Sequence[str] = ()) -> int:
        """A new chat in ``mode`` with ``character`` (checked first) offering ``tools``, its greeting (names
        filled; chat and chat-instruct only) the first message; the chat's id."""
        chat_mode = self.mode_of(mode, character)
        cid = self.chats.create(title, system_prompt, mode, chat_mode.character.name if chat_mode.character
                                else None, tools).id
        if greeting := chat_mode.greeting():
            self.chats.append(cid, "assistant", greeting)
        return cid

    def mode(self, chat_id: int | None) -> ChatMode:
        """Chat ``chat_id``'s mode now (ChatModes.mode)."""
        return self.modes.mode(chat_id)

    def mode_of(self, mode: str, character: str | None) -> ChatMode:
        """``mode`` with ``character`` (ChatModes.mode_of)."""
        return self.modes.mode_of(mode, character)

    def command(self) -> str:
        """chat-instruct's command now (ChatModes.command)."""
        return self.modes.command()

    def _store_reply(self, cid: int, target: Message | None, before: ReplyStart,
                     events: Streamed, request: GenerationRequest, model: LoadedModel,
                     template: ChatTemplate | None = None, fitted: FittedChat | None = None,
                     mode: ChatMode | None = None) -> Iterator[ChatView]:
        """Store the streamed reply as it grows (after ``before``) and show it: a view at most every
        ``view_interval`` (the tokens between go with the next; the first text and the end at once), each stored
        before it is shown. The chat's earlier messages are read and built once, so a token costs the same
        however long the chat is."""
        base, ids, rows = before.text, list(before.token_ids), list(before.rows)
        head = self.library.view(cid)  # title, system prompt and the earlier messages stay while it streams
        earlier = head.messages if target is None else head.messages[:-1]  # (a stored target: the last, no calls)
        pace = Pace(self.view_interval)

        def keep(text: str, event: GenerationEvent) -> ChatView | None:
            nonlocal target, ids, rows
            ids += event.token_ids
            rows += token_rows(event.logprobs)
            final = event.finish_reason is not None
            if not (event.text or final) or not pace.due(now=final or target is None):
                return None
            content = base + text
            stat = final_stats(event, request, model, template, before, ids, rows, fitted, mode) if final else None
            if target is None:
                target = self.chats.append(cid, "assistant", content, stats=stat)
            else:
                self.chats.update(target.id, content=content, stats=stat)
            return replace(head, messages=[*earlier, {"role": "assistant", "content": content}],
                           stats=stat.summary if stat is not None else "generating…", replying=not final)

        try:
            for text, event in events:
                view = keep(text, event)
                if view is not None:
                    yield view
        except GeneratorExit:  # the tab was closed or reloaded mid-reply: stored as Stop stores it, then gone
            try:
                for text, event in itertools.chain([events.send(STOP)], events):
                    keep(text, event)
            except (StopIteration, UserError):
                pass
            raise
