"""`python launch.py train --data FILE --name NAME [--model MODEL] [settings]`: train a LoRA adapter headless.

Writes <loras dir>/NAME (adapter_config.json, the weights and training.json), where the Model tab's LoRA panel
lists it. Every training setting is an option (from the one settings table); Ctrl-C stops after the current step
and saves a checkpoint that --resume continues. Exit code 0: the adapter is written; 2: bad input (nothing ran);
1: training failed or was stopped (the last checkpoint is kept).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from loaders.base import LoaderError
from webui.config import AppConfig, default_user_data_dir
from webui.training.data import preview, shipped_formats
from webui.training.settings import SETTINGS, TrainingError, help_table, parse_settings
from webui.training.trainer import (TrainJob, TrainProgress, base_model_folder, checkpoint_dir, failure_message,
                                    prepare, train)


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    from webui.catalog import DEFAULT_MODEL

    p = argparse.ArgumentParser(prog="python launch.py train", description=__doc__.splitlines()[0],
                                epilog="Training settings (each also an option above):\n" + help_table(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True,
                   help="the dataset: raw text (.txt), instruction records (.json/.jsonl with --format) or chat "
                        "records (.json/.jsonl, each with a 'messages' list)")
    p.add_argument("--format", help=f"the instruction records' format: {', '.join(shipped_formats())} or a "
                                    "text-generation-webui format file (.json)")
    p.add_argument("--name", required=True, help="the adapter's name: its folder in the loras dir")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the base model: a name from the Model tab or a folder/.gguf "
                                                          f"path (default {DEFAULT_MODEL})")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where to train (auto: CUDA if present)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--resume", action="store_true", help="continue the stopped run of --name from its checkpoint")
    p.add_argument("--force", action="store_true", help="replace an adapter of that name, or drop its checkpoint")
    p.add_argument("--preview", type=int, metavar="N", help="print the first N examples as the model sees them, "
                                                            "with token counts, and exit without training")
    p.add_argument("--user-data-dir", type=Path)
    group = p.add_argument_group("training settings")
    for spec in SETTINGS:
        extra: dict[str, Any] = {"nargs": "?", "const": "true"} if spec.kind is bool else {}
        group.add_argument(option(spec.name), dest=spec.name, metavar="VALUE" if spec.kind is not bool else "BOOL",
                           help=f"{spec.help} ({spec.describe()}; default {spec.default!r})", **extra)
    return p


def print_progress(p: TrainProgress) -> None:
    end = "\n" if p.step == p.total or not sys.stdout.isatty() else ""
    print(("\r" if sys.stdout.isatty() else "") + p.describe(), end=end, flush=True)


def _fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    from loaders.registry import default_registry
    from webui.catalog import Catalog

    args = build_parser().parse_args(argv)
    config = AppConfig(user_data_dir=args.user_data_dir or default_user_data_dir())
    config.make_dirs()
    assert config.loras_dir is not None, "set in AppConfig.__post_init__"
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        settings = parse_settings({s.name: getattr(args, s.name) for s in SETTINGS
                                   if getattr(args, s.name) is not None})
        if args.preview is not None and args.preview < 1:
            raise TrainingError(f"--preview takes a number of examples (1 or more), got {args.preview}")
        model_name, folder = base_model_folder(Catalog(config, default_registry()), args.model)
        job = TrainJob(args.name, model_name, folder, args.data, settings, config.loras_dir / str(args.name).strip(),
                       checkpoint_dir(config, str(args.name).strip()), args.format, args.device)
        job = prepare(job, force=args.force or args.preview is not None, resume=args.resume)
    except (TrainingError, LoaderError) as exc:
        return _fail(str(exc))
    assert job.dataset is not None, "prepared"
    data = job.dataset
    print(f"{data.kind} dataset {args.data.name}: {len(data.train)} training examples, {len(data.eval)} for eval, "
          f"{data.cut} cut at {settings.cutoff_len} tokens", flush=True)
    if args.preview is not None:
        from loaders.hf import folder_tokenizer

        for i, item in enumerate(preview(data, folder_tokenizer(folder), args.preview), 1):
            print(f"--- example {i}: {item.tokens} tokens, {item.trained_tokens} trained"
                  + (" (cut)" if item.cut else "") + f" ---\n{item.text}")
        return 0
    stop = threading.Event()

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print("\nstopping after this step and saving a checkpoint (Ctrl-C again to quit at once)", flush=True)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    print(f"training '{job.name}' on {model_name} ({job.device})" + (" from its checkpoint" if args.resume else ""),
          flush=True)
    try:
        result = train(job, print_progress, stop.is_set, resume=args.resume)
    except (TrainingError, LoaderError) as exc:
        return _fail(str(exc))
    except (RuntimeError, OSError, MemoryError) as exc:  # out of memory, a full disk: the last checkpoint stays
        return _fail(failure_message(exc, job), 1)
    except KeyboardInterrupt:  # a second Ctrl-C: quit without waiting for the step to end
        return _fail(f"interrupted; the last checkpoint (if any) is kept in {job.checkpoint}", 1)
    finally:
        signal.signal(signal.SIGINT, previous)
    if result.stopped:
        print(f"stopped at step {result.step}/{result.total}; continue with the same command and --resume",
              file=sys.stderr)
        return 1
    record = result.record
    print(f"done: wrote {result.out} ({record['seconds']:.0f} s, {record['tokens_per_s']:.0f} tok/s, final loss "
          f"{record['loss_curve'][-1][1]:.4f}); attach it in the Model tab's LoRA panel")
    return 0
