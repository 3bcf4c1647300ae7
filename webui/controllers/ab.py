"""ABController: one prompt under two settings (current parameters or a preset, with or without an adapter, on
the model in use or another loaded model), streamed side by side. Both requests are submitted together, so on
one model they share the engine's decode steps, and on two they generate at the same time.

A side's adapter runs with that side's request only, as a batch cell's or an API request's does: running A/B
loads it into the model if it is not there yet, but never makes it active, so the model's attached adapters (the
status line's, those Chat and the API run with) stay as they were."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from loaders.base import LoaderError, ModelLoadError, attached_loras, is_lora_model
from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.controllers.errors import UserError
from webui.controllers.generation import ActiveRequests, lora_text, stats_text
from webui.engine import EngineError, GenerationError, GenerationRequest, SamplingParams
from webui.engine.stream import Interleaved, RequestStream
from webui.names import InvalidName
from webui.presets import PresetError
from webui.models import Slot
from webui.services import Services

PANEL = "ab"
CURRENT = "current parameters"
NO_ADAPTER = "no adapter"
IN_USE = "model in use"


@dataclass(frozen=True)
class Side:
    parameters: str | None
    """CURRENT or a preset's name."""
    adapter: str | None
    """NO_ADAPTER or an adapter's name: one loaded into the side's model, or one in the loras dir that fits it (loaded
    for this side's request, not made active). Applied at the weight it was attached with, else 1."""
    model: str | None = IN_USE
    """IN_USE or a loaded model's name."""


class ABController:
    def __init__(self, services: Services, active: ActiveRequests) -> None:
        self.services, self.active = services, active

    def choices(self) -> tuple[list[str], list[str], list[str]]:
        """(parameter choices, adapter choices, model choices) for each side; the adapters loaded into every loaded
        model, then those in the loras dir that fit one."""
        models = self.services.models
        slots = [s for s in models.slots() if is_lora_model(s.model)]
        adapters = dict.fromkeys([*(n for s in slots for n in attached_loras(s.model)),
                                  *(e.name for s in slots for e in models.compatible_loras(s.name))])
        return ([CURRENT, *self.services.presets.names()], [NO_ADAPTER, *adapters],
                [IN_USE, *self.services.models.names()])

    def default_sides(self) -> tuple[Side, Side]:
        """A: the current parameters; B: the first preset, so Run both compares something from the start."""
        presets = self.services.presets.names()
        return Side(CURRENT, NO_ADAPTER), Side(presets[0] if presets else CURRENT, NO_ADAPTER)

    def run(self, prompt: str, chat: bool, sides: tuple[Side, Side], current: SamplingParams,
            session: str) -> Iterator[tuple[list[str], list[str]]]:
        """(texts, notes) of both sides as they stream; ``session`` names the browser tab (for Stop)."""
        if self.services.in_use() is None:
            raise UserError("No model is loaded; load one in the Model tab.")
        if not prompt.strip():
            raise UserError("Type a prompt first.")
        slots = [self._slot(side, name) for side, name in zip(sides, "AB")]
        chosen = [self._sampling(side, name, current) for side, name in zip(sides, "AB")]
        loras = [self._loras(side, name, slot) for side, name, slot in zip(sides, "AB", slots)]
        requests = [self._request(name, sampling, prompt, chat, slot, adapters)
                    for name, (sampling, _), slot, adapters in zip("AB", chosen, slots, loras)]
        streams = []
        try:
            for slot, request in zip(slots, requests):
                streams.append(slot.engine.submit(request))
        except (EngineError, ValueError) as exc:
            for stream in streams:
                stream.cancel()
            raise UserError(str(exc)) from exc
        yield from self._follow(streams, session, [f"LoRA: {lora_text(adapters) or 'none'} · {length}"
                                                   for adapters, (_, length) in zip(loras, chosen)])

    def _slot(self, side: Side, name: str) -> Slot:
        try:
            return self.services.models.slot(None if side.model in (None, "", IN_USE) else side.model,
                                             self.services.owner)
        except ModelLoadError as exc:
            raise UserError(f"Side {name}: {exc}") from exc

    def stop(self, session: str) -> int:
        return self.active.cancel_session(session, prefix=PANEL)

    def _sampling(self, side: Side, name: str, current: SamplingParams) -> tuple[SamplingParams, str]:
        """(the side's parameters, which max_new_tokens it uses and whose). A preset sets the sampling, not the
        length: the Parameters tab's max_new_tokens holds unless the preset sets its own."""
        if not side.parameters:
            raise UserError(f"Choose parameters for side {name} (a preset or the current parameters).")
        if side.parameters == CURRENT:
            return current, f"max_new_tokens {current.max_new_tokens} (Parameters tab)"
        try:
            preset = self.services.presets.get(side.parameters).params
        except (PresetError, InvalidName) as exc:
            raise UserError(f"Side {name}: {exc}") from exc
        if "max_new_tokens" in preset.changed():
            return preset, f"max_new_tokens {preset.max_new_tokens} (preset {side.parameters})"
        try:
            return (preset.replace(max_new_tokens=current.max_new_tokens),
                    f"max_new_tokens {current.max_new_tokens} (Parameters tab)")
        except ValueError as exc:  # e.g. the preset's min_new_tokens above the tab's max_new_tokens
            raise UserError(f"Side {name}: preset {side.parameters} with the Parameters tab's max_new_tokens: "
                            f"{exc}") from exc

    def _loras(self, side: Side, name: str, slot: Slot) -> tuple[tuple[str, float], ...]:
        """The side's adapter for its request alone: loaded into the model if need be, never made active."""
        if side.adapter in (None, "", NO_ADAPTER):
            return ()
        if side.adapter not in attached_loras(slot.model):
            try:
                self.services.models.load_lora(side.adapter, slot.name, self.services.owner)
            except (LoaderError, InvalidName) as exc:
                raise UserError(f"Side {name}: the adapter '{side.adapter}' cannot run on {slot.name}: {exc}; "
                                "choose another") from exc
        return ((side.adapter, slot.loras.get(side.adapter, 1.0)),)  # as attached in the Model tab, if it is

    def _request(self, name: str, sampling: SamplingParams, prompt: str, chat: bool, slot: Slot,
                 loras: tuple[tuple[str, float], ...]) -> GenerationRequest:
        messages, text = None, prompt
        if chat:
            try:
                messages = chat_messages([{"role": "user", "content": prompt}])
                text = render_chat_prompt(slot.model.tokenizer, messages)
            except ChatPromptError as exc:
                raise UserError(f"Side {name}: {exc}") from exc
        return GenerationRequest(text, sampling, add_special_tokens=messages is None, loras=loras, messages=messages)

    def _follow(self, streams: list[RequestStream], session: str, lengths: list[str]) -> Iterator[tuple[list[str], list[str]]]:
        texts, notes = ["", ""], [f"generating… · {length}" for length in lengths]
        keys = [(session, f"{PANEL}-{id(s)}") for s in streams]
        for key, s in zip(keys, streams):
            self.active.start(key, s)
        try:
            for index, item in Interleaved(streams):
                if isinstance(item, GenerationError):
                    notes[index] = f"error: {item}"
                else:
                    texts[index] += item.text
                    if item.finish_reason is not None:
                        notes[index] = f"{stats_text(item)} · {lengths[index]}"
                yield list(texts), list(notes)
        finally:
            for key, s in zip(keys, streams):
                self.active.finish(key, s)
