"""Training tab: layout and wiring over TrainingController (webui.controllers.training).

The settings form is built from the settings table (webui/training/settings.py: the same controls a loader's load
options get); a timer redraws the progress bar, the status and the loss plot while a run goes, from any page.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from typing import Any, Callable

import gradio as gr
import pandas as pd
from gradio.blocks import Block
from gradio.components import Component

from loaders.base import available_devices
from webui.controllers.errors import UserError
from webui.controllers.training import AUTO_FORMAT, TrainingController, TrainingForm, TrainingView
from webui.services import Services
from webui.training.data import MAX_DATASET_MB
from webui.training.settings import SETTINGS, TrainSetting
from webui.ui.feedback import Updates, opens, shows_errors
from webui.ui.model_tab import option_control

PLOT_COLUMNS = ["step", "loss", "series"]
PER_ROW = 4


@dataclass
class TrainingTab:
    model: gr.Dropdown
    device: gr.Dropdown
    dataset: gr.Dropdown
    upload: gr.UploadButton
    format: gr.Dropdown
    dataset_note: gr.Markdown
    """What the chosen dataset holds and the format it takes (chosen for it when the workbench finds one)."""
    name: gr.Textbox
    replace: gr.Checkbox
    fields: dict[str, Component]
    """A control per training setting, by its name."""
    show_preview: gr.Button
    estimate: gr.Button
    estimate_note: gr.Markdown
    """How long the run would take (its steps × the time per step of a few run when asked)."""
    start: gr.Button
    stop: gr.Button
    resume: gr.Button
    start_note: gr.Markdown
    """Why Preview, Start or Resume was refused (it stays until one of them is clicked again)."""
    preview: gr.Markdown
    bar: gr.HTML
    status: gr.Markdown
    plot: gr.LinePlot
    timer: gr.Timer
    seen: gr.State
    """The run state's version this page shows (the timer redraws only when it moved)."""
    attach: gr.Button
    compare: gr.Button
    perplexity: gr.Button
    result: gr.Markdown
    controller: TrainingController

    @property
    def eval_file(self) -> gr.Dropdown:
        """The eval_file setting's control: a file from the datasets folder."""
        control = self.fields["eval_file"]
        assert isinstance(control, gr.Dropdown), "built by _settings_form"
        return control

    @property
    def form_inputs(self) -> set[Block]:
        return {self.model, self.device, self.dataset, self.format, self.name, self.replace, *self.fields.values()}

    def form(self, data: dict) -> TrainingForm:
        return TrainingForm(data[self.model], data[self.dataset], data[self.format], data[self.name] or "",
                            {name: data[control] for name, control in self.fields.items()}, data[self.device],
                            bool(data[self.replace]))


def _settings_form(controller: TrainingController) -> dict[str, Component]:
    """A control per setting, from the table; eval_file picks a file from the datasets folder."""
    fields: dict[str, Component] = {}
    with gr.Accordion("Training settings (the same as `launch.py train`'s options)", open=True):
        for start in range(0, len(SETTINGS), PER_ROW):
            with gr.Row(equal_height=True):
                for spec in SETTINGS[start:start + PER_ROW]:
                    if spec.name == "eval_file":
                        fields[spec.name] = gr.Dropdown(choices=["", *controller.dataset_choices()], value="",
                                                        label=spec.title, info=spec.help + " (from the datasets)",
                                                        elem_id="train-eval_file", elem_classes=["load-option"])
                    else:
                        fields[spec.name] = _control(spec)
    return fields


def _control(spec: TrainSetting) -> Component:
    """The setting's control, its range said in its help rather than enforced by the control: a value out of range
    reaches the settings table, whose message names the setting and what it takes."""
    if spec.kind not in (int, float):
        return option_control(spec, spec.default, f"train-{spec.name}")
    shown = replace(spec, minimum=None, maximum=None, help=f"{spec.help} ({spec.describe()})")
    return option_control(shown, spec.default, f"train-{spec.name}")


def _data_rows(controller: TrainingController) -> dict[str, Any]:
    with gr.Row(equal_height=True):
        model = gr.Dropdown(choices=controller.model_choices(), value=controller.default_model(),
                            label="Base model (its plain weights are trained, with transformers)",
                            elem_id="train-model", scale=3)
        device = gr.Dropdown(choices=list(available_devices()), value="auto", label="Train on", elem_id="train-device",
                             scale=1)
    with gr.Row(equal_height=True):
        dataset = gr.Dropdown(choices=controller.dataset_choices(), value=None, elem_id="train-dataset", scale=3,
                              label=f"Dataset (files in {controller.datasets_dir})",
                              info="raw text (.txt, .md), instruction records (.json/.jsonl, with a format) or chat "
                                   f"records (each with a 'messages' list); UTF-8, at most {MAX_DATASET_MB} MB")
        upload = gr.UploadButton("Upload a dataset", file_types=[".txt", ".md", ".json", ".jsonl"], size="sm",
                                 elem_id="train-upload", scale=1)
        format_ = gr.Dropdown(choices=controller.format_choices(), value=AUTO_FORMAT, elem_id="train-format", scale=2,
                              label="Format of instruction records",
                              info=f"text-generation-webui format files; your own go in {controller.formats_dir}")
    dataset_note = gr.Markdown("", elem_id="train-dataset-note")
    with gr.Row(equal_height=True):
        name = gr.Textbox(label="Adapter name (its folder in the loras dir)", elem_id="train-name", scale=3)
        replace = gr.Checkbox(label="Replace an adapter or checkpoint of that name", value=False,
                              elem_id="train-replace", scale=2)
    return dict(model=model, device=device, dataset=dataset, upload=upload, format=format_, dataset_note=dataset_note,
                name=name, replace=replace)


