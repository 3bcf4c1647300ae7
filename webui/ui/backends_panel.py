"""Model tab panel: install an optional loader backend, or make a GPTQ model, with the command's progress.

Both run `python launch.py install ...` / `python launch.py quantize ...` in a subprocess (the same
commands a user can type), so the workbench keeps serving while they run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

import gradio as gr
from gradio.events import Dependency

from loaders.extras import EXTRAS
from webui.bootstrap import OPTIONAL_EXTRAS
from webui.jobs import JobBusy, JobUpdate, launch_command
from webui.quantize import BITS
from webui.controllers import UserError
from webui.services import Services
from webui.ui.feedback import shows_errors

QUANTIZE_TAKES = "quantizing a small model on a CPU takes several minutes"


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def job_status(what: str, update: JobUpdate, expected: str = "") -> str:
    if update.returncode is None:
        hint = f" ({expected})" if expected else ""
        return f"**Running:** {what}, for {_minutes(update.elapsed)}{hint}"
    if update.ok:
        return f"**Done:** {what}, in {_minutes(update.elapsed)}"
    return (f"**Failed:** {what} (exit code {update.returncode}) after {_minutes(update.elapsed)}; "
            "the output below says why")


def run_job(services: Services, what: str, argv: list[str], expected: str) -> Iterator[tuple[str, str]]:
    try:
        for update in services.jobs.run(argv):
            yield job_status(what, update, expected), update.log
    except JobBusy as exc:
        raise UserError(str(exc)) from exc


def create_backends_panel(services: Services, model_names: Callable[[], list[str]]) -> tuple[Dependency, Dependency]:
    """The panel; returns the install and the quantize events (the caller refreshes its lists after them)."""
    with gr.Accordion("Install a loader backend · make a GPTQ model", open=False):
        with gr.Row():
            extra = gr.Dropdown(choices=[(f"{name}: {what}", name) for name, what in OPTIONAL_EXTRAS.items()],
                                value="llamacpp", label="Optional backend", elem_id="backend-extra", scale=4)
            install_btn = gr.Button("Install", elem_id="backend-install", scale=1)
        with gr.Row():
            q_model = gr.Dropdown(choices=model_names(), label="Model to quantize", elem_id="quantize-model", scale=3)
            q_bits = gr.Dropdown(choices=list(BITS), value=4, label="bits", elem_id="quantize-bits", scale=1)
            q_group = gr.Number(value=0, precision=0, minimum=0, label="group size (0: automatic)",
                                elem_id="quantize-group", scale=1)
            quantize_btn = gr.Button("Quantize with GPTQ", elem_id="quantize-start", scale=1)
        status = gr.Markdown("", elem_id="job-status")
        log = gr.Textbox(label="Output", lines=10, max_lines=10, interactive=False, autoscroll=True,
                         elem_id="job-log")

    def install(name: str) -> Iterator[tuple[str, str]]:
        if name not in OPTIONAL_EXTRAS:
            raise UserError(f"choose one of: {', '.join(OPTIONAL_EXTRAS)}")
        yield from run_job(services, f"installing {name}", launch_command("install", name), EXTRAS[name].takes)
        importlib.invalidate_caches()  # the new package becomes visible to the loader list

    def quantize(name: str | None, bits: int, group: float | None) -> Iterator[tuple[str, str]]:
        if not name:
            raise UserError("Choose the model to quantize first.")
        argv = launch_command("quantize", "gptq", name, "--bits", str(int(bits)),
                              "--user-data-dir", str(services.config.user_data_dir))
        if group:
            argv += ["--group-size", str(int(group))]
        yield from run_job(services, f"quantizing {name}", argv, QUANTIZE_TAKES)

    installed = install_btn.click(shows_errors(install), [extra], [status, log], concurrency_limit=1, concurrency_id="jobs")
    quantized = quantize_btn.click(shows_errors(quantize), [q_model, q_bits, q_group], [status, log], concurrency_limit=1,
                                   concurrency_id="jobs")
    return installed, quantized
