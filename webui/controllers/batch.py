"""BatchController: the Batch tab's behaviour: a form becomes a BatchJob, runs (and re-runs) are started,
followed, cancelled, renamed, deleted and exported, and one row is looked at with its record."""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from webui.batch.run.grid import GridSpec, parse_axes
from webui.batch.run.results import ResultRow
from webui.batch.run.prompts import load_prompts_text, parse_lines, with_asserts, PromptRow
from webui.batch.run.export import to_csv, to_jsonl
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.judge import JUDGE_PROMPT, RemoteJudge, with_suite_tokens
from webui.batch.run.loop_rows import most_turns
from webui.batch.promptfoo.reader import Suite, is_config, read_suite
from webui.batch.promptfoo.options import GRADER_HINT
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.run.rerun import is_loaded, provide
from webui.batch.asserts.transform import is_python_transform
from webui.batch.run.handle import RunHandle
from webui.batch.run.runner import BatchJob
from webui.store.batch_runs import BatchRun, RunNotFound
from webui.controllers.batch_refill import form_values
from webui.controllers.chat import MessageInspection
from webui.controllers.errors import UserError
from webui.engine import SamplingParams
from webui.insight import InsightUnavailable, inspect_rendered
from webui.names import InvalidName
from webui.reproduce import RecordError, record_for_batch_row
from webui.services import Services
from webui.store import StoreError
from webui.fsutil import in_scratch, scratch_folder
from webui.counts import counted

REFRESH_SECONDS = 0.7
NO_RUN = "Choose a stored run first."
NO_ROW = "Click a row of the results to review it: it is named here and tinted in the table."
_RERUN_SUFFIX = re.compile(r" \(re-run(?:, no cache)?(?: \d+)?\)$")


def rerun_name(name: str, use_cache: bool, taken: set[str]) -> str:
    """``NAME (re-run)`` or ``NAME (re-run, no cache)``, numbered when that name is taken; a re-run of a re-run is
    named after the run it repeats."""
    base = _RERUN_SUFFIX.sub("", name)
    how = "re-run" if use_cache else "re-run, no cache"
    out, number = f"{base} ({how})", 2
    while out in taken:
        out, number = f"{base} ({how} {number})", number + 1
    return out


@dataclass(frozen=True)
class BatchForm:
    """The Batch tab's form as plain values."""

    prompts: str = ""
    upload: tuple[str, bytes] | None = None
    """(file name, content) of an uploaded prompt file; it wins over ``prompts``."""
    template: str = ""
    asserts: str = ""
    system: str = ""
    raw: bool = False
    presets: tuple[str, ...] = ()
    axes: str = ""
    samples: float | None = 1
    base_seed: float | None = 0
    name: str = "Batch run"
    use_cache: bool = True
    """Take cells whose very same request already ran from the response cache."""
    judge_prompt: str = JUDGE_PROMPT
    """What the judge model is asked for llm-rubric asserts ({{output}}, {{rubric}})."""
    judge_url: str = ""
    """An OpenAI-compatible server that judges instead of a loaded model ("": a loaded model judges)."""
    judge_model: str = ""
    """With a judge server: its model; without: the loaded model that judges ("": the model in use)."""
    judge_key: str = ""
    """The judge server's API key: used for this run, never stored."""
    judge_tokens: str = ""
    """The grader budget as typed: the most tokens the judge writes per grading step, over any budget a suite gives
    ("": none; a wrong value is not used, :func:`grader_budget` says so)."""

    def local_judge(self) -> str:
        return "" if (self.judge_url or "").strip() else (self.judge_model or "").strip()

    def remote_judge(self) -> RemoteJudge | None:
        url = (self.judge_url or "").strip()
        if url and not url.startswith(("http://", "https://")):
            raise BatchInputError(f"the judge server URL must start with http:// or https://, got '{url}'")
        return RemoteJudge(url, (self.judge_model or "").strip(), self.judge_key or "") if url else None


