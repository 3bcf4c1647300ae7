"""NotebookSession: the Notebook tab's behaviour (free-form completion on raw text, named notebooks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from webui.controllers.errors import UserError
from webui.controllers.generation import ActiveRequests, Streamed, stats_text, stream_request, stream_text
from webui.engine import SamplingParams
from webui.models import Slot
from webui.names import InvalidName
from webui.services import Services
from webui.store import StoreError
from webui.token_view import VIEW_TOP, BranchError, branch_request, branched_row, token_rows

PANEL = "notebook"
MAX_UNDO = 20

Key = tuple[str, str]


@dataclass(frozen=True)
class Generation:
    """The last generation, kept so it can be branched: the text before it, the prompt's and its token ids."""

    before: str
    prompt_ids: list[int]
    token_ids: list[int]
    tokens: list[dict[str, Any]]


@dataclass(frozen=True)
class NotebookView:
    text: str
    stats: str = ""
    undo: list[str] = field(default_factory=list)
    """Texts before each generation, newest last (at most MAX_UNDO)."""
    last: Generation | None = None
    """Set on the final view of a generation."""
    branchable: bool = False


class NotebookSession:
    def __init__(self, services: Services, active: ActiveRequests) -> None:
        self.services, self.notebooks, self.active = services, services.notebooks, active

    def names(self) -> list[str]:
        return self.notebooks.list()

    def open(self, name: str | None) -> str | None:
        """The notebook's text; None when ``name`` is not a saved notebook (a new name being typed)."""
        return self.notebooks.get(name) if name and name in self.notebooks.list() else None

    def keep_draft(self, name: str | None, text: str) -> None:
        """Remember the text and name as they are now, saved under a name or not, for the next page load."""
        self.services.settings.update(notebook_text=text or "", notebook_name=name or "")

    def draft(self) -> tuple[str, str]:
        """(name, text) the Notebook showed last."""
        settings = self.services.settings.get()
        return settings.notebook_name, settings.notebook_text

    def save(self, name: str | None, text: str) -> str:
        """Save under ``name``; the name as stored."""
        if not name or not name.strip():
            raise UserError("Type a name for the notebook first.")
        try:
            self.notebooks.save(name, text)
        except (InvalidName, StoreError, OSError) as exc:
            raise UserError(f"Could not save the notebook: {exc}") from exc
        return name.strip()

    def delete(self, name: str | None) -> None:
        if not name:
            raise UserError("Choose a notebook to delete first.")
        try:
            self.notebooks.delete(name)
        except (InvalidName, StoreError) as exc:
            raise UserError(str(exc)) from exc

    def undo(self, history: list[str]) -> tuple[str, list[str]]:
        """(the text before the last generation, the history left)."""
        if not history:
            raise UserError("Nothing to undo: every generation so far has been undone.")
        return history[-1], history[:-1]

    def stop(self, key: Key) -> bool:
        return self.active.cancel(key)

    def generate(self, name: str | None, text: str, history: list[str], sampling: SamplingParams,
                 key: Key) -> Iterator[NotebookView]:
        """Stream the model's continuation of ``text``; a named notebook is saved when it ends."""
        if not text.strip():
            raise UserError("The notebook is empty; type some text for the model to continue.")
        slot = self._ready(key)
        model = slot.model
        local = model.capabilities.stepped  # the token views: each token's id and alternatives
        events = stream_text(slot, self.active, key, text, sampling, True,
                             logprobs=VIEW_TOP if local else None)
        start = Generation(text, model.tokenizer.encode(text) if local else [], [], [])
        yield from self._stream(name, start, "", events, (history + [text])[-MAX_UNDO:], local)

    def branch(self, name: str | None, text: str, history: list[str], last: Generation | None, position: int,
               token_id: int, sampling: SamplingParams, key: Key) -> Iterator[NotebookView]:
        """Continue the last generation from ``position`` with ``token_id`` in place of the model's token."""
        slot = self._ready(key)
        model = slot.model
        try:
            if not model.capabilities.stepped:
                raise BranchError("branching needs a local model: load one in the Model tab")
            if last is None:
                raise BranchError("generate something first")
            req = branch_request(last.prompt_ids, last.token_ids, position, token_id, sampling,
                                 loras=slot.active_loras, logprobs=VIEW_TOP)
        except BranchError as exc:
            raise UserError(str(exc)) from exc
        ids = last.token_ids[:position] + [token_id]
        rows = last.tokens[:position] + [branched_row(last.tokens[position], token_id)]
        history, prefix = (history + [text])[-MAX_UNDO:], model.tokenizer.decode(ids)
        if req is None:  # the alternative was the generation's last allowed token
            done = Generation(last.before, last.prompt_ids, ids, rows)
            yield NotebookView(last.before + prefix, "finish: length (branched at the last token)", history, done,
                               True)
            return
        events = stream_request(slot, self.active, key, req)
        yield from self._stream(name, Generation(last.before, last.prompt_ids, ids, rows), prefix, events, history,
                                True)

    def _ready(self, key: Key) -> Slot:
        """The model the caller uses (its slot: model, engine, adapters, resolved once for the whole generation),
        when nothing runs for ``key``."""
        slot = self.services.in_use()
        if slot is None:
            raise UserError("No model is loaded; load one in the Model tab.")
        if self.active.busy(key):
            raise UserError("A generation is still running here; wait for it or press Stop.")
        return slot

    def _stream(self, name: str | None, start: Generation, prefix: str,
                events: Streamed, history: list[str],
                branchable: bool) -> Iterator[NotebookView]:
        """Views as text arrives after ``start.before`` + ``prefix``; the last one carries the Generation."""
        ids, rows, final = list(start.token_ids), list(start.tokens), start.before + prefix
        for generated, event in events:
            ids += event.token_ids
            rows += token_rows(event.logprobs)
            final = start.before + prefix + generated
            if event.finish_reason is not None:
                done = Generation(start.before, start.prompt_ids, ids, rows)
                if name:
                    self.save(name, final)
                yield NotebookView(final, stats_text(event), history, done, branchable)
            elif event.text:
                yield NotebookView(final, "generating…", history)
