"""InsightController: the Insight tab's behaviour: the prompt's tokens, the next-token distribution under the
current parameters, re-running a reproduce record, and perplexity kept for comparison."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from loaders.base import Progress
from webui.chat.modes import ChatMode
from webui.controllers.errors import UserError
from webui.engine import EngineError, SamplingParams
from webui.engine.sampling import active_samplers
from webui.insight import InsightUnavailable, NextToken, PromptInspection, inspect_prompt, next_tokens, perplexity
from webui.images import image_placeholder
from webui.reproduce import RecordError, parse_record
from webui.services import Services
from webui.counts import counted

TOP = 20
PERPLEXITY_COLUMNS = ["model", "loader", "text", "tokens", "perplexity", "window", "when"]


def shown_token(token: str) -> str:
    """A token as plain text (spaces and newlines made visible), safe inside Markdown code."""
    return token.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣").replace("`", "ˋ") or "∅"


@dataclass(frozen=True)
class NextTokens:
    tokens: list[NextToken]
    steps: list[str]
    """The steps that shaped the "after" column, in the order they ran."""

    @property
    def masked(self) -> int:
        """How many of the tokens the output constraint masks."""
        return sum(t.masked for t in self.tokens)

    @property
    def summary(self) -> str:
        first, cut, masked = self.tokens[0], sum(not t.kept for t in self.tokens), self.masked
        shaped = (f"Shaped by, in order: {' → '.join(f'`{s}`' for s in self.steps)}." if self.steps
                  else "No sampler is set: the model's own distribution.")
        by_constraint = f" ({masked} masked by the output constraint)" if masked else ""
        return (f"Top token `{shown_token(first.token)}` ({first.probability:.1%}). The current parameters cut "
                f"{cut} of these {len(self.tokens)}{by_constraint}. {shaped}")

    def rows(self) -> list[list]:
        return [[shown_token(t.token), t.token_id, round(t.probability, 4), round(t.after, 4), _status(t)]
                for t in self.tokens]


def _status(token: NextToken) -> str:
    if token.masked:
        return "masked by the constraint"
    return "kept" if token.kept else "cut"


class InsightController:
    def __init__(self, services: Services) -> None:
        self.services = services

    def inspect(self, text: str, chat: bool, system_prompt: str, mode: str = "instruct",
                character: str | None = None) -> PromptInspection:
        """The prompt as the model reads it: ``text`` as it is, or (``chat``) as a message in ``mode`` (as
        ``character``) with the Chat tab's instruction template."""
        try:
            chat_mode = ChatMode(mode, self.services.characters.get(character) if character else None)
            model = self.services.loaded
            template = None
            if chat and chat_mode.chat_like and model is not None and not model.capabilities.renders_chats:
                template = self.services.templates.resolve(self.services.settings.get().chat_template, model.tokenizer)
            return inspect_prompt(model, text, chat, system_prompt, chat_mode, template)
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc

    def next_tokens(self, text: str, chat: bool, system_prompt: str, params: SamplingParams) -> NextTokens:
        try:
            found = next_tokens(self.services.engine, text, chat, params, TOP, system_prompt)
            return NextTokens(found, active_samplers(params))
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc

    def rerun(self, record_text: str) -> tuple[str, str]:
        """(output, note) of a pasted reproduce record run on the loaded model."""
        try:
            record = parse_record(record_text or "")
            slot = self.services.in_use()  # once: the model that tokenizes is the one that runs
            if slot is None:
                raise RecordError("no model is loaded; load the record's model first")
            model = slot.model
            result = slot.engine.generate(record.request(model.tokenizer, image_placeholder(model)))
        except (RecordError, EngineError, ValueError) as exc:
            raise UserError(str(exc)) from exc
        note = "" if model.name == record.model else (
            f"Note: the record was made with **{record.model}**; **{model.name}** is loaded now. ")
        if record.other_draw:
            note += ("Note: this record's sampled tokens were drawn the way versions before the batched sampling "
                     "stage drew them; the same seed now draws other tokens (greedy records repeat exactly). ")
        given = " (after the reply's given start)" if record.continue_from else ""
        return record.reply(model.tokenizer, list(result.token_ids), result.text), (
            f"{note}{counted(result.usage.completion_tokens)}{given} · finish: {result.finish_reason} · "
            f"seed {result.seed}")

    def perplexity(self, text: str, window: float | None, progress: Progress | None = None) -> str:
        """Evaluate and store the loaded model's perplexity on ``text``; the summary line."""
        slot = self.services.in_use()  # once: the model, its adapters and the engine stored are those that ran
        if slot is None:
            raise UserError("No model is loaded; load one in the Model tab to measure its perplexity.")
        model, loras = slot.model, slot.active_loras
        try:
            result = perplexity(slot.engine, text, int(window or 512), loras, progress=progress)
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc
        label = " ".join(text.split())[:40] + ("…" if len(text) > 40 else "")
        self.services.perplexity.add(model.name, model.loader, loras, label, result.tokens, result.nll, result.ppl,
                                     result.window)
        return (f"**Perplexity {result.ppl:.2f}** over {result.tokens:,} tokens (mean NLL {result.nll:.4f}, "
                f"window {result.window}).")

    def perplexity_rows(self) -> list[list]:
        """Every stored evaluation, newest first, to compare models, quantizations and adapters."""
        return [[r.model + "".join(f" +{n}×{w:g}" for n, w in r.loras), r.loader, r.dataset, r.tokens,
                 round(r.ppl, 3), r.window, datetime.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M")]
                for r in self.services.perplexity.list()]

    @staticmethod
    def read_text(path: str | Path) -> str:
        return Path(path).read_text(encoding="utf-8", errors="replace")