GRADER_BUDGET_UNSET = ("a promptfoo suite's budgets (an assert's provider config.max_tokens, else "
                       "defaultTest.options.provider config.max_tokens), else each grading step's own (256-768 tokens)")
"""What grades when the grader budget box gives none."""


def grader_budget(typed: str | float | None) -> tuple[int | None, str]:
    """(the grader budget the box gives, the message beside it): a whole number of tokens >= 1 is used for every
    grading step, over any budget a suite gives (webui.batch.run.judge.step_tokens); an empty box gives none; a
    wrong value is not used, and the message says so and what is used instead (the Parameters tab's rule)."""
    text = "" if typed is None else str(typed).strip()
    if not text:
        return None, ""
    try:
        tokens = int(text)
    except ValueError:
        tokens = 0
    if tokens >= 1:
        return tokens, ""
    return None, (f"⚠ {_cut(text, 40)} is not used: the grader budget must be a whole number of tokens, 1 or "
                  f"more; using {GRADER_BUDGET_UNSET}.")


@dataclass(frozen=True)
class Progress:
    """One refresh of a running (or finished) run."""

    run_id: int
    status: str
    finished: bool


def _python_scripts(job: BatchJob) -> list[str]:
    """The python asserts and transforms of ``job``'s prompts, by label (each once)."""
    found = []
    for a in (a for row in job.rows for a in row.asserts):
        if a.kind == "python":
            found.append(a.label)
        found += [f"transform {t}" for t in a.transform if is_python_transform(t)]
    return list(dict.fromkeys(found))


def _read_suite(name: str, content: bytes, confined: bool, grader: str = "") -> Suite:
    """An uploaded promptfoo config; its file:// paths are read from the folder it was uploaded into with the files
    uploaded beside it (``name`` is its path there), else from the folder the workbench runs in. ``confined`` (a
    server listening beyond this machine): only from that upload folder, and nothing outside it (#43). ``grader``:
    the form's judge model, which grades instead of any grader the suite names (promptfoo's eval --grader)."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BatchInputError(f"the promptfoo config is not UTF-8 text (byte {exc.start})") from None
    folder = Path(name).parent
    uploaded = folder.is_absolute() and folder.is_dir()
    if confined:  # a config named without its upload folder reads no file at all: an empty folder of its own
        return read_suite(text, SuiteFiles(folder if uploaded and in_scratch(folder)
                                           else scratch_folder("batch-suite-"), confined=True), grader)
    return read_suite(text, folder if uploaded else Path.cwd(), grader)


def _cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[:length - 1] + "…"


def _md(text: str) -> str:
    """``text`` shown literally in Markdown."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~])", r"\\\1", text)


