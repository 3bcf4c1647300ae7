"""TrainingController: the Training tab's behaviour. A dataset from the training folder (or uploaded into it), a
base model from the catalog, the settings from the one table (webui/training/settings.py); every input checked
before anything runs (the backend's messages, naming the tab's controls); the run in the background
(webui/training/runner.py) with its progress and loss curves; the adapter it writes attached (Attach: Chat then
runs with it), or compared in the A/B tab against its base and its perplexity measured on the run's eval split with
and without it (for those requests alone: the model's attached adapters stay as they were).

Datasets and format files live where text-generation-webui keeps them: ``<user data>/training/datasets`` and
``<user data>/training/formats``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from loaders.base import LoaderError, is_lora_model
from webui.controllers.ab import CURRENT, NO_ADAPTER, Side
from webui.controllers.errors import UserError
from webui.fsutil import atomic_copy
from webui.insight import InsightUnavailable, sequences_perplexity
from webui.models import Slot
from webui.names import InvalidName, check_name, inside
from webui.services import Services
from webui.training.data import (MAX_DATASET_BYTES, MAX_FORMAT_BYTES, RAW_SUFFIXES, RECORD_SUFFIXES, check_dataset,
                                 check_size, fits, load_format, preview, read_records, shipped_formats)
from webui.training.runner import DONE, FAILED, IDLE, LOADING, RUNNING, STOPPED, STOPPING, TRAINING, RunState
from webui.training.settings import TrainingError, parse_settings
from webui.training.trainer import TrainJob, Words, base_model_folder, checkpoint_dir, prepare
from webui.counts import counted

AUTO_FORMAT = "none: raw text (.txt) or chat records"
DATASET_SUFFIXES = RAW_SUFFIXES + RECORD_SUFFIXES
UI_WORDS = Words(name="adapter name", replace="tick 'Replace an adapter or checkpoint of that name'",
                 resume="press Resume", fresh="press Start")
CPU_NOTE = ("Training runs on the CPU beside the loaded models: chat, the API and training share its cores, so each "
            "is slower while it runs.")


@dataclass(frozen=True)
class TrainingForm:
    """What the tab's form says: the base model, the dataset and its format, the adapter's name, the settings."""

    model: str | None
    dataset: str | None
    format: str | None
    name: str
    values: Mapping[str, Any]
    """The training settings by name (the form's controls; eval_file is a dataset's name)."""
    device: str = "auto"
    replace: bool = False


@dataclass(frozen=True)
class TrainingView:
    """What the tab shows of the run: its phase, a status line, the progress bar, the loss curves."""

    state: RunState
    status: str
    fraction: float
    points: list[tuple[int, float, str]]
    """(step, loss, "train" or "eval") for the plot."""

    @property
    def running(self) -> bool:
        return self.state.running


class TrainingController:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.runner = services.training
        self.last_form: TrainingForm | None = None
        """The form of the last run started: a reloaded page shows it again, so Resume has what it needs."""

    # -- what there is ---------------------------------------------------------------------------------------
    @property
    def datasets_dir(self) -> Path:
        return self.services.config.training_dir / "datasets"

    @property
    def formats_dir(self) -> Path:
        return self.services.config.training_dir / "formats"

    def dataset_choices(self) -> list[str]:
        """The dataset files in the datasets folder."""
        folder = self.datasets_dir
        if not folder.is_dir():
            return []
        return sorted((p.name for p in folder.iterdir() if p.is_file() and p.suffix in DATASET_SUFFIXES
                       and not p.name.startswith(".")), key=str.lower)

    def format_choices(self) -> list[str]:
        """None (raw text or chat records), the shipped formats, then format files in the formats folder."""
        own = sorted(p.name for p in self.formats_dir.glob("*.json")) if self.formats_dir.is_dir() else []
        return [AUTO_FORMAT, *shipped_formats(), *own]

    def dataset_format(self, dataset: str | None, chosen: str | None) -> tuple[str, str]:
        """(the format to read the dataset ``dataset`` with, a note on what it holds for beside it): ``chosen`` when
        it reads the dataset, else the one the dataset needs (none for raw text and chat records; for instruction
        records the first format, shipped then own files, that reads every record). A dataset that cannot be read,
        or instruction records no format reads, keep ``chosen`` and the note says what to do."""
        chosen = chosen or AUTO_FORMAT
        if not dataset:
            return chosen, ""
        try:
            path = self._file(self.datasets_dir, dataset, "dataset")
            if path.suffix in RAW_SUFFIXES:
                return AUTO_FORMAT, f"**{dataset}** is raw text: it takes no format."
            records = read_records(path)
        except (UserError, TrainingError) as exc:
            return chosen, f"⚠ {exc}"
        if any("messages" in record for _, record in records):
            return AUTO_FORMAT, (f"**{dataset}** holds chat records: they are read with the model's chat template, "
                                 "no format.")
        keys = ", ".join(sorted({k for _, record in records for k in record}))
        reading = [name for name in ([chosen] if chosen != AUTO_FORMAT else []) + self.format_choices()[1:]
                   if self._reads(name, records)]
        if not reading:
            return chosen, (f"⚠ **{dataset}** holds instruction records (keys {keys}) that no format here reads: "
                            f"add a format file for them to {self.formats_dir}, then choose it.")
        return reading[0], (f"**{dataset}** holds instruction records (keys {keys}): the format **{reading[0]}** "
                            "reads every one" + (" (it is chosen for them)." if reading[0] != chosen else "."))

    def _reads(self, name: str, records: list[tuple[int, dict]]) -> bool:
        try:
            format_file = self._format(name)
            return format_file is not None and fits(records, load_format(format_file)[1])
        except (UserError, TrainingError):
            return False

    def model_choices(self) -> list[str]:
        return [e.name for e in self.services.models.catalog.available()]

    def default_model(self) -> str | None:
        """The model in use's catalog name, else the first there is."""
        slot = self.services.in_use()
        if slot is not None and slot.entry is not None:
            return slot.entry.name
        names = self.model_choices()
        return names[0] if names else None

    def upload(self, path: str | Path | None) -> str:
        """Copy an uploaded dataset into the datasets folder (replacing one of that name); its name there. The file
        is checked first (its size before anything is read, then its text or records), and copied whole or not at
        all: a bad upload leaves the folder as it was."""
        if not path:
            raise UserError("Choose a dataset file to upload.")
        source = Path(path)
        if source.suffix not in DATASET_SUFFIXES:
            raise UserError(f"'{source.name}' is not a dataset: upload a .txt or .md file (raw text) or a .json/"
                            ".jsonl file (instruction or chat records)")
        name = self._name("dataset", source.name)
        if not source.is_file():
            raise UserError(f"'{source.name}' is not a file; choose a dataset file to upload.")
        try:
            check_size(source, MAX_DATASET_BYTES)
            check_dataset(source)
            atomic_copy(source, self.datasets_dir / name)
        except (TrainingError, OSError) as exc:
            raise UserError(f"Could not upload the dataset: {exc}") from exc
        return name

    # -- checking a form -------------------------------------------------------------------------------------
    def job(self, form: TrainingForm, resume: bool = False) -> TrainJob:
        """The form as a prepared job: every input checked and the dataset read (nothing loads or trains)."""
        if not form.model:
            raise UserError("Choose a base model to train on.")
        if not form.dataset:
            raise UserError(f"Choose a dataset, or upload one (it is kept in {self.datasets_dir}).")
        data = self._file(self.datasets_dir, form.dataset, "dataset")
        values = dict(form.values)
        if values.get("eval_file"):
            values["eval_file"] = str(self._file(self.datasets_dir, values["eval_file"], "eval dataset"))
        name = str(form.name or "").strip()
        try:
            settings = parse_settings(values)
            model_name, folder = base_model_folder(self.services.models.catalog, form.model, paths=False,
                                                   progress=lambda f, m: None)
            config = self.services.config
            assert config.loras_dir is not None, "set in AppConfig.__post_init__"
            job = TrainJob(name, model_name, folder, data, settings, config.loras_dir / name,
                           checkpoint_dir(config, name), self._format(form.format), form.device or "auto")
            return prepare(job, force=form.replace, resume=resume, words=UI_WORDS)
        except (TrainingError, LoaderError, InvalidName) as exc:
            raise UserError(str(exc)) from exc

    def preview(self, form: TrainingForm, count: int = 3) -> str:
        """Markdown: the dataset's size, how many examples the cutoff cut, and the first examples as the model
        sees them with their token counts."""
        from loaders.hf import folder_tokenizer

        job = self.job(replace(form, name="preview", replace=True))  # a preview writes nothing: any name will do

        data = job.dataset
        assert data is not None, "prepared"
        lines = [f"**{data.kind}** dataset `{job.data.name}`: {len(data.train)} training examples, {len(data.eval)} "
                 f"for eval, **{data.cut} cut** at cutoff_len {job.settings.cutoff_len} tokens"]
        for i, item in enumerate(preview(data, folder_tokenizer(job.model_dir), count), 1):
            cut = " (cut at the cutoff)" if item.cut else ""
            lines.append(f"**Example {i}**: {counted(item.tokens)}, {item.trained_tokens} trained{cut}\n\n"
                         f"```text\n{item.text.replace('```', '` ` `')}\n```")
        return "\n\n".join(lines)

    def estimate(self, form: TrainingForm) -> str:
        """How long the form's run would take: its steps (from the dataset's size, epochs, batch sizes, or
        max_steps) times the time per step of a few of them run now on a copy of the model (nothing is saved), the
        eval passes and the model's loading."""
        job = self.job(replace(form, name=form.name or "estimate", replace=True))  # writes nothing: any name
        try:
            p = self.runner.probe(job)
        except (TrainingError, LoaderError) as exc:
            raise UserError(str(exc)) from exc
        evals = f" + {p.evals} eval passes × {p.eval_s:.2f} s" if p.evals else ""
        return (f"About **{_duration(p.seconds)}** on {job.device}: {p.total} steps × {p.step_s:.2f} s a step "
                f"(timed over {p.timed} of them just now){evals} + {p.load_s:.1f} s to load the model copy. "
                "Chat and API requests meanwhile share the device and slow it.")

    # -- running -------------------------------------------------------------------------------------------
    def start(self, form: TrainingForm, resume: bool = False) -> TrainingView:
        """Check the form and start the run (``resume``: from the checkpoint of the adapter name's stopped run)."""
        if self.runner.state().running:
            raise UserError(f"'{self.runner.state().name}' is training; stop it or wait until it ends.")
        job = self.job(form, resume=resume)
        try:
            self.runner.start(job, resume=resume)
        except (TrainingError, LoaderError) as exc:
            raise UserError(str(exc)) from exc
        self.last_form = replace(form, replace=False)
        return self.view()

    def stop(self) -> TrainingView:
        if not self.runner.stop():
            raise UserError("No training is running.")
        return self.view()

    def view(self) -> TrainingView:
        state = self.runner.state()
        points = [(step, loss, "train") for step, loss in state.curve] + \
                 [(step, loss, "eval") for step, loss in state.eval_curve]
        p = state.progress
        fraction = p.step / p.total if p else 0.0
        return TrainingView(state, self._status(state), 1.0 if state.phase == DONE else fraction, points)

    def _status(self, state: RunState) -> str:
        where = f"'{state.name}' on {state.model}"
        line = state.progress.describe() if state.progress else ""
        text = {
            IDLE: "No training has run since the workbench started.",
            LOADING: f"Loading {state.model} in float32 on {state.device} to train {where}…",
            TRAINING: f"Training {where}: {line}",
            STOPPING: f"Stopping {where} after this step and saving a checkpoint… {line}",
            STOPPED: f"Stopped {where}: {state.message}. Press Resume (same name and settings) to continue.",
            DONE: f"Done: {where}: {line}; {state.message}. It is listed in the Model tab's LoRA panel.",
            FAILED: f"⚠ Training {where} failed: {state.message}",
        }[state.phase]
        return text + (f"  \n{CPU_NOTE}" if state.phase in RUNNING and state.device == "cpu" else "")

    # -- the adapter it made ---------------------------------------------------------------------------------
    def finished(self) -> TrainJob:
        job = self.runner.last_job
        if job is None:
            raise UserError("Train an adapter first: these act on the adapter the last run wrote.")
        return job

    def base_slot(self, job: TrainJob) -> Slot:
        """The loaded base model the adapter was trained on."""
        for slot in self.services.models.slots():
            if slot.entry is not None and slot.entry.model_name == job.model_name and is_lora_model(slot.model):
                return slot
        raise UserError(f"Load {job.model_name} in the Model tab first (with a loader that applies LoRA adapters, "
                        f"e.g. transformers): the adapter '{job.name}' was trained on it.")

    def attach(self) -> str:
        """Attach the last run's adapter (weight 1) to its base model, if it is not attached yet."""
        job = self.finished()
        slot = self.base_slot(job)
        if job.name not in slot.loras:
            try:
                self.services.models.attach_lora(job.name, 1.0, model=slot.name)
            except (LoaderError, InvalidName) as exc:
                raise UserError(str(exc)) from exc
        return f"Attached **{job.name}** ×{slot.loras[job.name]:g} to {slot.name}."

    def load(self) -> tuple[Slot, tuple[tuple[str, float], ...]]:
        """The last run's base model, with its adapter loaded into it for the requests that name it (not made
        active: Chat and the API run as before), and that adapter at its weight (its attached one, else 1)."""
        job = self.finished()
        slot = self.base_slot(job)
        try:
            self.services.models.load_lora(job.name, slot.name)
        except (LoaderError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        return slot, ((job.name, slot.loras.get(job.name, 1.0)),)

    def ab_sides(self) -> tuple[Side, Side]:
        """A/B: the base model without the adapter against it with the adapter, that side's request alone."""
        slot, ((name, _),) = self.load()
        return Side(CURRENT, NO_ADAPTER, slot.name), Side(CURRENT, name, slot.name)

    def perplexity(self, progress: Any = None) -> str:
        """The perplexity of the run's eval split (its training data when it had none) without and with the
        adapter, both kept in Insight's perplexity list."""
        job = self.finished()
        slot, adapter = self.load()
        data = job.dataset
        assert data is not None, "prepared"
        examples, what = (data.eval, "eval split") if data.eval else (data.train, "training data (no eval split)")
        sequences = [(e.input_ids, e.labels) for e in examples]
        window = max(len(ids) for ids, _ in sequences)
        results = []
        for n, loras in enumerate(((), adapter)):
            step = (lambda f, m, n=n: progress((n + f) / 2, m)) if progress else None
            try:
                result = sequences_perplexity(slot.engine, sequences, window, loras, step)
            except (InsightUnavailable, ValueError) as exc:
                raise UserError(str(exc)) from exc
            self.services.perplexity.add(slot.name, slot.model.loader, loras, f"{job.data.name} ({what})",
                                         result.tokens, result.nll, result.ppl, result.window)
            results.append(result)
        before, after = results
        return (f"Perplexity on the {what} of `{job.data.name}` ({len(examples)} examples, {before.tokens:,} "
                f"trained tokens): **{before.ppl:.2f}** without the adapter, **{after.ppl:.2f}** with "
                f"**{job.name}** (also listed in Insight → Perplexity).")

    # -- helpers ---------------------------------------------------------------------------------------------
    def _name(self, kind: str, name: str) -> str:
        try:
            return check_name(kind, name)
        except InvalidName as exc:
            raise UserError(str(exc)) from exc

    def _file(self, folder: Path, name: str, kind: str, limit: int = MAX_DATASET_BYTES) -> Path:
        """The file ``name`` in ``folder`` (itself, not a link to a file elsewhere), if it is at most ``limit``
        bytes."""
        path = folder / self._name(kind, name)
        if not path.is_file():
            raise UserError(f"The {kind} '{name}' is not in {folder}; upload it or put it there.")
        try:
            check_size(inside(kind, folder, path), limit, kind)
        except (InvalidName, TrainingError, OSError) as exc:
            raise UserError(str(exc)) from exc
        return path

    def _format(self, chosen: str | None) -> str | None:
        """The format to read instruction records with: None, a shipped name, or a format file's path."""
        if not chosen or chosen == AUTO_FORMAT:
            return None
        if chosen in shipped_formats():
            return chosen
        return str(self._file(self.formats_dir, chosen, "format file", MAX_FORMAT_BYTES))


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min``."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"
