"""`python launch.py quantize gptq|exl2 MODEL --bits 4`: make a GPTQ or EXL2 model folder from any HF model.

Runs offline. GPTQ (on the CPU or a GPU): the calibration text ships with the workbench
(webui/data/calibration.txt) or comes from --calibration. EXL2 (an NVIDIA GPU with CUDA
only): exllamav2's own converter with its built-in calibration data. The result is written
atomically into the models dir (or --out), where the Model tab lists it and the matching
loader picks it up.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from loaders.base import LoaderError, LoaderUnavailable, ModelLoadError, atomic_folder, missing_module
from webui.bootstrap import OPTIONAL_EXTRAS

CALIBRATION_FILE = Path(__file__).with_name("data") / "calibration.txt"
BITS = (2, 3, 4, 8)
EXL2_BITS = (2.0, 8.0)  # the range of average bits per weight exllamav2's converter can reach
GROUP_SIZES = (128, 64, 32)
LOADER_OF = {"gptq": "gptq", "exl2": "exllamav2"}  # method -> the loader (and optional extra) that runs its output
Progress = Callable[[str], None]


class QuantizeError(LoaderError):
    pass


def calibration_texts(path: Path | None = None) -> list[str]:
    """One sample per non-empty line; a literal \\n inside a line is a newline."""
    source = path or CALIBRATION_FILE
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise QuantizeError(f"cannot read the calibration file '{source}': {exc}") from exc
    texts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if len(texts) < 4:
        raise QuantizeError(f"the calibration file '{source}' has {len(texts)} samples; give at least 4 "
                            "(one text per line)")
    return texts


def linear_widths(model_dir: Path) -> tuple[int, ...]:
    """The input widths of the model's linear layers (hidden and MLP sizes) from its config.json."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise QuantizeError(f"'{model_dir}' has no readable config.json: {exc}") from exc
    return tuple(int(config[k]) for k in ("hidden_size", "intermediate_size") if isinstance(config.get(k), int))


def choose_group_size(widths: tuple[int, ...], asked: int | None) -> int:
    """``asked`` if every width divides by it, else the largest of GROUP_SIZES that does (576 -> 64)."""
    if asked is not None:
        bad = [w for w in widths if w % asked]
        if bad:
            fits = [g for g in GROUP_SIZES if all(w % g == 0 for w in widths)]
            raise QuantizeError(f"group size {asked} does not divide this model's layer width(s) "
                                f"{', '.join(map(str, bad))}; use " + (f"--group-size {fits[0]}" if fits else
                                                                       "a divisor of them"))
        return asked
    for size in GROUP_SIZES:
        if all(w % size == 0 for w in widths):
            return size
    raise QuantizeError(f"no group size in {GROUP_SIZES} divides the layer widths {widths}; pass --group-size")


def quantize_gptq(source: Path, out: Path, bits: int = 4, group_size: int | None = None,
                  calibration: list[str] | None = None, progress: Progress = print) -> Path:
    """Quantize the Hugging Face folder ``source`` to a GPTQ folder ``out`` (replaced only on success)."""
    if missing_module(["gptqmodel", "optimum"]):
        raise LoaderUnavailable("gptq", "gptqmodel", "python launch.py install gptq",
                                message="quantizing needs the gptq extra; install it with: "
                                        "python launch.py install gptq")
    if bits not in BITS:
        raise QuantizeError(f"--bits must be one of {', '.join(map(str, BITS))}, got {bits}")
    if not (source / "config.json").is_file():
        raise ModelLoadError(f"'{source}' is not a Hugging Face model folder (no config.json)")
    group = choose_group_size(linear_widths(source), group_size)
    texts = calibration or calibration_texts()
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(os.cpu_count() or 1))
    from gptqmodel import GPTQModel, QuantizeConfig

    from loaders.exllamav2_loader import cuda_available

    device = "cuda" if cuda_available() else "cpu"
    progress(f"quantizing {source.name} to {bits} bits, group size {group}, on {len(texts)} calibration texts, "
             f"on the {device.upper()}")
    start = time.monotonic()
    with atomic_folder(out) as tmp:
        with tempfile.TemporaryDirectory(prefix="gptq-") as scratch, _working_dir(scratch):
            # gptqmodel writes its per-layer logs to ./logs; keep them out of the user's working directory
            model = GPTQModel.load(str(source), QuantizeConfig(bits=bits, group_size=group), device=device)
            model.quantize(texts, batch_size=1)
        model.save(str(tmp))
    progress(f"wrote {out} in {time.monotonic() - start:.0f} s")
    return out


def check_exl2_ready(bits: float) -> None:
    """Raise unless EXL2 conversion can run here at ``bits``: before any slow work (such as converting a GGUF)."""
    from loaders.exllamav2_loader import INSTALL_HINT, cuda_available

    if not EXL2_BITS[0] <= bits <= EXL2_BITS[1]:
        raise QuantizeError(f"--bits for exl2 is the average bits per weight, from {EXL2_BITS[0]:g} to "
                            f"{EXL2_BITS[1]:g}; got {bits:g}")
    if not cuda_available():
        raise QuantizeError("converting to EXL2 runs exllamav2's CUDA kernels, and this machine has no NVIDIA "
                            "GPU with CUDA (quantize with gptq instead, which runs on a CPU)")
    if missing_module(["exllamav2"]):
        raise LoaderUnavailable("exllamav2", "exllamav2", INSTALL_HINT,
                                message=f"converting to EXL2 needs the exllamav2 extra; install it with: {INSTALL_HINT}")


