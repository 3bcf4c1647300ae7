"""Reproduce records: everything that decides an output, as JSON, a curl command and an openai snippet.

A record names the model, loader and adapters, every sampling parameter with
the seed actually used, and the prompt (the chat messages, or raw text). Run
again on the same model — here, over the API, or in the batch runner — it
gives the same tokens.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from webui.engine import GenerationRequest, InvalidParameter, SamplingParams
from webui.engine.params import specs

FORMAT = "llm-workbench.record"


class RecordError(ValueError):
    pass


@dataclass(frozen=True)
class ReproduceRecord:
    model: str
    params: dict[str, Any]  # every SamplingParams field; "seed" is the seed that was used
    messages: list[dict[str, str]] | None = None  # a chat (the model's template applies), or
    prompt: str | None = None  # raw text
    loader: str = "transformers"
    loras: list[list] = field(default_factory=list)  # [[name, weight], ...]
    chat_template: dict[str, str] | None = None  # {"name", "source"} when not the model's own

    def to_json(self) -> str:
        return _dumps({"format": FORMAT, "version": 1, **asdict(self)})

    def sampling(self) -> SamplingParams:
        try:
            return SamplingParams.from_dict(self.params, source="the record")
        except InvalidParameter as exc:
            raise RecordError(str(exc)) from exc

    def request(self, tokenizer) -> GenerationRequest:
        """The engine request this record describes (the chat rendered with ``tokenizer``'s template)."""
        from webui.chat import render_chat_prompt

        loras = tuple((str(n), float(w)) for n, w in self.loras)
        if self.messages is not None:
            prompt = render_chat_prompt(tokenizer, self.messages, template=self.template())
            return GenerationRequest(prompt, self.sampling(), add_special_tokens=False, messages=self.messages,
                                     loras=loras)
        return GenerationRequest(self.prompt or "", self.sampling(), loras=loras)

    def template(self):
        """The record's chat template (None: the model's own); RecordError when it is not one."""
        from webui.chat.templates import TemplateError, check_source, from_record

        try:
            template = from_record(self.chat_template)
            if template is not None:
                check_source(template.source)
        except TemplateError as exc:
            raise RecordError(f"chat_template: {exc}") from exc
        return template

    def api_body(self) -> tuple[str, dict[str, Any]]:
        """(route, JSON body) of the equivalent OpenAI API request."""
        body = {"model": self.model, **self.sampling().api_body()}
        if self.loras:  # every adapter at the record's weight (not the weight attached now)
            body["loras"] = [[str(n), float(w)] for n, w in self.loras]
        if self.messages is not None:
            template = {"chat_template": self.chat_template["source"]} if self.chat_template else {}
            return "/chat/completions", {**body, "messages": self.messages, **template}
        return "/completions", {**body, "prompt": self.prompt}

    def curl(self, base_url: str = "http://127.0.0.1:5000/v1") -> str:
        route, body = self.api_body()
        return (f"curl {base_url}{route} -H 'Content-Type: application/json' "
                f"-H \"Authorization: Bearer $API_KEY\" -d {shlex.quote(json.dumps(body, ensure_ascii=False))}")

    def openai_snippet(self, base_url: str = "http://127.0.0.1:5000/v1") -> str:
        route, body = self.api_body()
        standard = {k: v for k, v in body.items() if k not in _EXTRAS}
        extra = {k: v for k, v in body.items() if k in _EXTRAS}
        call = "client.chat.completions.create" if route == "/chat/completions" else "client.completions.create"
        args = ",\n    ".join(f"{k}={v!r}" for k, v in standard.items())
        if extra:
            args += f",\n    extra_body={extra!r}"
        return (f"from openai import OpenAI\n\nclient = OpenAI(base_url={base_url!r}, api_key=\"...\")\n"
                f"reply = {call}(\n    {args},\n)\n")


_EXTRAS = {"loras", "chat_template", *(spec.api_name or name for name, spec in specs().items() if not spec.openai)}


def parse_record(text: str) -> ReproduceRecord:
    """A record from its JSON; what is wrong is said plainly."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"the record is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError(f"this is not a workbench record (expected \"format\": \"{FORMAT}\")")
    if not isinstance(data.get("params"), dict) or not isinstance(data.get("model"), str):
        raise RecordError("a record needs 'model' (a string) and 'params' (an object)")
    if (data.get("messages") is None) == (data.get("prompt") is None):
        raise RecordError("a record needs either 'messages' (a chat) or 'prompt' (raw text)")
    record = ReproduceRecord(data["model"], data["params"], data.get("messages"), data.get("prompt"),
                             data.get("loader", "transformers"), data.get("loras") or [], data.get("chat_template"))
    record.sampling()  # validates the parameters now
    record.template()
    return record


def record_for_reply(history: list[dict[str, str]], system_prompt: str, stats: dict[str, Any]) -> ReproduceRecord:
    """The record of a stored chat reply: the chat before it as it was sent (without the oldest messages left out
    to fit the context), and the stats saved with it."""
    from webui.chat import chat_messages
    from webui.chat.context import kept_messages

    params = {**stats["params"], "seed": stats.get("seed", stats["params"].get("seed"))}
    sent = kept_messages(chat_messages(history, system_prompt), stats.get("dropped", 0))
    return ReproduceRecord(stats.get("model", "?"), params, sent,
                           loader=stats.get("loader", "transformers"), loras=stats.get("loras", []),
                           chat_template=stats.get("chat_template"))


def record_for_batch_row(model: str, spec: dict[str, Any], row: Any, loader: str = "transformers") -> ReproduceRecord:
    """The record of one batch result row: the run's model, loader, system prompt and raw flag, the row's setting
    (its parameters with the seed the cell used, and the adapters of its "lora" axis value) and prompt.
    ``loader``: for runs stored before the run kept its loader."""
    loader = spec.get("loader") or loader
    from webui.chat import chat_messages

    setting = next((s for s in spec.get("settings", []) if s.get("label") == row.setting), {})
    params = {**row.params, "seed": row.seed}
    loras = [list(x) for x in setting.get("loras", [])]
    if spec.get("raw"):
        return ReproduceRecord(model, params, prompt=row.prompt, loader=loader, loras=loras)
    messages = chat_messages([{"role": "user", "content": row.prompt}], spec.get("system_prompt", ""))
    return ReproduceRecord(model, params, messages, loader=loader, loras=loras, chat_template=spec.get("chat_template"))


def _dumps(value: Any, indent: str = "") -> str:
    """JSON with two-space indents, a list of plain values on one line (a sampler order is one line, not 21)."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = ",\n".join(f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dumps(v, inner)}" for k, v in value.items())
        return "{\n" + items + "\n" + indent + "}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)
