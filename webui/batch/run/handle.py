"""A batch run in progress (:class:`RunHandle`): its cells, the rows kept so far, progress and the time-left
bound, cancel; what the runner (webui.batch.run.runner) gives the run's threads and the UI and API read."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from loaders.base import EmbeddingModel
from webui.batch.asserts.classify import Classifiers
from webui.batch.run.grid import Cell
from webui.batch.run.judge import (
    RemoteJudge, judge_budget,
)
from webui.batch.run.results import ResultRow
from webui.engine import Engine
from webui.tools import ToolBox


@dataclass
class RunHandle:
    """A run in progress: progress, the rows so far, cancel."""

    run_id: int
    cells: list[Cell]
    started: float = field(default_factory=time.monotonic)
    status: str = "running"
    results: dict[int, ResultRow] = field(default_factory=dict)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    _streams: set = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    keys: list[str] = field(default_factory=list)
    """Each cell's response-cache key."""
    use_cache: bool = True
    judge: Any = None
    """(the judge's engine, user text -> the prompt as the judge reads it) for llm-rubric asserts (None: remote)."""
    judge_prompt: str = ""
    remote_judge: RemoteJudge | None = None
    judge_tokens: int | None = None
    """The most tokens the judge writes per grading step (None: each step's own budget)."""
    slots: dict = field(default_factory=dict)
    """The loaded model (a Slot) each setting's model names runs on."""
    embedder: tuple[Engine, EmbeddingModel] | None = None
    """(its engine, the model) that embeds outputs and references for similar asserts, and queries and generated
    questions for answer-relevance (None: none, or no model gives embeddings: similar scores by trigrams,
    answer-relevance fails saying so)."""
    classifiers: Classifiers | None = None
    """The run's text-classification models for classifier asserts, each loaded once (None: the run has none)."""
    streaming: dict[int, int] = field(default_factory=dict)
    """Tokens each cell still generating has made so far (by cell index), so progress moves before cells end."""
    judging: dict[int, int] = field(default_factory=dict)
    """Tokens the loaded judge has written so far on each cell not yet kept (by cell index): the time-left bound
    counts them as work done and takes them from what the cell's judges may still write."""
    toolbox: ToolBox | None = None
    """The workbench's own tools, for settings whose calls they answer (closed when the run ends)."""
    chats: dict = field(default_factory=dict)
    """The chat each tool-loop row starts from, by (row index, *way): its first turn's messages."""
    templates: dict = field(default_factory=dict)
    """Each model's instruction template (None: its own), by the setting's model."""

    @property
    def total(self) -> int:
        return len(self.cells)

    @property
    def done(self) -> int:
        return len(self.results)

    def eta_text(self) -> str:
        """How long the rest should take: "about 12s left" from the cells generated so far (cells from the cache
        take no time); before the first one finishes (cells run batched, so that can be late), "at most 40s left"
        from the tokens the unfinished cells may still make (their max_new_tokens less what they made, and the
        most their judges may write less what they wrote: judging is part of a cell, so the bound does not drop to
        seconds while the judges work) at the speed so far (the cells' and the judges' tokens alike, so it does not
        grow while the judges work either); "" while nothing is known (and once every row is kept, while
        select-best's judge compares them)."""
        elapsed = time.monotonic() - self.started
        with self._lock:
            generated = sum(not r.from_cache for r in self.results.values())
            left = self.total - len(self.results)
            if not left:  # every row is kept: what is left (select-best's judge) has no estimate, not "0s"
                return ""
            if generated:
                return f"about {elapsed / generated * left:.0f}s left"
            made = sum(self.streaming.values()) + sum(self.judging.values())
            unfinished = [(i, cell.params) for i, cell in enumerate(self.cells) if i not in self.results]
            if any(params.auto_max_new_tokens for _, params in unfinished):  # no bound known
                return ""
            allowed = sum(max(0, params.max_new_tokens - self.streaming.get(i, 0))
                          + max(0, judge_budget(self.cells[i].row.asserts, self.judge_tokens) - self.judging.get(i, 0))
                          for i, params in unfinished)
        return f"at most {elapsed * allowed / made:.0f}s left" if made else ""

    def rows(self) -> list[ResultRow]:
        with self._lock:
            return [self.results[i] for i in sorted(self.results)]

    def counts(self) -> tuple[int, int, int]:
        """(cells taken from the cache, cells generating now, tokens generated so far: finished cells' and the
        running cells' alike; cached cells generate none)."""
        with self._lock:
            cached = sum(r.from_cache for r in self.results.values())
            tokens = sum(r.completion_tokens for r in self.results.values() if not r.from_cache)
            return cached, len(self.streaming), tokens + sum(self.streaming.values())

    def cancel(self) -> None:
        """Stop the rest; rows already finished are kept."""
        self._cancelled.set()
        with self._lock:
            streams = list(self._streams)
        for s in streams:
            s.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()
