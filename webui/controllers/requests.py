"""The Requests tab's logic (#33): the API requests kept in the store, newest first, filtered; one shown as the
app sent it and as the model saw it; replayed on the same engine, as sent or with changes, beside the original.

With a UI login only admin users (--ui-admin) see the traffic: it holds every client's prompts.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webui.batch.run.prompts import escape_newlines
from webui.config import AppConfig
from webui.controllers.errors import UserError
from webui.services import Services
from webui.store.requests import CapturedRequest
from webui.fsutil import scratch_folder

COLUMNS = ["id", "time", "endpoint", "status", "client", "model", "said"]
STATUSES = ["all", "answered (2xx)", "refused (4xx)", "failed (5xx)"]
ENDPOINTS = ["all", "chat/completions", "completions", "responses", "messages"]


@dataclass
class Shown:
    """One kept request as the tab shows it."""

    summary: str  # markdown: endpoint, status, client, model, timings
    sent: str  # JSON: the body as the app sent it
    prompt: str  # the prompt as the model saw it (after the chat template)
    params: str  # JSON: the parameters as resolved (those not at their neutral value)
    sources: str  # markdown: where each of them came from (the request, its preset, the server's default)
    reply: str  # the answer's text (each choice's content, calls or the error's message)


def reply_text(response: Any) -> str:
    """What an answer said: each choice's content (and tool calls), or the error's message."""
    if not isinstance(response, dict):
        return "" if response is None else str(response)
    if "error" in response:
        error = response["error"]
        return f"error: {error.get('message') if isinstance(error, dict) else error}"
    if response.get("type") == "message":  # Anthropic's Messages API: its content blocks
        return _content(response)
    if isinstance(response.get("output"), list):  # a Responses API response: its messages' text, then its calls
        return "\n".join(_output_text(item) for item in response["output"] if isinstance(item, dict))
    parts = []
    for choice in response.get("choices") or []:
        message = choice.get("message") or {}
        text = message.get("content") if message else choice.get("text")
        calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []]
        prefix = f"[{choice.get('index', 0)}] " if len(response["choices"]) > 1 else ""
        parts.append(prefix + (text or "") + "".join(f"\n→ {call}" for call in calls))
    return "\n\n".join(parts)


def _output_text(item: dict[str, Any]) -> str:
    """A Responses API output item as text: a message's text, a function call written out."""
    if item.get("type") == "function_call":
        return f"→ {item.get('name')}({item.get('arguments', '')})"
    return "".join(p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict))


def _messages(sent: dict[str, Any]) -> Any:
    """A request's chat messages: a chat completion's, or a Responses API request's instructions and input items
    as messages (a function call as the assistant's call, its output as a tool message)."""
    if "messages" in sent or "input" not in sent:
        return sent.get("messages")
    given = sent["input"]
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given if isinstance(given, list) \
        else []
    messages = [{"role": "system", "content": sent["instructions"]}] if isinstance(sent.get("instructions"), str) \
        else []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}]})
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "content": output if isinstance(output, (str, list)) else ""})
        elif isinstance(item, dict) and "role" in item:
            messages.append({"role": item["role"], "content": item.get("content")})
    return messages


def _said(item: CapturedRequest) -> str:
    sent = item.request if isinstance(item.request, dict) else {}
    messages = _messages(sent)
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        said = messages[-1].get("content")
        said = _content(messages[-1]) if isinstance(said, list) else said
    else:
        said = sent.get("prompt", item.request)
    text = said if isinstance(said, str) else json.dumps(said, ensure_ascii=False)
    return text[:80]


def _sources(sources: Any) -> str:
    """"From the request: temperature, max_new_tokens · from preset Creative: top_p" (grouped by source)."""
    if not isinstance(sources, dict) or not sources:
        return ""
    grouped: dict[str, list[str]] = {}
    for name, source in sources.items():
        grouped.setdefault(str(source), []).append(f"`{name}`")
    return " · ".join(f"from the {source}: {', '.join(names)}" if source in ("request", "server default") else
                      f"from {source}: {', '.join(names)}" for source, names in grouped.items())


