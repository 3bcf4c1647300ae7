"""What a chat reply stores when it finishes: the run's stats (model, loader, load options, template, adapters,
parameters, usage and timings), its tokens, the start it was given and what was left out to fit."""

from __future__ import annotations

from typing import Any

from loaders.base import LoadedModel
from webui.chat.context import FittedChat
from webui.chat.templates import ChatTemplate
from webui.controllers.generation import stats_text
from webui.engine import GenerationEvent, GenerationRequest, SamplingParams


def reply_stats(event: GenerationEvent, params: SamplingParams, model: LoadedModel, loras=(),
                template: ChatTemplate | None = None) -> dict[str, Any]:
    u, t = event.usage, event.timings
    return {"model": model.name, "loader": model.loader, "load_options": getattr(model, "load_options", {}),
            "chat_template": template.to_record() if template else None,
            "loras": [list(x) for x in loras],
            "completion_tokens": u.completion_tokens, "prompt_tokens": u.prompt_tokens,
            "cached_tokens": u.cached_tokens, "guidance_tokens": u.guidance_tokens,
            "time_to_first_token": t.first_token, "tokens_per_second": t.tokens_per_second,
            "finish_reason": event.finish_reason, "stop_string": event.stop_string, "seed": event.seed,
            "params": params.to_dict(),
            "summary": f"{stats_text(event)} · by {written_by(model.name, model.loader)}"}


def written_by(name: str, loader: str) -> str:
    """The model as a reply's stats name it: "NAME (loader)"."""
    return f"{name.split('@')[0]} ({loader})"


def final_stats(event: GenerationEvent, request: GenerationRequest, model: LoadedModel,
                template: ChatTemplate | None, before: tuple[str, list[int], list[dict]], ids: list[int],
                rows: list[dict], fitted: FittedChat | None) -> dict[str, Any]:
    """What a finished reply stores: the run's stats, its tokens, the start it was given, what was left out."""
    stat = reply_stats(event, request.params, model, request.loras, template)  # what ran, not what is now
    stat.update(token_ids=ids, tokens=rows)
    base, given = before[0], before[1]
    if base:  # the reply's start was given to this run: a record holds it, and re-runs the rest
        stat["continue_from"] = {"token_ids": list(given), "text": base} if given else {"text": base}
        if given:
            stat["summary"] = f"{len(ids)} tokens, {len(ids) - len(given)} new · " + \
                stat["summary"].split(" · ", 1)[1]
    if fitted is not None and fitted.dropped:
        stat.update(dropped=fitted.dropped, summary=f"{stat['summary']} · {fitted.note}")
        if fitted.truncation_length:
            stat["dropped_over"] = fitted.truncation_length
    return stat