class BatchController:
    def __init__(self, services: Services) -> None:
        self.services, self.runner, self.store = services, services.batch_runner, services.batches

    # -- runs and their rows ----------------------------------------------------------------------------
    def run_choices(self) -> list[tuple[str, int]]:
        return [(f"#{r.number} {r.name} · {r.done}/{r.total} · {r.status}", r.id) for r in self.store.list()]

    def rows(self, run_id: int | None) -> list[ResultRow]:
        """The run's rows so far (a running run's live rows, else the stored ones); [] for no run."""
        if run_id is None:
            return []
        handle = self.runner.active(run_id)
        if handle is not None:
            return handle.rows()
        try:
            return [ResultRow.from_dict(d) for d in self.store.results(run_id)]
        except RunNotFound:
            return []

    # -- planning and running -----------------------------------------------------------------------------
    def job(self, form: BatchForm, params: SamplingParams) -> BatchJob:
        """The job ``form`` describes; ``params`` (the Parameters tab's) is the base when no preset is chosen. On a
        server listening beyond this machine, python asserts and transforms (code run with the server's rights) are
        refused unless it was started with --allow-python-asserts."""
        job = self._job(form, params)
        config = self.services.config
        scripts = _python_scripts(job) if config.listen and not config.allow_python_asserts else []
        if scripts:
            raise UserError(f"This server listens beyond this machine, so the Batch tab does not run Python "
                            f"({', '.join(scripts[:3])}{' ...' if len(scripts) > 3 else ''}): Python asserts and "
                            "transforms run with the server's rights. Use javascript asserts (sandboxed), run the "
                            "suite with `python launch.py batch` on the server, or restart it with "
                            "--allow-python-asserts if everyone who can log in may run code there.")
        return job

    @property
    def confined(self) -> bool:
        """Whether files a user names are read only from their own upload: on a server listening beyond this
        machine (#43)."""
        return self.services.config.listen

    def _job(self, form: BatchForm, params: SamplingParams) -> BatchJob:
        confined, budget = self.confined, grader_budget(form.judge_tokens)[0]  # a wrong one: not used (its message)
        try:
            if form.upload and is_config(form.upload[0]):
                suite = _read_suite(*form.upload, confined, form.local_judge())
                rows, options = with_asserts(suite.rows, form.asserts.splitlines(), not confined), suite.options
                rows = with_suite_tokens(rows, options.judge_tokens)  # the asserts' own budgets stay theirs
                samples = int(form.samples or 1)  # the form's when changed from 1, else the suite's repeat
                grid = GridSpec([], {}, samples if samples != 1 else options.samples, int(form.base_seed or 0),
                                base=params)
                return BatchJob(form.name.strip() or suite.description, rows, grid, form.system, form.raw,
                                settings=suite.settings, chat_template=self.services.settings.get().chat_template,
                                use_cache=form.use_cache and options.use_cache, judge_prompt=form.judge_prompt,
                                remote_judge=form.remote_judge(),
                                judge_model=form.local_judge() or options.judge_model,
                                derived_metrics=options.derived_metrics, judge_tokens=budget)
            template = form.template.strip() or None
            rows = (load_prompts_text(form.upload[0], form.upload[1], template, not confined) if form.upload
                    else parse_lines(form.prompts, template))
            rows = with_asserts(rows, form.asserts.splitlines(), not confined)
            grid = GridSpec(list(form.presets), parse_axes(form.axes), int(form.samples or 1),
                            int(form.base_seed or 0), base=params)
            return BatchJob(form.name.strip() or "Batch run", rows, grid, form.system, form.raw,
                            chat_template=self.services.settings.get().chat_template,  # the Chat tab's choice
                            use_cache=form.use_cache, judge_prompt=form.judge_prompt,
                            remote_judge=form.remote_judge(), judge_model=form.local_judge(),
                            judge_tokens=budget)
        except (BatchInputError, InvalidName) as exc:
            raise UserError(str(exc)) from exc

    def plan(self, job: BatchJob) -> str:
        """What the job will run: cells, token budget and a rough time."""
        try:
            settings, cells = self.runner.plan(job)
            slots = self.runner.models(job, self.services.owner)
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc
        engine = self.services.engine
        rate = engine.stats().tokens_per_second or 8.0 * min(len(cells), engine.config.max_running)
        budget = sum(c.params.max_new_tokens * most_turns(c.setting) for c in cells)
        seconds = budget / rate
        took = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
        template = "raw prompts (no chat template)" if job.raw else (
            f"chat template: {job.chat_template or 'the model’s own'} (chosen in Chat)")
        raw = [s.label for s in settings if s.raw]
        if raw and not job.raw:
            template += f"; raw prompts for {', '.join(_md(label) for label in raw)}"
        models = f" · models: {', '.join(s.name for s in slots.values())}" if len(slots) > 1 else ""
        return (f"**{len(job.rows)} prompts × {len(settings)} settings × {job.grid.samples} samples = "
                f"{len(cells)} cells** · at most {budget:,} tokens · roughly {took} or less · {template}{models}")

    def run(self, job: BatchJob) -> Iterator[Progress]:
        """Start ``job`` and follow it until it ends (a refresh every REFRESH_SECONDS)."""
        yield from self._follow(self._start(job), "Running", "")

    def rerun(self, run_id: int | None, use_cache: bool = True) -> Iterator[Progress]:
        """Run a stored run again with its stored settings (presets changed since do not matter), each on the model,
        loader and load options it ran on: loaded first when it is not, refused (naming it) when it cannot be;
        without the cache every cell is generated again."""
        stored = self._get(run_id)
        models = self.services.models
        try:
            name = rerun_name(stored.name, use_cache, {r.name for r in self.store.list()})
            job, needs, notes = self.runner.rerun_job(stored, name, use_cache)
            for need in needs:
                if not is_loaded(models, need):
                    yield Progress(stored.id, f"Loading {need.describe()} for the re-run…", False)
                provide(models, need)
        except (BatchInputError, RunNotFound) as exc:
            raise UserError(str(exc)) from exc
        yield from self._follow(self._start(job), "Re-running", "Re-run ", " ".join(notes))

    def cancel(self, run_id: int | None) -> str:
        if run_id is None or not self.runner.cancel(run_id):
            return "Nothing is running."
        return "Cancelling… finished rows are kept."

    def _start(self, job: BatchJob) -> RunHandle:
        try:
            return self.runner.start(job, self.services.owner)
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc

    def _follow(self, handle: RunHandle, doing: str, prefix: str, note: str = "") -> Iterator[Progress]:
        note = f" · {note}" if note else ""
        yield Progress(handle.run_id, f"{doing}: 0/{handle.total} done · starting{note}", False)
        while not handle.wait(REFRESH_SECONDS):
            eta = handle.eta_text()
            cached, generating, _ = handle.counts()
            yield Progress(handle.run_id, f"{doing}: {handle.done}/{handle.total} done"
                           + (f" · {generating} generating" if generating else "")
                           + (f" · {cached} from cache" if cached else "") + f" · {self._speed(handle, True)}"
                           + (f" · {eta}" if eta else "") + note, False)
        word = {"done": "Finished", "cancelled": "Cancelled", "failed": "Failed"}[handle.status]
        took = time.monotonic() - handle.started
        cached = handle.counts()[0]
        yield Progress(handle.run_id, f"{prefix}{word}: {handle.done}/{handle.total} rows in {took:.1f}s"
                                      + (f" · {cached} from cache" if cached else "")
                                      + f" · {self._speed(handle, False)}{note}", True)

    @staticmethod
    def _speed(handle: RunHandle, running: bool) -> str:
        """The tokens generated so far (running cells' too) and the run's aggregate tokens/s over them; cells taken
        from the cache generated nothing, so they add no tokens (a run all from the cache has no speed)."""
        tokens = handle.counts()[2]
        if not tokens:
            return "no token yet (reading the prompts)" if running else "no tokens generated, so no tok/s"
        elapsed = max(time.monotonic() - handle.started, 1e-6)
        return (f"{counted(tokens, grouped=True)} {'so far' if running else 'generated'}, {tokens / elapsed:.1f} "
                "tok/s for the whole run (each row's tok/s is its own share)")

    # -- stored runs ----------------------------------------------------------------------------------------
    def take_upload(self, paths: list[str]) -> tuple[tuple[str, bytes] | None, str]:
        """(the upload, the note beside it) of :meth:`upload_files`; a refused upload is None (the text box is used)
        and its note, which stays on the page, says why."""
        try:
            return self.upload_files(paths)
        except UserError as exc:
            return None, (f"⚠ **Not used**: {_md(str(exc))}  \nThe prompts in the text box are used until an "
                          "upload is accepted.")

    def upload_files(self, paths: list[str]) -> tuple[tuple[str, bytes], str]:
        """What :meth:`upload` gives for one file; for several, a promptfoo config and the files it reads, copied
        into a folder of their own so its ``file://`` paths find them (the config is named by its path there). On a
        server listening beyond this machine a config uploaded alone gets a folder of its own too: it reads no
        other file."""
        if len(paths) == 1 and not (self.confined and is_config(paths[0])):
            return self.upload(paths[0])
        configs = [p for p in paths if is_config(p)]
        if len(configs) != 1:
            raise UserError(f"Several files were uploaded: choose one promptfooconfig.yaml and the files it reads "
                            f"({len(configs)} .yaml files among them), or a single prompt file.")
        folder = scratch_folder("batch-suite-")
        for p in paths:
            shutil.copyfile(p, folder / Path(p).name)
        return self.upload(folder / Path(configs[0]).name, keep_path=True)

    def upload(self, path: str | Path, keep_path: bool = False) -> tuple[tuple[str, bytes], str]:
        """((file name, content), note) for a prompt file (``keep_path``: named by its whole path, a config among
        the files it reads); UserError says what is wrong with it."""
        path = Path(path)
        content = path.read_bytes()
        try:
            if is_config(path.name):
                name = str(path) if keep_path else path.name
                try:
                    suite = _read_suite(name, content, self.confined)
                except BatchInputError as exc:  # hosted graders: the judge model set here grades instead
                    if GRADER_HINT not in str(exc):
                        raise
                    suite = _read_suite(name, content, self.confined, "(the judge model of this form)")
                notes = "".join(f"  \nNote: {_md(n)}" for n in suite.notes)
                return (str(path) if keep_path else path.name, content), (
                    f"Using the promptfoo suite **{path.name}**: {len(suite.rows)} prompts × {len(suite.settings)} "
                    f"providers (its providers are the settings: the presets and axes here are not used).{notes}")
            count = len(load_prompts_text(path.name, content, files_allowed=not self.confined))
        except BatchInputError as exc:
            alone = is_config(path.name) and not keep_path and not self.confined and b"file://" in content
            raise UserError(str(exc) + (" (a promptfoo config's file:// files are read from beside it: choose the "
                                        "config and those files together in the upload dialog)" if alone else "")
                            ) from exc
        return (path.name, content), f"Using **{path.name}**: {count} prompts (the text box is ignored)."

    def reviewed(self, run_id: int | None, key: tuple[int, str, int] | None) -> str:
        """What the review panel says it reviews: row ``key`` (prompt index, setting, sample) of run ``run_id``, by
        its place in the run, prompt, setting, sample and seed, with its asserts and output; or what to do first."""
        rows = self.rows(run_id)
        found = next(((n, r) for n, r in enumerate(rows, 1) if key and (r.prompt_index, r.setting, r.sample)
                      == tuple(key)), None)
        if found is None:
            return NO_ROW
        number, row = found
        prompt = " ".join(row.prompt.split())
        model = f" · model {_md(row.model)}" if row.model else ""
        marks = " · ".join(("✓ " if a.passed else "✗ ") + _md(a.label) + (f" ({_md(a.detail)})" if a.detail else "")
                           for a in row.asserts) or "none"
        output = " ".join((f"[error: {row.error}]" if row.error is not None else row.output).split())
        return (f"**Reviewing row #{number} of {len(rows)}**: prompt {_md(row.prompt_id)} "
                f"“{_md(_cut(prompt, 80))}” · setting **{_md(row.setting)}** · sample {row.sample} · "
                f"seed {row.seed}{model}  \nAsserts: {marks}  \nOutput: {_md(_cut(output, 300)) or '(empty)'}")

    def review(self, run_id: int | None, key: tuple[int, str, int] | None, verdict: str | None, note: str) -> str:
        """Store a person's verdict on a row (``key``: prompt index, setting, sample); "" clears it."""
        rid = self._need(run_id)
        if key is None:
            raise UserError("Click the row to review first.")
        if self.runner.active(rid) is not None:
            raise UserError("The run is still going; review its rows when it has finished.")
        if verdict not in ("good", "bad", "", None):
            raise UserError(f"A review is good or bad, got {verdict!r}")
        review = {"verdict": verdict, "note": (note or "").strip()} if verdict else None
        if not self.store.set_review(rid, key[0], key[1], key[2], review):
            raise UserError("That row is not in this run any more; open the run again.")
        return f"Marked {verdict}." if verdict else "Review cleared."

    def form_of(self, run_id: int | None) -> tuple[BatchForm, str]:
        """The form that makes stored run ``run_id`` again (its prompts, asserts, grid, system prompt, name), to
        change and run; and a note on what it holds that the text boxes cannot (or "")."""
        run = self._get(run_id)
        try:
            values, note = form_values(run)
        except (BatchInputError, StoreError) as exc:
            raise UserError(f"run #{run.number} cannot fill the form: {exc}") from exc
        gone = [name for name in values["presets"] if name not in self.services.presets.names()]
        if gone:
            values["presets"] = tuple(n for n in values["presets"] if n not in gone)
            note = " ".join(filter(None, (note, f"The preset(s) {', '.join(gone)} it ran with no longer exist; "
                                                "Re-run still runs them as they were.")))
        return BatchForm(**values), note

    def rename(self, run_id: int | None, name: str) -> None:
        try:
            self.store.rename(self._need(run_id), name)
        except StoreError as exc:
            raise UserError(str(exc)) from exc

    def delete(self, run_id: int | None) -> None:
        try:
            self.store.delete(self._need(run_id))
        except StoreError as exc:
            raise UserError(str(exc)) from exc

    def export(self, run_id: int | None, kind: str) -> Path:
        """The run's rows as a CSV, JSONL or promptfoo-shaped JSON ("json") file in a new temporary folder."""
        rid = self._need(run_id)
        path = scratch_folder("batch-export-") / f"batch-run-{self._get(rid).number}.{kind}"
        rows = self.rows(rid)
        written = {"csv": to_csv, "jsonl": to_jsonl}.get(kind) or (lambda r: self._promptfoo(rid, r))
        path.write_text(written(rows), encoding="utf-8")
        return path

    def _promptfoo(self, run_id: int, rows: Iterable[ResultRow]) -> str:
        """The rows in promptfoo's results shape, with the run's prompts (vars, labels) and provider ids."""
        run = self._get(run_id)
        prompts = [PromptRow.from_dict(r) for r in run.spec.rows]
        providers = {s.label: s.provider for s in run.spec.settings if s.provider}
        return to_promptfoo(rows, run.name, prompts, providers, run.spec.derived_metrics or None)

    def inspect_row(self, run_id: int | None, row: ResultRow) -> MessageInspection:
        """What the model read for ``row`` of run ``run_id``, and the row's reproduce record."""
        run = self._get(run_id)
        name = row.model or run.model
        model = next((s.model for s in self.services.models.slots() if s.name == name), None)
        # runs stored before runs kept their loader: guess from what is loaded
        record = record_for_batch_row(run.model or "?", run.spec, row, model.loader if model else "transformers")
        which = f"prompt {row.prompt_id}, {row.setting}, sample {row.sample}"
        if model is None or not model.capabilities.tokenizes:
            return MessageInspection(which, None, f"Tokens need the local model that made this row ({name}) loaded "
                                                  "in the Model tab.", record)
        try:
            request = record.request(model.tokenizer)
            if not isinstance(request.prompt, str):
                raise RecordError("the row's prompt ends in token ids, not text")
            seen = inspect_rendered(model, request.prompt, request.add_special_tokens)
        except (InsightUnavailable, RecordError) as exc:
            return MessageInspection(which, None, f"Tokens are not available ({exc}).", record)
        return MessageInspection(which, seen, "", record)

    def _need(self, run_id: int | None) -> int:
        if run_id is None:
            raise UserError(NO_RUN)
        return run_id

    def _get(self, run_id: int | None) -> BatchRun:
        try:
            return self.store.get(self._need(run_id))
        except RunNotFound as exc:
            raise UserError(f"{exc}; it may have been deleted in another tab") from exc