def quantize_exl2(source: Path, out: Path, bits: float = 4.0, progress: Progress = print,
                  rows: int | None = None) -> Path:
    """Convert the Hugging Face folder ``source`` to an EXL2 folder ``out`` with exllamav2's converter.

    Needs an NVIDIA GPU with CUDA. The converter runs in a subprocess (it is a script); its
    working files go to a scratch folder and ``out`` is replaced only on success.
    """
    check_exl2_ready(bits)
    if not (source / "config.json").is_file():
        raise ModelLoadError(f"'{source}' is not a Hugging Face model folder (no config.json)")
    progress(f"converting {source.name} to EXL2 at {bits:g} bits per weight")
    start = time.monotonic()
    with atomic_folder(out) as tmp, tempfile.TemporaryDirectory(prefix="exl2-") as work:
        argv = [sys.executable, "-m", "exllamav2.conversion.convert_exl2", "-i", str(source), "-o", work,
                "-cf", str(tmp), "-b", f"{bits:g}", "-hb", "8" if bits >= 8 else "6"]
        if rows:  # fewer calibration rows: faster, a little less exact (the measurement pass takes a sixth)
            argv += ["-r", str(rows), "-mr", str(max(2, min(16, rows // 6)))]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None, "stdout=PIPE"
            for line in proc.stdout:
                progress(line.rstrip())
        if proc.returncode != 0 or not (tmp / "config.json").is_file():
            raise QuantizeError(f"exllamav2's converter failed (exit code {proc.returncode}); its output is above")
    progress(f"wrote {out} in {time.monotonic() - start:.0f} s")
    return out


@contextlib.contextmanager
def _working_dir(path: str) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python launch.py quantize", description=__doc__.splitlines()[0])
    p.add_argument("method", choices=list(LOADER_OF),
                   help="gptq (CPU or GPU, via gptqmodel) or exl2 (NVIDIA GPU only, via exllamav2)")
    p.add_argument("model", help="a model name from the Model tab (the default model included) or a folder path")
    p.add_argument("--bits", type=float, default=4,
                   help=f"gptq: one of {', '.join(map(str, BITS))}; exl2: average bits per weight, "
                        f"{EXL2_BITS[0]:g} to {EXL2_BITS[1]:g} (e.g. 4.65)")
    p.add_argument("--group-size", type=int, help="gptq: default 128, or the largest of 64/32 dividing the "
                                                  "layer widths")
    p.add_argument("--calibration", type=Path, help="gptq: a text file, one calibration sample per line")
    p.add_argument("--rows", type=int, help="exl2: calibration rows of 2048 tokens (default: exllamav2's 100); "
                                            "fewer convert a small model faster")
    p.add_argument("--out", type=Path, help="output folder (default: <models dir>/<model>-<method>-<bits>bit)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--user-data-dir", type=Path)
    return p


def main(argv: list[str]) -> int:
    from webui.config import AppConfig, default_user_data_dir
    from loaders.registry import default_registry
    from webui.catalog import Catalog

    args = build_parser().parse_args(argv)
    config = AppConfig(user_data_dir=args.user_data_dir or default_user_data_dir())
    config.make_dirs()
    catalog = Catalog(config, default_registry())  # it only finds and prepares models: nothing is loaded here
    try:
        if args.method == "gptq" and args.bits not in BITS:
            raise QuantizeError(f"--bits for gptq must be one of {', '.join(map(str, BITS))}, got {args.bits:g}")
        if args.method == "exl2":
            if args.calibration or args.group_size:
                raise QuantizeError("--calibration and --group-size apply to gptq; exl2 uses exllamav2's own "
                                    "calibration data and picks its bit layout per layer")
            if args.rows is not None and not 1 <= args.rows <= 1000:
                raise QuantizeError(f"--rows is the number of calibration rows, from 1 to 1000; got {args.rows}")
            check_exl2_ready(args.bits)
        elif args.rows is not None:
            raise QuantizeError("--rows applies to exl2; gptq calibrates on --calibration's texts")
        path = Path(args.model).expanduser()
        entry = catalog.entry_for_path(path) if path.exists() else catalog.resolve(args.model)
        name = entry.model_name
        assert config.models_dir is not None, "set in AppConfig.__post_init__"
        out = args.out or config.models_dir / f"{name}-{args.method}-{args.bits:g}bit"
        if out.exists() and not args.force:  # before the slow work below
            raise QuantizeError(f"'{out}' exists; pass --force to replace it or --out to write elsewhere")
        # quantizers read a Hugging Face folder: the transformers loader makes one of a .gguf (once)
        source = catalog.registry.get("transformers").prepare(entry.path, catalog.workdir(entry), lambda f, m: print(m))
        report = functools.partial(print, flush=True)
        if args.method == "gptq":
            texts = calibration_texts(args.calibration) if args.calibration else None
            quantize_gptq(source, out, int(args.bits), args.group_size, texts, progress=report)
        else:
            quantize_exl2(source, out, args.bits, progress=report, rows=args.rows)
    except LoaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if isinstance(exc, LoaderUnavailable):
            print(f"  ({OPTIONAL_EXTRAS[LOADER_OF[args.method]]})", file=sys.stderr)
        return 2
    print(f"done: load '{out.name}' from the Model tab (loader: {LOADER_OF[args.method]}, chosen automatically)")
    return 0