def create_training_tab(services: Services) -> TrainingTab:
    controller = TrainingController(services)
    top = _data_rows(controller)
    fields = _settings_form(controller)
    with gr.Row():
        show_preview = gr.Button("Preview the data", elem_id="train-preview-button")
        estimate = gr.Button("Estimate the time (runs a few steps)", elem_id="train-estimate-button")
        start = gr.Button("Start", variant="primary", elem_id="train-start")
        stop = gr.Button("Stop (saves a checkpoint)", variant="stop", elem_id="train-stop")
        resume = gr.Button("Resume from the checkpoint", elem_id="train-resume")
    start_note = gr.Markdown("", elem_id="train-start-note")
    estimate_note = gr.Markdown("", elem_id="train-estimate")
    with gr.Accordion("Preview: the first examples as the model sees them", open=True):
        preview = gr.Markdown("", elem_id="train-preview")
    view = controller.view()
    bar = gr.HTML(_bar(view), elem_id="train-bar")
    status = gr.Markdown(view.status, elem_id="train-status")
    plot = gr.LinePlot(_points(view), x="step", y="loss", color="series", title="Loss", elem_id="train-plot",
                       x_title="step", y_title="loss")
    timer = gr.Timer(1.0, active=view.running)
    seen = gr.State(view.state.version)
    with gr.Row():
        attach = gr.Button("Attach the adapter to its base model", elem_id="train-attach")
        compare = gr.Button("Compare with the base model in A/B", elem_id="train-compare")
        perplexity = gr.Button("Perplexity on the eval split, without and with it", elem_id="train-perplexity")
    result = gr.Markdown("", elem_id="train-result")
    tab = TrainingTab(**top, fields=fields, show_preview=show_preview, estimate=estimate,
                      estimate_note=estimate_note, start=start, stop=stop, resume=resume,
                      start_note=start_note, preview=preview, bar=bar, status=status, plot=plot, timer=timer, seen=seen,
                      attach=attach, compare=compare, perplexity=perplexity, result=result, controller=controller)
    _wire(tab)
    return tab


def _bar(view: TrainingView) -> str:
    p = view.state.progress
    label = f"{p.step}/{p.total}" if p else ""
    return (f'<progress id="train-progress" value="{view.fraction:.4f}" max="1" style="width:100%"></progress>'
            f' <span id="train-steps">{html.escape(label)}</span>')


def _points(view: TrainingView) -> pd.DataFrame:
    return pd.DataFrame(view.points, columns=PLOT_COLUMNS)


def _shown(tab: TrainingTab, view: TrainingView) -> Updates:
    """The run as it is: its bar, status, loss plot, version seen, and the timer that follows it while it goes."""
    return {tab.bar: _bar(view), tab.status: view.status, tab.plot: _points(view), tab.seen: view.state.version,
            tab.timer: gr.Timer(active=view.running)}


