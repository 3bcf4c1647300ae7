"""Running a batch on the engine: every cell submitted so they share decode steps, results stored as they finish.

A run's spec stores the prompts and the fully expanded settings (every sampling
parameter and seed), so a re-run repeats it exactly even if a preset file has
changed since.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from loaders.base import attached_loras
from webui.batch.cache import ResponseCache, cache_key
from webui.batch.errors import BatchInputError
from webui.batch.asserts import Verdict
from webui.batch.grid import DEFAULT_MAX_CELLS, Cell, GridSpec, Setting, expand, plan
from webui.batch.judge import JUDGE_PROMPT, RemoteJudge, check_judge_prompt, judge_request, read_verdict, rubrics
from webui.batch.prompts import PromptRow, render
from webui.batch.results import ResultRow, result_for
from webui.batch.store import BatchStore
from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.chat.templates import ChatTemplate, TemplateError
from webui.engine import EngineError, GenerationRequest, SamplingParams


@dataclass
class BatchJob:
    name: str
    rows: list[PromptRow]
    grid: GridSpec
    system_prompt: str = ""
    raw: bool = False  # True: prompts go to the model as they are, without the chat template
    max_cells: int = DEFAULT_MAX_CELLS
    settings: list[Setting] | None = None  # expanded from ``grid`` unless given (a re-run)
    chat_template: str = ""  # the instruction template's name ("": the model's own)
    use_cache: bool = True  # take cells already run with the very same request from the response cache
    judge_prompt: str = JUDGE_PROMPT  # what the judge model is asked for llm-rubric asserts
    remote_judge: RemoteJudge | None = None  # a server that judges instead of the loaded model

    def to_spec(self, settings: list[Setting]) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "grid": self.grid.to_dict(),
                "settings": [{"label": s.label, "params": s.params.to_dict(), "preset": s.preset,
                              "overrides": s.overrides, "loras": [list(x) for x in s.loras]} for s in settings],
                "system_prompt": self.system_prompt, "raw": self.raw, "max_cells": self.max_cells,
                "chat_template_name": self.chat_template, "use_cache": self.use_cache,
                "judge_prompt": self.judge_prompt,
                "remote_judge": self.remote_judge.to_dict() if self.remote_judge else None}

    @classmethod
    def from_spec(cls, name: str, spec: dict[str, Any]) -> "BatchJob":
        settings = [Setting(s["label"], SamplingParams.from_dict(s["params"]), s.get("preset"), s.get("overrides", {}),
                            tuple((n, float(w)) for n, w in s.get("loras", [])))
                    for s in spec["settings"]]
        return cls(name, [PromptRow.from_dict(r) for r in spec["rows"]], GridSpec.from_dict(spec["grid"]),
                   spec.get("system_prompt", ""), spec.get("raw", False), spec.get("max_cells", DEFAULT_MAX_CELLS),
                   settings, spec.get("chat_template_name", ""), spec.get("use_cache", True),
                   spec.get("judge_prompt", JUDGE_PROMPT),
                   RemoteJudge(**spec["remote_judge"]) if spec.get("remote_judge") else None)


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
    """(user text -> the prompt as the judge reads it, judge prompt) for llm-rubric asserts."""
    remote_judge: RemoteJudge | None = None

    @property
    def total(self) -> int:
        return len(self.cells)

    @property
    def done(self) -> int:
        return len(self.results)

    def eta_seconds(self) -> float | None:
        if not self.done:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * (self.total - self.done)

    def rows(self) -> list[ResultRow]:
        with self._lock:
            return [self.results[i] for i in sorted(self.results)]

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


class BatchRunner:
    def __init__(self, services, store: BatchStore):
        self.services, self.store = services, store
        self.cache = ResponseCache(services.db)
        self._active: dict[int, RunHandle] = {}
        self._lock = threading.Lock()

    def active(self, run_id: int) -> RunHandle | None:
        """The handle of a run still going in this process, if it is."""
        with self._lock:
            return self._active.get(run_id)

    def cancel(self, run_id: int) -> bool:
        handle = self.active(run_id)
        if handle is None:
            return False
        handle.cancel()
        return True

    def plan(self, job: BatchJob, stops: tuple[str, ...] = ()) -> tuple[list[Setting], list[Cell]]:
        """Settings and cells, or a BatchInputError before anything runs. ``stops``: the chat template's, added to
        every setting's stop strings."""
        if not job.rows:
            raise BatchInputError("there are no prompts; paste some (one per line) or upload a file")
        settings = job.settings if job.settings is not None else expand(job.grid, self.services.presets)
        if stops:
            settings = [replace(s, params=s.params.replace(stop=tuple(dict.fromkeys((*s.params.stop, *stops)))))
                        for s in settings]
        return settings, plan(job.rows, settings, job.grid.samples, job.grid.base_seed, job.max_cells)

    def template(self, job: BatchJob, model) -> ChatTemplate | None:
        """The instruction template the job's prompts are rendered with (None for raw prompts)."""
        if job.raw or model.capabilities.text_only:
            return None
        try:
            return self.services.templates.resolve(job.chat_template, model.tokenizer)
        except TemplateError as exc:
            raise BatchInputError(f"chat template: {exc}") from exc

    def start(self, job: BatchJob) -> RunHandle:
        model = self.services.models.loaded
        if model is None:
            raise BatchInputError("no model is loaded; load one in the Model tab first")
        template = self.template(job, model)
        settings, cells = self.plan(job, template.stops if template else ())
        if any(rubrics(row.asserts) for row in job.rows):
            check_judge_prompt(job.judge_prompt)
        attached = attached_loras(model)
        for setting in settings:
            missing = [n for n, _ in setting.loras if n not in attached]
            if missing:
                raise BatchInputError(f"grid: LoRA adapter '{missing[0]}' is not attached to {model.name}; attach it "
                                      f"in the Model tab (attached: {', '.join(attached) or 'none'})")
        prompts = {}
        for row in job.rows:
            try:
                messages = None if job.raw else chat_messages([{"role": "user", "content": row.text}],
                                                              job.system_prompt)
                text = row.text if job.raw else render_chat_prompt(model.tokenizer, messages, template=template)
            except (ChatPromptError, ValueError) as exc:
                raise BatchInputError(f"prompt {row.id}: {exc}") from exc
            prompts[row.index] = (text, messages)
        spec = {**job.to_spec(settings), "loader": model.loader,  # so each row's record names it
                "chat_template": template.to_record() if template else None}
        run = self.store.create(job.name, spec, model.name, len(cells))
        handle = RunHandle(run.id, cells)
        with self._lock:
            self._active[run.id] = handle
        window = self.services.engine.config.max_running * 2
        handle.remote_judge = job.remote_judge
        handle.judge = (lambda text: render_chat_prompt(model.tokenizer, [{"role": "user", "content": text}],
                                                        template=template), job.judge_prompt)
        handle.keys = [cache_key(model.name, model.loader, cell.setting.loras, prompts[cell.row.index][0], job.raw,
                                 cell.params.to_dict()) for cell in cells]
        handle.use_cache = job.use_cache
        thread = threading.Thread(target=lambda: asyncio.run(self._drive(handle, prompts, job.raw, window)),
                                  name=f"batch-run-{run.id}", daemon=True)
        thread.start()
        return handle

    async def _drive(self, handle: RunHandle, prompts: dict[int, tuple[str, list | None]], raw: bool,
                     window: int) -> None:
        slots = asyncio.Semaphore(window)  # enough in flight to fill the engine's batch, not its whole queue
        try:
            await asyncio.gather(*(self._cell(handle, i, cell, prompts[cell.row.index], raw, slots)
                                   for i, cell in enumerate(handle.cells)))
            handle.status = "cancelled" if handle.cancelled else "done"
        except BaseException:
            handle.status = "failed"
            raise
        finally:
            self.store.finish(handle.run_id, handle.status)
            with self._lock:
                self._active.pop(handle.run_id, None)
            handle._done.set()

    async def _cell(self, handle: RunHandle, index: int, cell: Cell, prompt: tuple[str, list | None], raw: bool,
                    slots: asyncio.Semaphore) -> None:
        cached = self.cache.get(handle.keys[index]) if handle.use_cache else None
        if cached is not None:  # the very same request ran before: its response, with this run's asserts
            judged = await self._judge(handle, cell, cached["output"])
            self._keep(handle, index, result_for(cell, **cached, from_cache=True, judged=judged))
            return
        async with slots:
            if handle.cancelled:
                return
            text, last, error = "", None, None
            try:
                stream = self.services.engine.submit(GenerationRequest(prompt[0], cell.params, add_special_tokens=raw,
                                                                       loras=cell.setting.loras, messages=prompt[1]))
            except (EngineError, ValueError) as exc:
                stream, error = None, str(exc)
            if stream is not None:
                with handle._lock:
                    handle._streams.add(stream)
                try:
                    async for event in stream:
                        text += event.text
                        last = event
                except EngineError as exc:
                    error = str(exc)
                finally:
                    with handle._lock:
                        handle._streams.discard(stream)
            if last is not None and last.finish_reason == "cancelled" and handle.cancelled:
                return  # cut by Cancel: not a result
            usage, timings = (last.usage, last.timings) if last is not None else (None, None)
            judged = await self._judge(handle, cell, text) if error is None else {}
            row = result_for(cell, output=text, judged=judged, finish_reason=last.finish_reason if last else "error",
                             prompt_tokens=usage.prompt_tokens if usage else 0,
                             completion_tokens=usage.completion_tokens if usage else 0,
                             cached_tokens=usage.cached_tokens if usage else 0,
                             ttft=timings.first_token if timings else None,
                             tokens_per_second=timings.tokens_per_second if timings else None, error=error)
            if error is None and last is not None and last.finish_reason not in ("cancelled", "error"):
                self.cache.put(handle.keys[index], row.to_dict())
            self._keep(handle, index, row)

    async def _judge(self, handle: RunHandle, cell: Cell, output: str) -> dict[str, Verdict]:
        """The judge model's verdict on ``output`` for each llm-rubric assert of the cell's prompt."""
        verdicts: dict[str, Verdict] = {}
        for rubric in rubrics(cell.row.asserts):
            if handle.cancelled:
                break
            if handle.remote_judge is not None:
                text = render(handle.judge[1], {"output": output, "rubric": rubric})
                verdicts[rubric] = await asyncio.to_thread(handle.remote_judge.verdict, text)
                continue
            try:
                stream = self.services.engine.submit(judge_request(*handle.judge, output, rubric))
                text = "".join([event.text async for event in stream])
            except (EngineError, ValueError):
                continue  # the assert then says that no verdict could be had
            verdict = read_verdict(text)
            if verdict is not None:
                verdicts[rubric] = verdict
        return verdicts

    def _keep(self, handle: RunHandle, index: int, row: ResultRow) -> None:
        self.store.add_result(handle.run_id, index, row.to_dict())
        with handle._lock:
            handle.results[index] = row
