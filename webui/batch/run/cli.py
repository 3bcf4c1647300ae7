"""`python launch.py batch PROMPTS_FILE ...`: a batch run without a browser, for scripts and CI.

PROMPTS_FILE is a prompt file (.txt, .csv, .jsonl) or a promptfoo config
(promptfooconfig.yaml: its prompts x tests, asserts and providers as settings).
Progress goes to the terminal, results to --out (.jsonl, .csv, or .json in
promptfoo's output shape) and to the workbench's database like a run from the
Batch tab. The exit code is 1 when a setting's assert pass rate is below
--min-pass-rate, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loaders.base import DTYPES, LoaderError
from webui.batch.asserts.kinds import kinds_help
from webui.batch.asserts.errors import BatchInputError
from webui.batch.run.export import to_csv, to_jsonl
from webui.batch.run.grid import DEFAULT_MAX_CELLS, GridSpec, parse_axis
from webui.batch.run.judge import JUDGE_PROMPT, RemoteJudge, with_suite_tokens
from webui.batch.run.prompts import load_prompts, unescape_newlines
from webui.batch.promptfoo.reader import is_config, load_suite
from webui.batch.promptfoo.export import to_promptfoo
from webui.batch.promptfoo.options import SuiteOptions, grader_model
from webui.batch.run.results import ResultRow, summarize
from webui.batch.run.handle import RunHandle
from webui.batch.run.runner import BatchJob
from webui.config import AppConfig, default_user_data_dir
from webui.names import InvalidName
from webui.store import StoreError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python launch.py batch", description=__doc__.splitlines()[0],
                                epilog=f"Asserts in a prompt file (kind:value): {kinds_help()}; not- before any.")
    p.add_argument("prompts", type=Path, help="prompts: .txt (one per line), .csv or .jsonl, or a promptfoo config "
                                              "(promptfooconfig.yaml)")
    p.add_argument("--preset", nargs="+", default=[], metavar="NAME", help="presets to compare (grid dimension)")
    p.add_argument("--grid", action="append", default=[], metavar="PARAM=V1,V2",
                   help="vary a sampling parameter, e.g. --grid temperature=0,0.7 (repeatable)")
    p.add_argument("--samples", type=int, help="samples per prompt and setting (seeds base+0, base+1, ...; default 1, "
                                               "a promptfoo suite's evaluateOptions.repeat)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--template", help="prompt template with {{column}} variables (CSV/JSONL columns)")
    p.add_argument("--system-prompt", default="", help="system prompt for the chat template")
    p.add_argument("--raw", action="store_true", help="send prompts as they are, without the chat template")
    p.add_argument("--chat-template", default="", metavar="NAME",
                   help="instruction template: a built-in (ChatML, Llama 3, Mistral, Gemma, Phi-3, Alpaca, Vicuna, "
                        "User/Assistant) or one saved in the user data dir (default: the model's own)")
    p.add_argument("--judge-prompt", type=Path, metavar="FILE",
                   help="what the judge model is asked for llm-rubric asserts ({{output}}, {{rubric}}); "
                        "default: the built-in prompt")
    p.add_argument("--judge-url", metavar="URL", help="an OpenAI-compatible server (its /v1 URL) that judges the "
                                                    "model-graded asserts (llm-rubric, factuality, g-eval...) instead "
                                                    "of the loaded model; its key: the environment variable "
                                                    "WORKBENCH_JUDGE_API_KEY")
    p.add_argument("--judge-model", default="", help="with --judge-url: the model name to ask the judge server for; "
                                                     "without: a model to load beside the tested ones that judges "
                                                     "(NAME or NAME@loader; default: the model in use)")
    p.add_argument("--grader", default="", metavar="ID",
                   help="promptfoo's eval --grader: the model that grades every model-graded assert, over any grader "
                        "the suite names (defaultTest.options.provider, an assert's provider): workbench:NAME or NAME, "
                        "a model loaded beside the tested ones")
    p.add_argument("--grader-max-tokens", type=int, metavar="N",
                   help="the most tokens the judge writes per grading step (as promptfoo's grader config max_tokens), "
                        "over any budget the suite gives (an assert's provider config.max_tokens, then "
                        "defaultTest.options.provider config.max_tokens); default: those, else each step's own "
                        "budget, 256-768; a small judge stops sooner")
    p.add_argument("--no-cache", action="store_true",
                   help="generate every cell, even one whose whole request already ran (default: reuse it)")
    p.add_argument("--max-cells", type=int, default=DEFAULT_MAX_CELLS, help="refuse grids larger than this")
    p.add_argument("--name", help="name of the stored run (default: the prompts file name)")
    p.add_argument("--out", type=Path, help="write results here (.jsonl, .csv, or .json: promptfoo's output shape)")
    p.add_argument("--min-pass-rate", type=float, help="exit 1 if a setting's assert pass rate is below this (0-1)")
    p.add_argument("--model", help="model name or path (default: the default model); --grid model=A,B@llamacpp "
                                   "compares loaded models instead (each loaded beside the others)")
    p.add_argument("--loader")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=DTYPES)
    p.add_argument("--threads", type=int)
    p.add_argument("--user-data-dir", type=Path)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.out is not None and args.out.suffix not in (".jsonl", ".csv", ".json"):
        return _fail(f"--out must end in .jsonl, .csv or .json (promptfoo's shape), got '{args.out}'")
    if args.grader_max_tokens is not None and args.grader_max_tokens < 1:
        return _fail(f"--grader-max-tokens must be 1 or more, got {args.grader_max_tokens}")
    if args.min_pass_rate is not None and not 0 <= args.min_pass_rate <= 1:
        return _fail(f"--min-pass-rate must be between 0 and 1, got {args.min_pass_rate}")
    settings, description, options = None, "", SuiteOptions()
    try:
        grader = grader_model(args.grader) if args.grader else ""
        if grader and (args.judge_url or args.judge_model):
            raise BatchInputError("--grader names the judge; leave out --judge-url and --judge-model with it")
        if is_config(args.prompts):
            if args.preset or args.grid or args.template:
                raise BatchInputError("a promptfoo config brings its own prompts and providers (settings); "
                                      "--preset, --grid and --template do not apply to it")
            suite = load_suite(args.prompts, grader)
            description, settings, options = suite.description, suite.settings, suite.options
            rows = with_suite_tokens(suite.rows, options.judge_tokens)  # the asserts' own budgets stay theirs
            for note in suite.notes:  # what the suite names that is not applied, each once
                print(f"note: {note}", file=sys.stderr)
        else:
            rows = load_prompts(args.prompts, unescape_newlines(args.template) if args.template else None)
        judge_prompt = args.judge_prompt.read_text(encoding="utf-8") if args.judge_prompt else JUDGE_PROMPT
        grid = GridSpec(args.preset, dict(parse_axis(a) for a in args.grid), args.samples or options.samples,
                        args.seed)
        out = args.out or (args.prompts.parent / options.output_path if options.output_path else None)
        if out is not None and out.suffix not in (".jsonl", ".csv", ".json"):
            raise BatchInputError(f"outputPath must end in .jsonl, .csv or .json (promptfoo's shape), got '{out}'")
    except (BatchInputError, OSError) as exc:
        return _fail(str(exc))
    from webui.startup import load_startup_model
    from webui.services import Services

    config = AppConfig(user_data_dir=args.user_data_dir or default_user_data_dir(), model=args.model,
                       loader=args.loader, device=args.device, dtype=args.dtype, threads=args.threads)
    config.make_dirs()
    services = Services.create(config)
    try:
        local_judge = (grader or args.judge_model or options.judge_model) if not args.judge_url else ""
        job = BatchJob(args.name or description or args.prompts.name, rows, grid, args.system_prompt, args.raw,
                       args.max_cells, settings, chat_template=args.chat_template,
                       use_cache=not args.no_cache and options.use_cache,
                       judge_prompt=judge_prompt,
                       remote_judge=RemoteJudge(args.judge_url, args.judge_model) if args.judge_url else None,
                       judge_model=local_judge, derived_metrics=options.derived_metrics,
                       judge_tokens=args.grader_max_tokens)  # over every budget the suite gives (step_tokens)
        planned, _ = services.batch_runner.plan(job)  # bad grids fail before any model loads
        named = list(dict.fromkeys(s.model for s in planned if s.model))
        if args.model or any(s.model is None for s in planned):
            load_startup_model(services)  # the model in use: for settings that name none
        for name in [*named, *([local_judge] if local_judge else [])]:  # the model axis, workbench: providers
            slot = services.models.ensure(name)  # a bare NAME: its default loader, as everywhere (model_id)
            print(f"loaded {slot.name}" + (f" (for {name})" if slot.name != name else ""), file=sys.stderr)
        handle = services.batch_runner.start(job)
        while not handle.wait(1.0):
            _progress(handle)
        _progress(handle, final=True)
        results = handle.rows()
        if out:
            written = {".csv": to_csv, ".jsonl": to_jsonl}.get(out.suffix, lambda r: to_promptfoo(
                r, job.name, job.rows, {s.label: s.provider for s in planned if s.provider}, job.derived_metrics))
            out.write_text(written(results), encoding="utf-8")
            print(f"wrote {len(results)} rows to {out}")
        return _report(results, args.min_pass_rate, services.batches.get(handle.run_id).number)
    except (BatchInputError, LoaderError, InvalidName, StoreError, ValueError) as exc:
        return _fail(str(exc))
    finally:
        services.close()


def _progress(handle: RunHandle, final: bool = False) -> None:
    eta = handle.eta_text()
    line = f"\r{handle.done}/{handle.total} done" + (f", {eta}" if eta and not final else "")
    print(line.ljust(40), end="\n" if final else "", file=sys.stderr, flush=True)


def _report(results: list[ResultRow], min_pass_rate: float | None, run_number: int) -> int:
    summaries = summarize(results)
    print(f"{'setting':50} {'rows':>5} {'pass rate':>10} {'tok/s':>7}")
    failing = []
    for s in summaries:
        rate = "-" if s.pass_rate is None else f"{s.pass_rate:.0%}"
        tps = "-" if s.mean_tokens_per_second is None else f"{s.mean_tokens_per_second:.1f}"
        print(f"{s.label[:50]:50} {s.rows:5} {rate:>10} {tps:>7}")
        if min_pass_rate is not None and s.pass_rate is not None and s.pass_rate < min_pass_rate:
            failing.append(s.label)
    models = ", ".join(dict.fromkeys(f"{r.model} (loader {r.loader})" for r in results if r.model))
    if models:
        print(f"models: {models}")
    print(f"stored as batch run #{run_number}")
    if failing:
        print(f"pass rate below {min_pass_rate:.0%} for: {', '.join(failing)}", file=sys.stderr)
        return 1
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