def _wire(tab: TrainingTab) -> None:
    c = tab.controller
    shown = [tab.bar, tab.status, tab.plot, tab.seen, tab.timer]

    def tick(seen: int) -> Updates:
        view = c.view()
        if view.state.version == seen and view.running:
            return {tab.timer: gr.Timer(active=True)}
        return _shown(tab, view)

    def upload(file: Any, chosen: str | None) -> Updates:
        """The dataset list with the upload chosen, its format and note; a refused upload is said beside the
        dataset, where it stays."""
        try:
            name = c.upload(file if isinstance(file, str) else getattr(file, "name", None))
        except UserError as exc:
            return {tab.dataset_note: f"⚠ Not uploaded: {exc}"}
        names = c.dataset_choices()
        return {tab.dataset: gr.update(choices=names, value=name), tab.eval_file: gr.update(choices=["", *names]),
                **dataset_chosen(name, chosen)}

    tab.timer.tick(tick, [tab.seen], shown, show_progress="hidden", concurrency_limit=None)  # every page's, cheap
    tab.upload.upload(upload, [tab.upload, tab.format], [tab.dataset, tab.eval_file, tab.format, tab.dataset_note])
    # both list the files put in the folder since the page loaded
    tab.dataset.focus(lambda: gr.update(choices=c.dataset_choices()), None, tab.dataset)
    tab.eval_file.focus(lambda: gr.update(choices=["", *c.dataset_choices()]), None, tab.eval_file)
    tab.format.focus(lambda: gr.update(choices=c.format_choices()), None, tab.format)
    tab.model.focus(lambda: gr.update(choices=c.model_choices()), None, tab.model)
    def dataset_chosen(dataset: str | None, chosen: str | None) -> Updates:
        """The dataset's note, and the format that reads it where that is not the one chosen."""
        format_, note = c.dataset_format(dataset, chosen)
        return {tab.dataset_note: note, **({tab.format: gr.update(value=format_)} if format_ != chosen else {})}

    def refused(form: TrainingForm, exc: UserError) -> Updates:
        """The format, the dataset's note and the refusal shown when Preview, Start or Resume is refused: where the
        dataset needs another format the workbench finds, it is chosen and the refusal says so."""
        format_, note = c.dataset_format(form.dataset, form.format)
        if format_ == form.format:
            return {tab.dataset_note: note, tab.start_note: f"⚠ Refused: {exc}"}
        return {tab.format: gr.update(value=format_), tab.dataset_note: note,
                tab.start_note: f"⚠ Refused: {exc}  \nThe format **{format_}** reads this dataset; it is now chosen: "
                                "click again to use it."}

    def told_or_refused(step: Callable[[Any], str], answered: Component) -> Callable[[dict], Updates]:
        """A button whose answer is one text in ``answered`` (Preview, Estimate), or the refusal beside the
        dataset."""
        def answer(data: dict) -> Updates:
            form = tab.form(data)
            try:
                return {answered: step(form), tab.start_note: ""}
            except UserError as exc:
                return refused(form, exc)
        return answer

    def start(data: dict, resume: bool = False) -> Updates:
        form = tab.form(data)
        try:
            return {**_shown(tab, c.start(form, resume=resume)), tab.start_note: ""}
        except UserError as exc:
            return refused(form, exc)

    inputs = tab.form_inputs
    told = [tab.start_note, tab.format, tab.dataset_note]
    tab.dataset.change(dataset_chosen, [tab.dataset, tab.format], [tab.format, tab.dataset_note])
    tab.show_preview.click(told_or_refused(c.preview, tab.preview), inputs, [tab.preview, *told])
    tab.estimate.click(told_or_refused(c.estimate, tab.estimate_note), inputs, [tab.estimate_note, *told])
    tab.start.click(start, inputs, [*shown, *told])
    tab.resume.click(lambda data: start(data, resume=True), inputs, [*shown, *told])
    tab.stop.click(shows_errors(lambda: _shown(tab, c.stop())), None, shown, concurrency_limit=None)
    tab.attach.click(shows_errors(c.attach), None, [tab.result])

    def perplexity(progress: gr.Progress = gr.Progress()) -> str:
        return c.perplexity(lambda f, m: progress(f, desc=m))

    tab.perplexity.click(shows_errors(perplexity), None, [tab.result])


def wire_ab(tab: TrainingTab, ab: Any, opener: gr.Textbox) -> None:
    """Compare: the A/B tab opened with side A the base model and side B the same with the adapter."""
    c = tab.controller
    a, b = ab.sides

    @shows_errors
    def compare() -> tuple:
        side_a, side_b = c.ab_sides()
        presets, adapters, models = ab.controller.choices()
        sides = []
        for side in (side_a, side_b):
            sides += [gr.update(choices=models, value=side.model), gr.update(choices=presets, value=side.parameters),
                      gr.update(choices=adapters, value=side.adapter)]
        return (f"The A/B tab compares {side_a.model} without and with **{side_b.adapter}** (side B's requests alone: "
                "Chat and the API run as before).",
                *sides, opens("ab"))

    tab.compare.click(compare, None, [tab.result, a.model, a.parameters, a.adapter, b.model, b.parameters, b.adapter,
                                      opener])


def on_load(tab: TrainingTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load shows the run as it is now (and follows it while it goes), the lists as
    they are, and the form of the last run started (so that Resume has what it needs)."""
    c = tab.controller
    others = [name for name in tab.fields if name != "eval_file"]

    def load():
        names, form = c.dataset_choices(), c.last_form
        given: dict[str, Any] = {} if form is None else {
            "model": form.model, "dataset": form.dataset, "device": form.device, "format": form.format,
            "name": form.name, **form.values}

        def value(key: str) -> dict[str, Any]:
            return {"value": given[key]} if key in given else {}

        return {**_shown(tab, c.view()), tab.model: gr.update(choices=c.model_choices(), **value("model")),
                tab.dataset: gr.update(choices=names, **value("dataset")),
                tab.eval_file: gr.update(choices=["", *names], **value("eval_file")),
                **{getattr(tab, key): gr.update(**value(key)) for key in ("device", "format", "name")},
                **{tab.fields[name]: gr.update(**value(name)) for name in others}}
    return [tab.bar, tab.status, tab.plot, tab.seen, tab.timer, tab.model, tab.dataset, tab.eval_file, tab.device,
            tab.format, tab.name, *[tab.fields[name] for name in others]], load
