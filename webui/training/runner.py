"""A training run in the background of the workbench (the Training tab's): one at a time, beside the loaded models.

The run is a thread in the server's process: the engines keep serving chat and the API meanwhile (on a CPU they
share its cores, so both are slower). Its copy of the base model is counted in the loaded models' memory budget
(``ModelManager.reserve``) until it ends. Its state (phase, progress, the loss curves, the message that ends it)
is one frozen :class:`RunState`, replaced as the run goes, so any page reads it the same way at any time. Stop
asks the loop to stop after its current step; the trainer then saves a checkpoint that a later run resumes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from loaders.base import LoaderError
from webui.models import ModelManager
from webui.training.settings import TrainingError
from webui.training.trainer import (Probe, TrainJob, TrainProgress, checkpoint_curves, failure_message, memory_estimate,
                                    probe, train)

log = logging.getLogger(__name__)

IDLE, LOADING, TRAINING, STOPPING = "idle", "loading", "training", "stopping"
STOPPED, DONE, FAILED = "stopped", "done", "failed"
RUNNING = (LOADING, TRAINING, STOPPING)


class TrainingBusy(TrainingError):
    """A run is going; one runs at a time."""


@dataclass(frozen=True)
class RunState:
    phase: str = IDLE
    name: str = ""
    model: str = ""
    device: str = ""
    progress: TrainProgress | None = None
    curve: tuple[tuple[int, float], ...] = ()
    eval_curve: tuple[tuple[int, float], ...] = ()
    message: str = ""
    """Why it ended (failed), or where its checkpoint or adapter is."""
    out: Path | None = None
    """The finished adapter's folder."""
    version: int = 0
    """Counts the changes, so a page redraws only when something changed."""

    @property
    def running(self) -> bool:
        return self.phase in RUNNING


class TrainingRunner:
    """Runs one :class:`TrainJob` at a time in a thread; ``state()`` says how it goes."""

    def __init__(self, models: ModelManager) -> None:
        self.models = models
        self._lock = threading.Lock()
        self._state = RunState()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_job: TrainJob | None = None
        """The last job that finished (its dataset is the one the Training tab measures perplexity on)."""

    def state(self) -> RunState:
        return self._state

    def start(self, job: TrainJob, resume: bool = False) -> None:
        """Run the prepared ``job`` (``resume``: from its checkpoint) in the background. TrainingBusy while another
        runs; ModelLoadError when its model copy does not fit the memory budget."""
        with self._lock:
            if self._state.running:
                raise TrainingBusy(f"'{self._state.name}' is training; stop it or wait until it ends")
            holder = f"the training copy of {job.model_name} (for '{job.name}')"
            self.models.reserve(holder, memory_estimate(job))
            curve, eval_curve = checkpoint_curves(job) if resume else ([], [])
            self._stop.clear()
            self._set(RunState(LOADING, job.name, job.model_name, job.device,
                               curve=tuple((int(s), float(v)) for s, v in curve),
                               eval_curve=tuple((int(s), float(v)) for s, v in eval_curve)))
            self._thread = threading.Thread(target=self._run, args=(job, resume, holder), daemon=True,
                                            name=f"train-{job.name}")
            self._thread.start()

    def probe(self, job: TrainJob) -> Probe:
        """Time a few steps of the prepared ``job`` here and now (:func:`probe`), its model copy counted in the
        memory budget meanwhile. TrainingBusy while a run goes (it would share the cores and slow both)."""
        with self._lock:
            if self._state.running:
                raise TrainingBusy(f"'{self._state.name}' is training; estimate the time when it has ended")
            holder = f"the time probe of {job.model_name} (for '{job.name}')"
            self.models.reserve(holder, memory_estimate(job))
        try:
            return probe(job)
        finally:
            self.models.release(holder)

    def stop(self) -> bool:
        """Ask the run to stop after its current step (it saves a checkpoint); False when none runs."""
        with self._lock:
            if not self._state.running:
                return False
            self._stop.set()
            self._set(replace(self._state, phase=STOPPING))
            return True

    def close(self, timeout: float = 120) -> None:
        """Stop a run (the workbench is shutting down) and wait for its checkpoint to be saved."""
        self.stop()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _set(self, state: RunState) -> None:
        self._state = replace(state, version=self._state.version + 1)

    def _progress(self, p: TrainProgress) -> None:
        with self._lock:
            s = self._state
            evals = s.eval_curve
            if p.eval_step is not None and p.eval_loss is not None and (not evals or evals[-1][0] != p.eval_step):
                evals = (*evals, (p.eval_step, p.eval_loss))
            self._set(replace(s, phase=STOPPING if s.phase == STOPPING else TRAINING, progress=p,
                              curve=(*s.curve, (p.step, p.loss)), eval_curve=evals))

    def _run(self, job: TrainJob, resume: bool, holder: str) -> None:
        try:
            phase, message, out = self._train(job, resume)
        finally:
            self.models.release(holder)  # before the state says it ended: a load right after has the room
        self._end(phase, message, out)

    def _train(self, job: TrainJob, resume: bool) -> tuple[str, str, Path | None]:
        """(phase, message, adapter folder) the run ends with."""
        try:
            result = train(job, self._progress, self._stop.is_set, resume=resume)
        except (TrainingError, LoaderError) as exc:
            return FAILED, str(exc), None
        except Exception as exc:  # noqa: BLE001 - the thread's end: out of memory, a full disk, a backend's error
            log.exception("training '%s' failed", job.name)
            return FAILED, failure_message(exc, job), None
        if result.stopped:
            return STOPPED, f"stopped at step {result.step}/{result.total}; the checkpoint is kept in " \
                            f"{job.checkpoint}", None
        self.last_job = job
        return DONE, f"wrote {result.out}", result.out

    def _end(self, phase: str, message: str, out: Path | None = None) -> None:
        with self._lock:
            self._set(replace(self._state, phase=phase, message=message, out=out))
