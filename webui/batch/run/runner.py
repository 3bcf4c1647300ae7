"""Running a batch on the engine: every cell submitted so they share decode steps, results stored as they finish.

A run's spec stores the prompts and the fully expanded settings (every sampling
parameter and seed), so a re-run repeats it exactly even if a preset file has
changed since.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from loaders.base import EmbeddingModel, LoadedModel, ModelLoadError, attached_loras, is_embedding_model
from webui.batch.run.cache import ResponseCache, cache_key
from webui.batch.asserts.classify import CLASSIFIER, Classifiers
from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.assertion import Assert
from webui.batch.asserts.types import Observed, Verdict
from webui.batch.run.grid import DEFAULT_MAX_CELLS, Cell, GridSpec, Setting, expand, plan
from webui.batch.asserts.graded import Embed, missing_vars, verdict_key
from webui.batch.run.loop_rows import (
    LoopTurns, RowReply, local_toolbox, needs_local_tools, offer_local_tools, run_loop_row,
)
from webui.batch.run.handle import RunHandle
from webui.batch.run.judge import (
    JUDGE_PROMPT, Ask, RemoteJudge, check_judge_prompt, grade, graded, inputs_for, judge_request, max_score,
    rubrics, select_best,
)
from webui.batch.run.prompts import PromptRow
from webui.batch.run.provider_prompt import ProviderPrompt, reply_shape
from webui.batch.run.rerun import ran_on, stored_ran_on
from webui.batch.run.results import Generated, ResultRow, rejudged, result_for
from webui.store.batch_runs import BatchRun, BatchStore, RanOn, StoredRun, StoredSetting
from webui.batch.asserts.transform import transformed
from webui.catalog import set_dir
from webui.chat import ChatPromptError, chat_messages, render_chat_prompt
from webui.chat.templates import ChatTemplate, TemplateError, TemplateStore
from webui.chat.tools import render_with_tools
from webui.embeddings import TextEmbeddings, embed_texts
from webui.engine import Engine, EngineError, GenerationRequest, SamplingParams
from webui.engine.types import GeneratesNoText
from webui.models import ModelManager, Slot
from webui.owner import as_owner
from webui.presets import PresetStore
from webui.tools import ToolBox


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
    remote_judge: RemoteJudge | None = None  # a server that judges instead of a loaded model
    judge_model: str = ""  # the loaded model that judges llm-rubric asserts ("": the model in use)
    derived_metrics: dict[str, str] = field(default_factory=dict)  # a promptfoo suite's: name -> expression
    judge_tokens: int | None = None  # the most tokens the judge writes per grading step (None: each step's own)

    def to_stored(self, settings: list[Setting]) -> StoredRun:
        """What the store keeps of the job, its settings expanded (what it ran on is added when it starts)."""
        return StoredRun([r.to_dict() for r in self.rows], self.grid.to_dict(),
                         [StoredSetting(s.label, s.params.to_dict(), s.preset, s.overrides, tuple(s.loras), s.model,
                                        s.provider, s.raw, s.prompt.to_dict() if s.prompt is not None else None)
                          for s in settings],
                         self.system_prompt, self.raw, self.max_cells, self.chat_template, self.use_cache,
                         self.judge_prompt, self.judge_model,
                         self.remote_judge.to_dict() if self.remote_judge else None, dict(self.derived_metrics),
                         judge_tokens=self.judge_tokens)

    @classmethod
    def from_stored(cls, name: str, stored: StoredRun) -> "BatchJob":
        settings = [Setting(s.label, SamplingParams.from_dict(s.params), s.preset, s.overrides, s.loras, s.model,
                            s.provider, s.raw, ProviderPrompt.from_dict(s.prompt) if s.prompt is not None else None)
                    for s in stored.settings]
        return cls(name, [PromptRow.from_dict(r) for r in stored.rows], GridSpec.from_dict(stored.grid),
                   stored.system_prompt, stored.raw,
                   stored.max_cells if stored.max_cells is not None else DEFAULT_MAX_CELLS,
                   settings, stored.chat_template_name, stored.use_cache,
                   stored.judge_prompt if stored.judge_prompt is not None else JUDGE_PROMPT,
                   RemoteJudge(**stored.remote_judge) if stored.remote_judge else None,
                   stored.judge_model, dict(stored.derived_metrics), stored.judge_tokens)


class BatchRunner:
    def __init__(self, models: ModelManager, presets: PresetStore, templates: TemplateStore, store: BatchStore,
                 cache: ResponseCache) -> None:
        self.manager, self.presets, self.templates, self.store, self.cache = models, presets, templates, store, cache
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

    def plan(self, job: BatchJob, stops: Mapping[str | None, tuple[str, ...]] | None = None
             ) -> tuple[list[Setting], list[Cell]]:
        """Settings and cells, or a BatchInputError before anything runs. ``stops``: each model's chat template
        stops (by the setting's model), added to its settings' stop strings."""
        if not job.rows:
            raise BatchInputError("there are no prompts; paste some (one per line) or upload a file")
        settings = job.settings if job.settings is not None else expand(job.grid, self.presets)
        if stops:
            settings = [s if s.raw else replace(s, params=s.params.replace(stop=tuple(dict.fromkeys((
                *s.params.stop, *stops.get(s.model, ()))))))
                        for s in settings]
        return settings, plan(job.rows, settings, job.grid.samples, job.grid.base_seed, job.max_cells)

    def models(self, job: BatchJob, owner: str = "") -> dict[str | None, Slot]:
        """The loaded model each setting's model names (None: the model ``owner`` uses); a model that is not loaded is a
        BatchInputError naming those that are."""
        settings = job.settings if job.settings is not None else expand(job.grid, self.presets)
        out: dict[str | None, Slot] = {}
        for name in dict.fromkeys(s.model for s in settings):
            try:
                out[name] = self.manager.slot(name, owner)
            except ModelLoadError as exc:
                raise BatchInputError(f"grid: {exc}" if name else "no model is loaded; load one in the Model tab "
                                      "first") from None
        return out

    def rerun_job(self, run: BatchRun, name: str, use_cache: bool = True) -> tuple[BatchJob, list[RanOn], list[str]]:
        """The job that runs the stored run ``run`` again with each setting on what it ran on, what those are
        (for :func:`webui.batch.run.rerun.provide` to have them loaded before :meth:`start`), and notes on what had to
        be assumed for a run stored without its loader."""
        job = BatchJob.from_stored(name, run.spec)
        ran, notes = stored_ran_on(run, self.store.results(run.id), self.manager)
        settings = [replace(s, model=ran[s.label].model) for s in job.settings or []]
        needs = list({ran[s.label].model: ran[s.label] for s in settings}.values())
        return replace(job, settings=settings, use_cache=use_cache), needs, notes

    def template(self, job: BatchJob, model: LoadedModel) -> ChatTemplate | None:
        """The instruction template the job's prompts are rendered with (None for raw prompts)."""
        if job.raw or model.capabilities.renders_chats:
            return None
        try:
            return self.templates.resolve(job.chat_template, model.tokenizer)
        except TemplateError as exc:
            raise BatchInputError(f"chat template: {exc}") from exc

    def start(self, job: BatchJob, owner: str = "") -> RunHandle:
        """Start ``job`` for ``owner`` (who started it: a setting that names no model runs on the model they use,
        and the run's rows are theirs)."""
        toolbox = local_toolbox(self.manager.catalog.config.user_data_dir) if needs_local_tools(job.settings) \
            else None
        try:
            if toolbox is not None:  # settings that offer every local tool: listed now, stored with the run
                job = replace(job, settings=offer_local_tools(job.settings or [], toolbox))
            handle = self._start(job, owner, toolbox)
        except BaseException:
            if toolbox is not None:
                toolbox.close()
            raise
        return handle

    def _start(self, job: BatchJob, owner: str, toolbox: ToolBox | None) -> RunHandle:
        slots = self.models(job, owner)
        templates = {name: self.template(job, slot.model) for name, slot in slots.items()}
        settings, cells = self.plan(job, {name: t.stops for name, t in templates.items() if t})
        if any(rubrics(row.asserts) for row in job.rows):
            check_judge_prompt(job.judge_prompt)
        self._check_graded(job, settings)
        classifiers = self._classifiers(job)
        for setting in settings:
            slot = slots[setting.model]
            if not slot.model.capabilities.generates:
                raise BatchInputError(f"grid: {GeneratesNoText(slot.name)}")
            attached = attached_loras(slot.model)
            missing = [n for n, _ in setting.loras if n not in attached]
            if missing:
                raise BatchInputError(f"grid: LoRA adapter '{missing[0]}' is not attached to {slot.name}; attach it "
                                      f"in the Model tab (attached: {', '.join(attached) or 'none'})")
        judge = self._judge_slot(job, slots, owner)
        ways = {way(s, job.raw): s.prompt for s in settings}  # each model, with its template or raw, and provider
        prompts = {(row.index, *key): self._prompt(replace(job, raw=key[1]), row, slots[key[0]].model,
                                                   None if key[1] else templates[key[0]], shape)
                   for key, shape in ways.items() for row in job.rows}
        names = list(dict.fromkeys(slot.name for slot in slots.values()))
        stored = job.to_stored(settings)
        spec = replace(
            stored, loader=slots[settings[0].model].model.loader,  # so each row's record names it
            loaders={slot.name: slot.model.loader for slot in slots.values()},
            load_options={slot.name: slot.model.load_options for slot in slots.values()},
            chat_template=next((t.to_record() for t in templates.values() if t), None),
            chat_templates={slots[n].name: t.to_record() for n, t in templates.items() if t},
            settings=[replace(s, ran_on=ran_on(slots[setting.model]))  # what each setting ran on, for a re-run
                      for s, setting in zip(stored.settings, settings)])
        run = self.store.create(job.name, spec, ", ".join(names), len(cells))
        handle = RunHandle(run.id, cells, toolbox=toolbox, templates=templates)
        handle.chats = {(row.index, *key): self._messages(replace(job, raw=key[1]), row, shape)
                        for key, shape in ways.items() if shape is not None and shape.answers is not None
                        for row in job.rows}
        with self._lock:
            self._active[run.id] = handle
        handle.slots = slots
        handle.remote_judge = job.remote_judge
        if judge is not None:
            template = self.template(replace(job, raw=False), judge.model)
            handle.judge = (judge.engine, lambda text: render_chat_prompt(
                judge.model.tokenizer, [{"role": "user", "content": text}], template=template))
        handle.judge_prompt, handle.judge_tokens = job.judge_prompt, job.judge_tokens
        handle.classifiers = classifiers
        if any(a.kind in ("similar", "answer-relevance") for row in job.rows for a in row.asserts):
            handle.embedder = self._embedder(slots, owner)
        handle.keys = []
        for cell in cells:
            model = slots[cell.setting.model].model
            raw = job.raw or cell.setting.raw
            prompt = prompts[(cell.row.index, *way(cell.setting, job.raw))][0]
            handle.keys.append(cache_key(model, cell.setting.loras, prompt, raw, cell.params.to_dict()))
        handle.use_cache = job.use_cache

        def drive() -> None:
            with as_owner(owner):  # the run's thread writes its rows as the user who started it
                asyncio.run(self._drive(handle, prompts, job.raw))  # raw for all, else each setting's own

        thread = threading.Thread(target=drive, name=f"batch-run-{run.id}", daemon=True)
        thread.start()
        return handle

    @staticmethod
    def _check_graded(job: BatchJob, settings: list[Setting]) -> None:
        """A graded assert whose test lacks a var it reads, or a select-best with nothing to compare, is refused
        before the run."""
        for row in job.rows:
            for item in graded(row.asserts) + graded(row.asserts, select=True):
                missing = missing_vars(item, row.variables)
                if missing:
                    raise BatchInputError(f"prompt {row.id}: {item.kind} reads the test's "
                                          f"{' and '.join(f'`{m}`' for m in missing)} var, which it does not have; "
                                          f"add it to the test's vars")
        outputs: dict[Any, int] = {}  # a test's outputs, over its prompts and settings
        for row in job.rows:
            outputs[_test_of(row)] = outputs.get(_test_of(row), 0) + sum(
                row.settings is None or s.label in row.settings for s in settings)
        for row in job.rows:
            comparing = [a.kind for a in graded(row.asserts, select=True)]
            if comparing and outputs[_test_of(row)] < 2:
                raise BatchInputError(f"prompt {row.id}: {comparing[0]} compares the outputs of several prompts or "
                                      "settings (providers) for the same test, and this one has one; add a setting "
                                      "or use llm-rubric")

    def _classifiers(self, job: BatchJob) -> Classifiers | None:
        """The run's classifier models (None: no classifier assert); a model not in the models dir is refused
        before the run, naming the folders tried."""
        providers = {a.options["provider"] for row in job.rows for a in row.asserts if a.kind == CLASSIFIER}
        if not providers:
            return None
        classifiers = Classifiers(set_dir(self.manager.catalog.config.models_dir))
        for provider in sorted(providers):
            classifiers.folder(provider)
        return classifiers

    def _judge_slot(self, job: BatchJob, slots: dict[str | None, Slot], owner: str) -> Slot | None:
        """The loaded model that judges llm-rubric asserts (None when a remote server does)."""
        if job.remote_judge is not None:
            return None
        if not job.judge_model:
            return self.manager.in_use(owner) or next(iter(slots.values()))
        try:
            return self.manager.slot(job.judge_model)
        except ModelLoadError as exc:
            raise BatchInputError(f"judge: {exc}") from None

    def _embedder(self, slots: dict[str | None, Slot], owner: str) -> tuple[Engine, EmbeddingModel] | None:
        """What embeds for similar asserts, one model for the whole run so its scores compare: a loaded
        sentence-embedding model, else the model in use, else the first of the run's models that gives embeddings;
        None when none does."""
        dedicated = [s for s in self.manager.slots() if not s.model.capabilities.generates]
        for slot in [*dedicated, self.manager.in_use(owner), *slots.values()]:
            if slot is not None and is_embedding_model(slot.model):
                return slot.engine, slot.model
        return None

    @staticmethod
    def _prompt(job: BatchJob, row: PromptRow, model: LoadedModel, template: ChatTemplate | None,
                shape: ProviderPrompt | None = None) -> tuple[str, list | None]:
        """(what ``model`` reads for ``row``, the chat messages or None for a raw prompt); ``shape``: the
        provider's prefix/suffix and tools."""
        try:
            messages = BatchRunner._messages(job, row, shape)
            if isinstance(messages, str):
                return messages, None
            if shape is not None and shape.tools is not None:
                return render_with_tools(model.tokenizer, messages, shape.tools, template)
            return render_chat_prompt(model.tokenizer, messages, template=template), messages
        except (ChatPromptError, ValueError) as exc:
            raise BatchInputError(f"prompt {row.id}: {exc}") from exc

    @staticmethod
    def _messages(job: BatchJob, row: PromptRow, shape: ProviderPrompt | None) -> list[dict] | str:
        """The chat messages ``row`` is (its text as it is for a raw prompt); ``shape``: the provider's
        prefix/suffix and tools."""
        if row.messages is not None:
            if job.raw:
                raise BatchInputError(f"prompt {row.id} is a chat (a list of messages), which only the chat "
                                      f"template turns into text; turn raw prompts off")
            if shape is not None and shape.affixed:
                raise BatchInputError(f"prompt {row.id} is a chat; a provider's prompt.prefix/suffix go around "
                                      "a text prompt")
            return chat_messages(row.messages, job.system_prompt)
        text = shape.text(row.text) if shape is not None else row.text
        if job.raw:
            if shape is not None and shape.tools is not None:
                raise BatchInputError(f"prompt {row.id}: tools are offered through the chat template; turn "
                                      "raw prompts off")
            return text
        return chat_messages([{"role": "user", "content": text}], job.system_prompt)

    async def _drive(self, handle: RunHandle,
                     prompts: dict[tuple[int, str | None, bool, str], tuple[str, list | None]], raw: bool) -> None:
        # per engine, enough in flight to fill its batch, not its whole queue; each model's engine runs its cells
        # while the others run theirs
        windows = {name: asyncio.Semaphore(slot.engine.config.max_running * 2) for name, slot in handle.slots.items()}
        try:
            await asyncio.gather(*(self._cell(handle, i, cell, prompts[(cell.row.index, *way(cell.setting, raw))],
                                              raw or cell.setting.raw, windows[cell.setting.model])
                                   for i, cell in enumerate(handle.cells)))
            await self._select_best(handle)
            handle.status = "cancelled" if handle.cancelled else "done"
        except BaseException:
            handle.status = "failed"
            raise
        finally:
            if handle.toolbox is not None:
                handle.toolbox.close()
            self.store.finish(handle.run_id, handle.status)
            with self._lock:
                self._active.pop(handle.run_id, None)
            handle._done.set()

    async def _cell(self, handle: RunHandle, index: int, cell: Cell, prompt: tuple[str, list | None], raw: bool,
                    slots: asyncio.Semaphore) -> None:
        logprobs = any(a.spec.needs_logprobs for a in cell.row.asserts)  # perplexity: the cache keeps no logprobs
        loop = cell.setting.prompt is not None and cell.setting.prompt.answers is not None  # the tool loop's row
        cached = self.cache.get(handle.keys[index]) if handle.use_cache and not logprobs and not loop else None
        if cached is not None:  # the very same request ran before: its response, with this run's asserts
            output, value = reply_output(cell, cached.output, cached.finish_reason)
            judged = await self._judge(handle, cell, output, index)
            embedded = await self._embed(handle, cell, output)
            self._keep(handle, index, result_for(cell, replace(cached, output=output, output_value=value),
                                                 ran_on(handle.slots[cell.setting.model]), from_cache=True,
                                                 judged=judged, embeddings=embedded))
            return
        async with slots:
            if handle.cancelled:
                return
            if loop:
                made = await asyncio.to_thread(self._loop, handle, index, cell, raw, logprobs)
                if handle.cancelled:
                    return  # cut by Cancel: not a result
            else:
                made = await self._generate(handle, index, cell, prompt, raw, logprobs)
                if made.finish_reason == "cancelled" and handle.cancelled:
                    return  # cut by Cancel: not a result
            error = made.error
            output, value = reply_output(cell, made.text, made.finish_reason) if error is None and not loop \
                else (made.text, None)
            judged = await self._judge(handle, cell, output, index) if error is None else {}
            embedded = await self._embed(handle, cell, output) if error is None else None
            generated = Generated(output, made.finish_reason, made.prompt_tokens, made.completion_tokens,
                                  made.cached_tokens, made.ttft, made.tokens_per_second, error, value,
                                  None if made.steps is None else [s.to_dict() for s in made.steps],
                                  tuple(made.logprobs))
            row = result_for(cell, generated, ran_on(handle.slots[cell.setting.model]), judged=judged,
                             embeddings=embedded)
            if error is None and not loop and made.finish_reason not in ("cancelled", "error"):
                self.cache.put(handle.keys[index], replace(generated, output=made.text))  # the reply as generated
            self._keep(handle, index, row)

    async def _generate(self, handle: RunHandle, index: int, cell: Cell, prompt: tuple[str, list | None], raw: bool,
                        logprobs: bool) -> RowReply:
        """One cell's reply, streamed from its engine."""
        made, last = RowReply(), None
        try:
            engine = handle.slots[cell.setting.model].engine
            stream = engine.submit(GenerationRequest(prompt[0], cell.params, add_special_tokens=raw,
                                                     loras=cell.setting.loras, messages=prompt[1],
                                                     logprobs=0 if logprobs else None))
        except (EngineError, ValueError) as exc:
            made.error = str(exc)
            return made
        with handle._lock:
            handle._streams.add(stream)
        try:
            async for event in stream:
                made.text += event.text
                made.logprobs.extend(lp.logprob for lp in event.logprobs)
                last = event
                with handle._lock:
                    count = len(event.token_ids) or bool(event.text)  # a text-only backend: ~1 a delta
                    handle.streaming[index] = handle.streaming.get(index, 0) + count
        except EngineError as exc:
            made.error = str(exc)
        finally:
            with handle._lock:
                handle._streams.discard(stream)
                if last is None or last.finish_reason == "cancelled" or made.error is not None:
                    handle.streaming.pop(index, None)  # no row will take its place
        if last is not None:
            made.finish_reason = last.finish_reason or "error"
            if last.usage is not None:
                made.prompt_tokens, made.completion_tokens = last.usage.prompt_tokens, last.usage.completion_tokens
                made.cached_tokens = last.usage.cached_tokens
            if last.timings is not None:
                made.ttft, made.tokens_per_second = last.timings.first_token, last.timings.tokens_per_second
        return made

    def _loop(self, handle: RunHandle, index: int, cell: Cell, raw: bool, logprobs: bool) -> RowReply:
        """One cell's tool loop (in a worker thread): webui.batch.run.loop_rows."""
        shape, slot = cell.setting.prompt, handle.slots[cell.setting.model]
        assert shape is not None and shape.answers is not None and shape.tools is not None  # a loop setting's

        def watch(stream: Any, running: bool) -> None:
            with handle._lock:
                (handle._streams.add if running else handle._streams.discard)(stream)
            if running and handle.cancelled:
                stream.cancel()

        def count(tokens: int) -> None:
            with handle._lock:
                handle.streaming[index] = handle.streaming.get(index, 0) + tokens

        turns = LoopTurns(slot.engine, slot.model.tokenizer, handle.templates.get(cell.setting.model), cell.params,
                          cell.setting.loras, shape.tools, logprobs, watch, count)
        caller = handle.toolbox if shape.answers.local else shape.answers
        assert caller is not None  # a run with local tools has its tool box
        made = run_loop_row(list(handle.chats[(cell.row.index, *way(cell.setting, raw))]), turns, caller,
                            shape.answers.max_steps, lambda: handle.cancelled)
        if made.error is not None or handle.cancelled:
            with handle._lock:
                handle.streaming.pop(index, None)  # no row will take its place
        return made

    def _ask(self, handle: RunHandle, index: int = -1) -> Ask:
        """How this run asks its judge (a loaded model, or a server); the loaded judge's tokens on cell ``index``
        are counted in ``handle.judging``."""
        async def ask(text: str, schema: Mapping[str, Any] | None, max_tokens: int, stop: Sequence[str] = ()) -> str:
            if handle.remote_judge is not None:
                return await asyncio.to_thread(handle.remote_judge.ask, text, schema, max_tokens, stop)
            engine, render_chat = handle.judge
            said = []
            async for event in engine.submit(judge_request(render_chat, text, schema, max_tokens, stop)):
                said.append(event.text)
                with handle._lock:
                    handle.judging[index] = handle.judging.get(index, 0) + (len(event.token_ids) or bool(event.text))
            return "".join(said)
        return ask

    async def _judge(self, handle: RunHandle, cell: Cell, output: str, index: int = -1) -> dict[str, Verdict]:
        """The judge's verdict on ``output`` for each graded assert of the cell's prompt (select-best waits for
        the test's other outputs, :meth:`_select_best`)."""
        verdicts: dict[str, Verdict] = {}
        for item in graded(cell.row.asserts):
            if handle.cancelled:
                break
            if item.kind == CLASSIFIER:
                verdicts[verdict_key(item)] = await self._classify(handle, item, cell, output)
                continue
            inputs = inputs_for(item, output, cell.row.text, cell.row.variables)
            default = handle.judge_prompt if item.kind == "llm-rubric" else None
            verdicts[verdict_key(item)] = await grade(item, inputs, self._ask(handle, index), default,
                                                      self._embedding(handle), handle.judge_tokens)
        return verdicts

    @staticmethod
    async def _classify(handle: RunHandle, item: Assert, cell: Cell, output: str) -> Verdict:
        """A classifier assert's verdict: its model's label probabilities for the output (as the assert's
        transform rewrites it; a transform that fails leaves the assert to fail on it)."""
        if handle.classifiers is None:
            return Verdict(False, 0.0, "the run has no classifier models", unscored=True)
        text = output
        if item.transform:
            try:
                text = transformed(item.transform, Observed(output, prompt=cell.row.text,
                                                            variables=cell.row.variables)).output
            except ScriptError as exc:
                return Verdict(False, 0.0, f"transform: {exc}", unscored=True)
        return Verdict(*await asyncio.to_thread(handle.classifiers.grade, item, text))

    async def _select_best(self, handle: RunHandle) -> None:
        """select-best and max-score: once every cell has run, the judge (or, for max-score, the other asserts'
        scores) picks the best output of each test (its outputs over prompts and settings, per sample) and those
        rows are checked again with the verdicts."""
        groups: dict[tuple[Any, int], list[int]] = {}
        for index, cell in enumerate(handle.cells):
            row = handle.results.get(index)
            if graded(cell.row.asserts, select=True) and row is not None and not row.error:
                groups.setdefault((_test_of(cell.row), cell.sample), []).append(index)
        for indexes in groups.values():
            if handle.cancelled:
                return
            cell = handle.cells[indexes[0]]
            outputs = [handle.results[i].output for i in indexes]
            verdicts: list[dict[str, Verdict]] = [{} for _ in indexes]
            for item in graded(cell.row.asserts, select=True):
                inputs = inputs_for(item, "", cell.row.text, cell.row.variables)
                found = max_score(item, [list(zip(handle.cells[i].row.asserts, handle.results[i].asserts))
                                         for i in indexes]) if item.kind == "max-score" else \
                    await select_best(item, outputs, inputs, self._ask(handle), handle.judge_tokens)
                for held, verdict in zip(verdicts, found):
                    held[verdict_key(item)] = verdict
            for index, judged in zip(indexes, verdicts):
                self._keep(handle, index, rejudged(handle.results[index], handle.cells[index], judged))

    async def _embed(self, handle: RunHandle, cell: Cell, output: str) -> TextEmbeddings | None:
        """The vectors a cell's similar asserts compare: the output (also as each assert's transform rewrites it)
        and the references; None without such asserts or an embedding model."""
        similar = [a for a in cell.row.asserts if a.kind == "similar"]
        embed = self._embedding(handle)
        if not similar or embed is None or handle.cancelled:
            return None
        texts = [output, *(str(a.value) for a in similar)]
        seen = Observed(output, prompt=cell.row.text, variables=cell.row.variables)
        for a in similar:
            if a.transform:
                try:
                    texts.append(transformed(a.transform, seen).output)
                except ScriptError:
                    pass  # the assert fails on it, with the transform's error
        return await embed(texts)  # None when the model went away: the asserts then say they scored by trigrams

    @staticmethod
    def _embedding(handle: RunHandle) -> Embed | None:
        """How this run embeds texts (None: no model of it gives embeddings)."""
        if handle.embedder is None:
            return None
        engine, model = handle.embedder

        async def embed(texts: list[str]) -> TextEmbeddings | None:
            try:
                return await asyncio.to_thread(embed_texts, engine, model, texts)
            except EngineError:
                return None  # the model went away
        return embed

    def _keep(self, handle: RunHandle, index: int, row: ResultRow) -> None:
        self.store.add_result(handle.run_id, index, row.to_dict())
        with handle._lock:
            handle.results[index] = row
            handle.streaming.pop(index, None)  # its tokens are the row's now
            handle.judging.pop(index, None)


def way(setting: Setting, raw: bool) -> tuple[str | None, bool, str]:
    """How a setting's prompts are written: (its model, raw or through the chat template, its provider's
    prefix/suffix and tools); ``raw``: the job's."""
    return setting.model, raw or setting.raw, setting.prompt.key() if setting.prompt is not None else ""


def reply_output(cell: Cell, text: str, finish_reason: str) -> tuple[str, Any]:
    """(a cell's output, the output's value when the provider returns one that is not text: its tool calls, or
    the JSON a json_schema response_format asked for) of the text the model generated."""
    shape = reply_shape(cell.setting.prompt, cell.row.params)
    return shape.output(text, finish_reason) if shape is not None else (text, None)


def _test_of(row: PromptRow) -> Any:
    """Which test a row is of, for the kinds that compare a test's outputs: a promptfoo test's rows (one per
    prompt) are one test, as promptfoo compares them; any other row is a test of its own."""
    origin = row.origin or {}
    if "testIdx" not in origin:
        return row.index
    return origin["testIdx"], json.dumps(row.variables, sort_keys=True, default=str)