def _in_effect(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters not at their neutral value (max_new_tokens always: it bounds every reply)."""
    from webui.engine.params import SamplingParams

    neutral = SamplingParams().to_dict()
    return {k: v for k, v in params.items() if k == "max_new_tokens" or neutral.get(k, object()) != v}


def _content(message: dict[str, Any]) -> str:
    """A message's text: its content (parts or Anthropic's blocks joined), then its tool calls written out."""
    content = message.get("content")
    calls = [f"→ {c['function']['name']}({c['function'].get('arguments', '')})"
             for c in message.get("tool_calls") or [] if isinstance(c, dict) and isinstance(c.get("function"), dict)]
    if isinstance(content, list):
        blocks = [p for p in content if isinstance(p, dict)]
        calls += [f"→ {b.get('name')}({json.dumps(b.get('input'), ensure_ascii=False)})" for b in blocks
                  if b.get("type") == "tool_use"]  # Anthropic's calls
        content = "".join(_block_text(p) for p in blocks)
    return "\n".join(part for part in (content or "", *calls) if part)


def _block_text(block: dict[str, Any]) -> str:
    """A content part's text (an Anthropic tool_result block's written out as one)."""
    if block.get("type") == "tool_result":
        return f"[tool result] {_content(block)}"
    text = block.get("text", "")
    return text if isinstance(text, str) else ""


def _status_matches(status: int, wanted: str) -> bool:
    return wanted == STATUSES[0] or str(status)[0] == {STATUSES[1]: "2", STATUSES[2]: "4", STATUSES[3]: "5"}[wanted]


def sees_api_traffic(config: AppConfig, user: str | None) -> bool:
    """Whether ``user`` may see what the API's clients sent (kept requests, batch jobs): anyone without a UI login,
    an admin user with one."""
    return not config.ui_users or (user is not None and user in config.ui_admins)


class RequestsController:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.requests

    def allowed(self, user: str | None) -> bool:
        return sees_api_traffic(self.services.config, user)

    def check(self, user: str | None) -> None:
        if not self.allowed(user):
            raise UserError("Only admin users see the API's traffic (the server's --ui-admin names them).")

    def note(self, user: str | None) -> str:
        """The line above the table: whether requests are being kept, and how to get them."""
        if not self.allowed(user):
            return "Only admin users see the API's traffic (the server's `--ui-admin` names them)."
        if not self.services.config.api:
            return "The API is off: start the workbench with `--api` to serve apps (and keep their requests here)."
        count, size = self.store.count()
        kept = f"{count} kept ({size / 2**20:.1f} MB of {self.store.retention.max_bytes / 2**20:.0f} MB, " \
               f"at most {self.store.retention.max_requests} requests)"
        return (f"Keeping every API request. {kept}." if self.store.capture_all else
                f"Keeping only requests that ask `store: true`; turn on keeping everything to see every request "
                f"an app sends. {kept}.")

    def capture_switch(self, user: str | None) -> dict[str, Any]:
        """The "Keep every API request" switch as ``user`` sees it: its value, and whether they can change it (an
        admin can; anyone else sees it read-only, with why)."""
        if self.allowed(user):
            return {"value": self.store.capture_all, "interactive": True, "info": None}
        return {"value": self.store.capture_all, "interactive": False,
                "info": "Read-only: only admin users (the server's --ui-admin) turn this on or off."}

    def set_capture(self, on: bool, user: str | None) -> None:
        self.check(user)
        self.store.capture_all = bool(on)

    def table(self, user: str | None, text: str = "", status: str = STATUSES[0], model: str = "",
              endpoint: str = ENDPOINTS[0], client: str = "", limit: int = 200) -> list[list[Any]]:
        """The newest kept requests matching the filters, one row each (COLUMNS): text in the body, status, model,
        endpoint, client (an API key's label)."""
        if not self.allowed(user):
            return []
        narrowed = text or status != STATUSES[0] or endpoint != ENDPOINTS[0]
        page = self.store.page(client=client.strip() or None, model=model or None, order="desc",
                               limit=10_000 if narrowed else limit)
        rows = []
        for item in page.items:
            if not _status_matches(item.status, status):
                continue
            if endpoint != ENDPOINTS[0] and item.endpoint != "/v1/" + endpoint:
                continue
            if text and text.lower() not in json.dumps(item.request, ensure_ascii=False).lower():
                continue
            when = datetime.datetime.fromtimestamp(item.created).strftime("%H:%M:%S")
            rows.append([item.id, when, item.endpoint.removeprefix("/v1/"), item.status, item.client or "-",
                         item.model or "-", _said(item)])
            if len(rows) >= limit:
                break
        return rows

    def get(self, request_id: str | None, user: str | None) -> CapturedRequest:
        self.check(user)
        item = self.store.get(request_id) if request_id else None
        if item is None:
            raise UserError("Choose a request in the table first (it may have been dropped past the retention "
                            "budget, or deleted).")
        return item

    def show(self, request_id: str | None, user: str | None) -> Shown:
        item = self.get(request_id, user)
        d = item.details
        timing = " · ".join(part for part in (
            f"first token {d['ttft']:.2f}s" if d.get("ttft") is not None else "",
            f"took {d['duration']:.2f}s" if d.get("duration") is not None else "",
            f"finish {d['finish']}" if d.get("finish") else "",
            f"replay of `{d['replay_of']}`" if d.get("replay_of") else "",
            "stored (store: true)" if item.stored else "") if part)
        summary = (f"**{item.endpoint}** · status {item.status} · client {item.client or '-'} · model "
                   f"{item.model or '-'}{' on ' + d['loader'] if d.get('loader') else ''}"
                   + (f" · adapters {', '.join(n for n, _ in d['loras'])}" if d.get("loras") else "")
                   + (f"\n\n{timing}" if timing else ""))
        prompt = d.get("prompt")
        return Shown(summary, json.dumps(item.request, ensure_ascii=False, indent=2) if not isinstance(
            item.request, str) else item.request, prompt if isinstance(prompt, str) else json.dumps(
            prompt, ensure_ascii=False, indent=2) if prompt is not None else "(refused before the model saw it)",
            json.dumps(_in_effect(d.get("params") or {}), ensure_ascii=False, indent=2), _sources(d.get("sources")),
            reply_text(item.response))

    def replay(self, request_id: str | None, changes_text: str, user: str | None) -> CapturedRequest:
        """Send the request again (with the changes, a JSON object of body fields) on the loaded model."""
        from webui.api.body import BodyError, parse_json
        from webui.api.replay import ReplayError, replay

        item = self.get(request_id, user)
        try:
            changes = parse_json(changes_text.encode("utf-8", "surrogatepass"), "the changes text") \
                if changes_text.strip() else {}
        except BodyError as exc:
            raise UserError(f"Changes must be a JSON object of request fields, e.g. {{\"temperature\": 0.9}}: "
                            f"{exc}") from None
        if not isinstance(changes, dict):
            raise UserError('Changes must be a JSON object of request fields, e.g. {"temperature": 0.9}.')
        try:
            return replay(self.services, item, changes)
        except ReplayError as exc:
            raise UserError(str(exc)) from None

    def replay_said(self, request_id: str | None, again: CapturedRequest, user: str | None) -> str:
        """What the page says of ``again``, a replay of ``request_id``: its id, whether its reply is the original's,
        the fields it sent otherwise (each with what the original sent), and its summary."""
        original = self.get(request_id, user)
        same = "the same reply as" if self.show(again.id, user).reply == self.show(original.id, user).reply \
            else "a different reply from"
        changed = changed_fields(original, again)
        what = ("changed " + ", ".join(f"`{k}` {_short(new)} (was {_short(old)})" for k, (old, new) in changed.items())
                if changed else "sent as the original was")
        return f"Replayed as `{again.id}`: {same} the original; {what}. {self.show(again.id, user).summary}"

    def as_text(self, request_id: str | None, user: str | None) -> str:
        """The prompt as the model saw it (for the Notebook, which continues it, and Insight)."""
        item = self.get(request_id, user)
        prompt = item.details.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]  # a completions request with several prompts: the first
        if not isinstance(prompt, str):
            raise UserError(f"{item.id} never reached the model (status {item.status}), so there is no prompt as "
                            f"it saw it; open it in Chat to work on its messages")
        return prompt

    def as_chat(self, request_id: str | None, user: str | None) -> int:
        """A new chat holding the request's messages and the reply it got; its id."""
        item = self.get(request_id, user)
        sent = item.request if isinstance(item.request, dict) else {}
        messages = _messages(sent)
        if not isinstance(messages, list) or not messages:
            raise UserError(f"{item.id} has no chat messages (a {item.endpoint} request); open it in the Notebook")
        chats = self.services.chats
        systems = [{"content": sent.get("system")}] + [m for m in messages if isinstance(m, dict) and m.get("role") in (
            "system", "developer")]  # (Anthropic's system prompt is a field of its own)
        system = "\n\n".join(text for text in map(_content, systems) if text)
        chat = chats.create(f"API request {item.id}", system)
        for m in messages:
            if not isinstance(m, dict) or m.get("role") in ("system", "developer"):
                continue
            role = "assistant" if m.get("role") == "assistant" else "user"
            text = _content(m) if m.get("role") != "tool" else f"[tool result] {_content(m)}"
            chats.append(chat.id, role, text)
        answered = reply_text(item.response)
        if item.status == 200 and answered:
            chats.append(chat.id, "assistant", answered)
        return chat.id

    def as_batch(self, request_ids: list[str], user: str | None) -> tuple[str, str]:
        """(the Batch tab's prompt lines, a note): each request's prompt as the model saw it, one a line (run raw,
        every request gets the very input it had); requests that never reached the model are left out, said."""
        self.check(user)
        lines, left_out = [], 0
        for request_id in request_ids:
            item = self.store.get(request_id)
            prompt = item.details.get("prompt") if item is not None else None
            prompts = prompt if isinstance(prompt, list) else [prompt]
            texts = [p for p in prompts if isinstance(p, str) and p]
            if not texts or len(texts) < len(prompts):  # never reached the model, or prompts as token ids
                left_out += 1
                continue
            lines += [escape_newlines(p) for p in texts]
        if not lines:
            raise UserError("None of the requests listed reached the model, so there is no prompt to test; "
                            "change the filters so that answered requests are listed.")
        note = f"{len(lines)} prompt(s) from the requests listed, as the model saw them (run raw, no template)"
        left = f"; {left_out} left out (refused, or prompts sent as token ids)." if left_out else "."
        return "\n".join(lines), note + left

    def as_promptfoo(self, request_ids: list[str], user: str | None) -> tuple[Path, str]:
        """(a promptfooconfig.yaml in a new temporary folder, a note): the requests as a promptfoo suite, each one
        prompt with its parameters (webui.api.suite); the note says what was left out or not carried."""
        from webui.api.suite import promptfoo_suite

        self.check(user)
        items = [item for i in request_ids if (item := self.store.get(i)) is not None]
        try:
            suite = promptfoo_suite(items)
        except ValueError as exc:
            raise UserError(f"No promptfoo suite: {exc}. Change the filters so that answered requests are "
                            "listed.") from None
        path = scratch_folder("requests-suite-") / "promptfooconfig.yaml"
        path.write_text(suite.text, encoding="utf-8")
        note = f"{suite.prompts} request(s) as a promptfoo suite (run it with launch.py batch or promptfoo eval)"
        return path, note + (": " + "; ".join(suite.notes) if suite.notes else ".")

    def tokens(self, request_id: str | None, user: str | None, top: int = 5) -> str:
        """The reply's tokens as the token view shows them: each shaded by the probability the model gave it, with
        the ``top`` most likely there, raw and after the request's samplers (recomputed now over the prompt and the
        reply on the model that answered, the processors replayed with the parameters as resolved)."""
        from loaders.base import ModelLoadError
        from webui.engine import SamplingParams
        from webui.insight import InsightUnavailable, reply_logprobs
        from webui.token_view import render, token_rows

        item = self.get(request_id, user)
        prompt, replies = item.details.get("prompt"), item.details.get("token_ids") or []
        if not isinstance(prompt, str) or not replies or not replies[0]:
            raise UserError(f"{item.id} has no reply tokens kept (refused, or kept before tokens were)")
        try:
            params = SamplingParams.from_dict(item.details.get("params") or {}, source=f"{item.id}'s parameters")
            slot = self.services.models.slot(item.model)
            ids = slot.model.tokenizer.encode(prompt, add_special_tokens=item.endpoint == "/v1/completions")
            scored = reply_logprobs(slot.engine, ids, list(replies[0]), params, top,
                                    tuple((n, float(w)) for n, w in item.details.get("loras") or []))
        except (ModelLoadError, InsightUnavailable, ValueError) as exc:
            raise UserError(f"The tokens are recomputed on the model that answered ({item.model}): {exc}") from None
        return render(token_rows(scored), branchable=False)

    def delete(self, request_id: str | None, user: str | None) -> str:
        item = self.get(request_id, user)
        self.store.delete(item.id)
        return f"Deleted {item.id}."


REPLAY_SENDS = frozenset(("stream", "stream_options", "background"))
"""Fields a replay sends its own way whatever the changes (answered whole, not streamed or in the background)."""


def changed_fields(original: CapturedRequest, again: CapturedRequest) -> dict[str, tuple[Any, Any]]:
    """The body fields ``again`` sent otherwise than ``original``: name -> (original's, again's; None: not sent);
    the model only where another model answered."""
    before = original.request if isinstance(original.request, dict) else {}
    after = again.request if isinstance(again.request, dict) else {}
    return {key: (before.get(key), after.get(key)) for key in sorted(set(before) | set(after))
            if key not in REPLAY_SENDS and before.get(key) != after.get(key)
            and (key != "model" or original.model != again.model)}


def _short(value: Any, limit: int = 40) -> str:
    """A field's value in a line: its JSON, cut at ``limit`` characters; 'not sent' for None."""
    if value is None:
        return "not sent"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"
