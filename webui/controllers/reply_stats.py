"""What a chat reply stores when it finishes (a ReplyRecord): the run's stats (model, loader, load options,
template, adapters, parameters, usage and timings), its tokens, the start it was given and what was left out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaders.base import LoadedModel
from webui.chat.context import FittedChat
from webui.chat.modes import ChatMode
from webui.chat.reply import GivenStart, ReplyRecord
from webui.chat.templates import ChatTemplate
from webui.controllers.generation import run_stats
from webui.engine import GenerationEvent, GenerationRequest


@dataclass(frozen=True)
class ReplyStart:
    """What a reply is written after: its text so far (a reply continued or branched, or typed to start it), and
    that text's tokens and token rows where the run continues from them."""

    text: str = ""
    token_ids: tuple[int, ...] = ()
    rows: tuple[dict[str, Any], ...] = ()

    @property
    def given(self) -> GivenStart | None:
        """The start as a record keeps it (None: the run wrote the whole reply)."""
        return GivenStart(self.text, self.token_ids) if self.text else None


def final_stats(event: GenerationEvent, request: GenerationRequest, model: LoadedModel,
                template: ChatTemplate | None, before: ReplyStart, ids: list[int], rows: list[dict],
                fitted: FittedChat | None, mode: ChatMode | None = None) -> ReplyRecord:
    """What a finished reply stores: the run's stats (what ran, not what is loaded now), its tokens, the start it
    was given, what was left out, the chat mode it was written in (its character by content)."""
    dropped = fitted.dropped if fitted is not None else 0
    return ReplyRecord(model=model.name, loader=model.loader, load_options=model.load_options,
                       chat_template=template.to_record() if template else None,
                       loras=tuple((name, weight) for name, weight in request.loras),
                       run=run_stats(event, request.params.to_dict()), token_ids=tuple(ids), tokens=tuple(rows),
                       given=before.given, dropped=dropped,
                       dropped_over=fitted.truncation_length if fitted is not None and dropped else 0,
                       chat_mode=mode.to_record() if mode is not None else None)
