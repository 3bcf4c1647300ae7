"""The LoRA training loop: plain PyTorch over peft, so progress, stopping and resuming stay simple.

:func:`prepare` does everything that can fail on bad input (settings, the adapter name, the dataset, the base
model's format) before any weights load; :func:`train` then loads the base model with transformers in float32
(on CUDA when asked and present), wraps it with a peft LoRA and runs micro-batches with gradient accumulation,
AdamW and transformers' warm-up schedules. Each optimizer step calls ``progress`` (step, total, loss, eval loss,
tokens/s, ETA) and checks ``stop``; a stop, and every ``save_every`` steps, save a checkpoint (the adapter, the
optimizer, the scheduler, the RNG states, the step) that ``resume=True`` continues from, to the same result as a
run that never stopped. The finished adapter is written atomically to ``<loras_dir>/NAME`` with ``training.json``
inside it: the base model and its fingerprint, the dataset and its SHA-256, every setting, the loss curve, time.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from loaders.base import ModelLoadError, atomic_folder
from loaders.hf import content_key, folder_tokenizer, from_pretrained, hf_load_kwargs, quant_method, resolve_device
from loaders.options import LoadOptionError
from webui.catalog import Catalog
from webui.config import AppConfig
from webui.names import InvalidName, check_name
from webui.training.data import IGNORE, Dataset, Example, load_dataset
from webui.training.settings import TrainingError, TrainingSettings

RECORD = "training.json"
STATE = "trainer_state.pt"
SCHEDULER_NAMES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


@dataclass(frozen=True)
class TrainProgress:
    step: int
    total: int
    loss: float
    eval_loss: float | None
    tokens_per_s: float
    eta_s: float
    eval_step: int | None = None
    """The step eval_loss was measured at (None: not yet)."""

    def describe(self) -> str:
        """``step 3/10  loss 2.3104  eval 2.4000  812 tok/s  ETA 0:00:12`` (the CLI's line, the tab's status)."""
        eta = int(self.eta_s)
        return (f"step {self.step}/{self.total}  loss {self.loss:.4f}"
                + (f"  eval {self.eval_loss:.4f}" if self.eval_loss is not None else "")
                + f"  {self.tokens_per_s:.0f} tok/s  ETA {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}")


@dataclass(frozen=True)
class Words:
    """How a refusal names the ways on: the CLI's options (the default) or the Training tab's controls."""
    name: str = "--name"
    replace: str = "pass --force"
    resume: str = "pass --resume"
    fresh: str = "start without --resume"


CLI_WORDS = Words()


@dataclass
class TrainJob:
    """What to train: validated by :func:`prepare`."""
    name: str
    model_name: str
    model_dir: Path
    """A Hugging Face folder of plain weights (a .gguf already converted, see :func:`base_model_folder`)."""
    data: Path
    settings: TrainingSettings
    out: Path
    """The adapter folder to write (``<loras_dir>/NAME``)."""
    checkpoint: Path
    format_name: str | None = None
    device: str = "cpu"
    dataset: Dataset | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TrainResult:
    out: Path | None
    """The adapter folder; None when stopped (the checkpoint is kept)."""
    step: int
    total: int
    stopped: bool
    record: dict


def base_model_folder(catalog: Catalog, model: str, paths: bool = True,
                      progress: Callable[[float, str], None] | None = None) -> tuple[str, Path]:
    """The name and Hugging Face folder of ``model`` (a catalog name, the default model too, or with ``paths`` a
    path: the command line's, never a name from the UI).

    Training always reads the weights with transformers: a .gguf is converted once (the folder the transformers
    loader makes for it); a model only another loader reads (GPTQ, EXL2, a remote server) is refused.
    """
    path = Path(model).expanduser()
    entry = catalog.entry_for_path(path) if paths and path.exists() else catalog.resolve(model)
    transformers = catalog.registry.get("transformers")
    if transformers.match(entry.path) <= 0:
        method = quant_method(entry.path)
        what = f"a {method} model" if method else f"'{entry.path.name}'"
        raise ModelLoadError(f"cannot train on {what}: training loads a model's plain weights with transformers, "
                             "which cannot read it; train on the original (unquantized) Hugging Face folder or "
                             ".gguf file")
    folder = transformers.prepare(entry.path, catalog.workdir(entry),
                                  progress or (lambda f, m: print(m, flush=True)))
    return entry.model_name, Path(folder)


def checkpoint_dir(config: AppConfig, name: str) -> Path:
    """Where a stopped run of adapter ``name`` keeps its checkpoint (outside the loras dir: not an adapter yet)."""
    return config.training_dir / "checkpoints" / name


def model_fingerprint(folder: Path) -> str:
    """SHA-256 over each weight file's name, size and first MiB: tells base models apart without reading GBs."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".gguf"))
    for path in files:
        digest.update(f"{path.name}:{path.stat().st_size}:".encode())
        with path.open("rb") as f:
            digest.update(f.read(2**20))
    return digest.hexdigest()


def prepare(job: TrainJob, force: bool = False, resume: bool = False, words: Words = CLI_WORDS) -> TrainJob:
    """Check everything a user can get wrong, before any weights load; returns the job with its dataset read.
    ``words`` name the ways on in the messages (the CLI's options by default)."""
    try:
        check_name("LoRA adapter", job.name)
    except InvalidName as exc:
        raise TrainingError(str(exc)) from None
    if job.out.exists() and not force:
        raise TrainingError(f"an adapter named '{job.name}' exists ({job.out}); choose another {words.name} or "
                            f"{words.replace} to replace it")
    if resume and not (job.checkpoint / STATE).is_file():
        raise TrainingError(f"there is no checkpoint of '{job.name}' to resume ({job.checkpoint}); {words.fresh}")
    if not resume and (job.checkpoint / STATE).is_file() and not force:
        raise TrainingError(f"'{job.name}' has a checkpoint from a stopped run; {words.resume} to continue it or "
                            f"{words.replace} to start over")
    tokenizer = folder_tokenizer(job.model_dir)
    dataset = load_dataset(job.data, tokenizer, job.settings, job.format_name)
    job.dataset = dataset
    job.device = resolve_device(job.device)
    quantized_base(job)
    if resume:
        check_resumable(job, _read_state(job), words)
    return job


def quantized_base(job: TrainJob) -> dict[str, Any]:
    """from_pretrained's arguments that hold the base model in 8 or 4 bits (QLoRA; the ``load_in`` setting), {}
    for full weights; a TrainingError off CUDA or without bitsandbytes, before any weights load."""
    load_in = job.settings.load_in
    if load_in == "full":
        return {}
    if not job.device.startswith("cuda"):
        raise TrainingError(f"load_in {load_in} (QLoRA) needs a CUDA GPU: bitsandbytes' 8-bit and 4-bit kernels "
                            f"run there, and this run is on {job.device}; set load_in to full (the base model is "
                            "then held in float32)")
    try:
        return hf_load_kwargs({"load_in": load_in}, job.device, "bfloat16")
    except LoadOptionError as exc:
        raise TrainingError(str(exc).replace("choose full", "set load_in to full")) from None


def memory_estimate(job: TrainJob) -> int:
    """Roughly what a run takes beside the loaded models: its own copy of the base model (float32, or 8 or 4 bits
    with load_in), and one micro-batch's activations kept for the backward pass (the logits and each layer's
    intermediate values)."""
    from loaders.hf import loaded_bytes

    config = json.loads((job.model_dir / "config.json").read_text())
    config = config.get("text_config", config)
    s = job.settings
    tokens = s.micro_batch_size * s.cutoff_len
    per_token = 3 * int(config.get("vocab_size") or 0) + 24 * int(config.get("hidden_size") or 0) * int(
        config.get("num_hidden_layers") or 0)
    weights = loaded_bytes(job.model_dir, "float32") * {"8bit": 1, "4bit": 0.5}.get(s.load_in, 4) / 4
    return int(weights) + tokens * per_token * 4


def total_steps(settings: TrainingSettings, examples: int) -> int:
    if settings.max_steps:
        return settings.max_steps
    per_epoch = math.ceil(examples / settings.micro_batch_size)
    return max(1, math.floor(settings.epochs * per_epoch / settings.grad_accum))


def micro_batch(settings: TrainingSettings, examples: int, index: int) -> list[int]:
    """The example indices of micro-batch ``index`` (each epoch in its own seeded order: resumable by index)."""
    per_epoch = math.ceil(examples / settings.micro_batch_size)
    epoch, slot = divmod(index, per_epoch)
    order = list(range(examples))
    random.Random(settings.seed * 100_003 + epoch).shuffle(order)
    return order[slot * settings.micro_batch_size:(slot + 1) * settings.micro_batch_size]


def collate(examples: list[Example], pad_id: int, device: str) -> dict[str, Any]:
    """Right-padded input ids, attention mask and labels (-100 on padding)."""
    import torch

    width = max(len(e.input_ids) for e in examples)
    ids = [e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in examples]
    mask = [[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in examples]
    labels = [e.labels + [IGNORE] * (width - len(e.labels)) for e in examples]
    return {"input_ids": torch.tensor(ids, device=device), "attention_mask": torch.tensor(mask, device=device),
            "labels": torch.tensor(labels, device=device)}


def token_loss_sum(model: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """The summed next-token loss over labelled tokens, and how many there were."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # shift the labels, not the logits: slicing [batch, length, vocab] logits would copy them
    targets = torch.nn.functional.pad(batch["labels"][:, 1:], (0, 1), value=IGNORE)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE,
                                             reduction="sum")
    return loss, int((targets != IGNORE).sum())


def eval_loss(model: Any, examples: list[Example], settings: TrainingSettings, pad_id: int, device: str) -> float:
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), settings.micro_batch_size):
            loss, n = token_loss_sum(model, collate(examples[start:start + settings.micro_batch_size], pad_id,
                                                    device))
            total, count = total + float(loss), count + n
    model.train()
    return total / max(count, 1)


def build_model(job: TrainJob) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model

    quantized = quantized_base(job)
    model, _ = from_pretrained(job.model_dir, job.device, "float32", **quantized)
    if quantized:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    s = job.settings
    torch.manual_seed(s.seed)  # the adapter's initial weights
    config = LoraConfig(r=s.rank, lora_alpha=s.alpha, lora_dropout=s.dropout, target_modules=s.modules(),
                        task_type="CAUSAL_LM")
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise TrainingError(f"target_modules '{s.target_modules}' does not fit this model: {exc}") from exc
    peft_model.train()
    return peft_model


def _pad_id(job: TrainJob) -> int:
    config = json.loads((job.model_dir / "config.json").read_text())
    for key in ("pad_token_id", "eos_token_id"):
        value = config.get(key)
        value = value[0] if isinstance(value, list) and value else value
        if isinstance(value, int):
            return value
    return 0


def _state_of(job: TrainJob) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the same settings, dataset and base model."""
    return {"settings": job.settings.as_dict(), "data_sha256": content_key(job.data)["sha256"],
            "format": job.format_name, "model": model_fingerprint(job.model_dir)}


def save_checkpoint(job: TrainJob, model: Any, optimizer: Any, scheduler: Any, step: int, run: dict) -> None:
    import torch

    with atomic_folder(job.checkpoint) as tmp:
        model.save_pretrained(tmp)
        torch.save({**_state_of(job), "step": step, "run": run, "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
                   tmp / STATE)


def _read_state(job: TrainJob) -> dict[str, Any]:
    import torch

    return torch.load(job.checkpoint / STATE, weights_only=False, map_location=job.device)


def check_resumable(job: TrainJob, state: dict[str, Any], words: Words = CLI_WORDS) -> None:
    """A checkpoint continues only the run that made it: the same settings, dataset and base model."""
    for key, value in _state_of(job).items():
        if state.get(key) != value:
            raise TrainingError(f"the checkpoint of '{job.name}' was made with another {key.replace('_', ' ')}; "
                                f"resume with the same dataset, model and settings, or {words.replace} to start "
                                "over")


def checkpoint_curves(job: TrainJob) -> tuple[list[list], list[list]]:
    """The loss and eval loss curves (``[step, loss]`` lists) of the stopped run that ``job`` resumes."""
    run = _read_state(job)["run"]
    return list(run["curve"]), list(run["eval_curve"])


def load_checkpoint(job: TrainJob, model: Any, optimizer: Any, scheduler: Any) -> tuple[int, dict]:
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = _read_state(job)
    check_resumable(job, state)
    set_peft_model_state_dict(model, load_file(job.checkpoint / "adapter_model.safetensors", device=job.device))
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"]), dict(state["run"])


def _optimizer(model: Any, s: TrainingSettings, total: int) -> tuple[Any, Any]:
    """The run's AdamW over the adapter's weights and its learning-rate schedule over ``total`` steps."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.learning_rate)
    return optimizer, get_scheduler(SCHEDULER_NAMES[s.scheduler], optimizer, num_warmup_steps=s.warmup_steps,
                                    num_training_steps=total)


def train_step(job: TrainJob, model: Any, optimizer: Any, scheduler: Any, step: int, pad_id: int
               ) -> tuple[float, int]:
    """Optimizer step ``step`` of the run (its micro-batches, gradients accumulated): (its loss per labelled token,
    the tokens it read)."""
    s, data = job.settings, job.dataset
    assert data is not None, "prepared"
    step_loss, step_tokens = 0.0, 0
    micro = [collate([data.train[i] for i in micro_batch(s, len(data.train), step * s.grad_accum + k)],
                     pad_id, job.device) for k in range(s.grad_accum)]
    labelled = sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in micro)
    for batch in micro:
        loss, _ = token_loss_sum(model, batch)
        (loss / max(labelled, 1)).backward()
        step_loss += float(loss.detach())
        step_tokens += int(batch["attention_mask"].sum())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return step_loss / max(labelled, 1), step_tokens


@dataclass(frozen=True)
class Probe:
    """How long a run would take, from a few of its steps timed (:func:`probe`)."""

    total: int
    """The run's optimizer steps."""
    timed: int
    """How many steps the time per step was measured over."""
    step_s: float
    evals: int
    """How many times the run measures the eval loss."""
    eval_s: float
    load_s: float
    """Loading the model copy the run trains."""

    @property
    def seconds(self) -> float:
        return self.load_s + self.total * self.step_s + self.evals * self.eval_s


PROBE_STEPS = 3
"""Optimizer steps a probe makes: the first warms up (allocations, kernels), the others are timed."""


def probe(job: TrainJob, steps: int = PROBE_STEPS) -> Probe:
    """Time the prepared ``job``'s first steps (on a copy of the model; nothing is saved) and one eval pass: what
    the whole run would take at that pace."""
    import torch

    if job.dataset is None:
        raise TrainingError("prepare(job) reads and checks the dataset first")
    s, data = job.settings, job.dataset
    total = total_steps(s, len(data.train))
    started = time.monotonic()
    model = build_model(job)
    optimizer, scheduler = _optimizer(model, s, total)
    torch.manual_seed(s.seed + 1)
    pad_id = _pad_id(job)
    load_s = time.monotonic() - started
    made = min(steps, total)
    times = []
    for step in range(made):
        begun = time.monotonic()
        train_step(job, model, optimizer, scheduler, step, pad_id)
        times.append(time.monotonic() - begun)
    timed = times[1:] or times  # the first step warms up
    eval_s = 0.0
    if data.eval:
        begun = time.monotonic()
        eval_loss(model, data.eval, s, pad_id, job.device)
        eval_s = time.monotonic() - begun
    evals = (total // s.eval_every + (1 if total % s.eval_every else 0)) if data.eval else 0
    return Probe(total, len(timed), sum(timed) / len(timed), evals, eval_s, load_s)


def train(job: TrainJob, progress: Callable[[TrainProgress], None] | None = None,
          stop: Callable[[], bool] | None = None, resume: bool = False) -> TrainResult:
    """Train the prepared ``job`` to its end or until ``stop()`` is true (then a checkpoint is saved)."""
    import torch

    if job.dataset is None:
        raise TrainingError("prepare(job) reads and checks the dataset first")
    s, data = job.settings, job.dataset
    total = total_steps(s, len(data.train))
    model = build_model(job)
    optimizer, scheduler = _optimizer(model, s, total)
    run: dict = {"curve": [], "eval_curve": [], "seconds": 0.0, "tokens": 0}
    step = 0
    if resume:
        step, run = load_checkpoint(job, model, optimizer, scheduler)
    else:
        torch.manual_seed(s.seed + 1)  # dropout's stream, the same whether or not a run is resumed
    pad_id, started, start_step, tokens_now = _pad_id(job), time.monotonic(), step, 0
    last_eval: float | None = run["eval_curve"][-1][1] if run["eval_curve"] else None
    eval_step: int | None = run["eval_curve"][-1][0] if run["eval_curve"] else None
    while step < total:
        loss, step_tokens = train_step(job, model, optimizer, scheduler, step, pad_id)
        step += 1
        tokens_now += step_tokens
        run["curve"].append([step, loss])
        if data.eval and (step % s.eval_every == 0 or step == total):
            last_eval, eval_step = eval_loss(model, data.eval, s, pad_id, job.device), step
            run["eval_curve"].append([step, last_eval])
        spent = time.monotonic() - started
        if progress is not None:
            done = step - start_step
            progress(TrainProgress(step, total, run["curve"][-1][1], last_eval, tokens_now / max(spent, 1e-9),
                                   spent / done * (total - step), eval_step))
        stopping = stop is not None and stop() and step < total
        if stopping or (s.save_every and step % s.save_every == 0 and step < total):
            save_checkpoint(job, model, optimizer, scheduler, step, _run_totals(run, spent, tokens_now))
        if stopping:
            return TrainResult(None, step, total, True, _run_totals(run, spent, tokens_now))
    record = training_record(job, total, _run_totals(run, time.monotonic() - started, tokens_now))
    with atomic_folder(job.out) as tmp:
        model.save_pretrained(tmp)
        (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(job.checkpoint, ignore_errors=True)
    return TrainResult(job.out, step, total, False, record)


def failure_message(exc: BaseException, job: TrainJob) -> str:
    """What a run that broke off says: the cause named (out of memory, a full disk), and that the last checkpoint
    stays."""
    import errno

    text = str(exc) or type(exc).__name__
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        cause = f"out of memory ({text}); lower micro_batch_size or cutoff_len, or free memory"
    elif isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        cause = f"the disk is full ({text}); free some space"
    else:
        cause = text
    return f"training failed: {cause}; the last checkpoint (if any) is kept in {job.checkpoint}"


def _run_totals(run: dict, seconds: float, tokens: int) -> dict:
    """``run`` with this stretch's time and tokens added (a resumed run adds up its stretches)."""
    return {**run, "seconds": run["seconds"] + seconds, "tokens": run["tokens"] + tokens}


def training_record(job: TrainJob, total: int, run: dict) -> dict:
    """What training.json says: enough to know what the adapter is and to train it again."""
    import peft
    import torch
    import transformers

    assert job.dataset is not None, "prepared"
    data = content_key(job.data)
    return {
        "name": job.name,
        "base_model": {"name": job.model_name, "path": str(job.model_dir),
                       "fingerprint": model_fingerprint(job.model_dir)},
        "dataset": {"name": job.data.name, "sha256": data["sha256"], "size": data["size"], "kind": job.dataset.kind,
                    "format": job.format_name, "train_examples": len(job.dataset.train),
                    "eval_examples": len(job.dataset.eval), "cut_by_cutoff": job.dataset.cut},
        "settings": job.settings.as_dict(),
        "steps": total,
        "loss_curve": run["curve"],
        "eval_loss_curve": run["eval_curve"],
        "seconds": round(run["seconds"], 3),
        "tokens_per_s": round(run["tokens"] / max(run["seconds"], 1e-9), 1),
        "device": job.device,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
