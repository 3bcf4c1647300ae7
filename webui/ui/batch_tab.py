"""Batch tab: layout and wiring over BatchController (webui.controllers.batch); tables in batch_views."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from webui.batch.run.results import rows_for_setting
from webui.batch.asserts.kinds import kinds_help
from webui.batch.run.judge import JUDGE_PROMPT
from webui.controllers.batch import GRADER_BUDGET_UNSET, NO_ROW, NO_RUN, BatchController, BatchForm, grader_budget
from webui.controllers.errors import UserError
from webui.services import Services
from webui.ui.api_batches_panel import APIBatchesPanel, create_api_batches_tab, wire_api_batches
from webui.ui.batch_views import clicked_row, compare_html, pivot_table, result_table, row_key, summary_table
from webui.ui.feedback import Updates, Update, shows_errors
from webui.ui.inspection import InspectorPanel, create_inspector_panel, inspection_views, record_views
from webui.ui.parameters_tab import ParametersTab
from webui.ui.params_panel import WRONG

COLUMN_WIDTHS: list[str | int] = ["40px", "120px", "125px", "75px", "55px", "132px", "76px", "71px", "134px", "68px", "57px", "112px",
                 "74px", "71px"]
"""One per RESULT_COLUMNS entry: each header fits on one line; cells are one line each, cut with "…" (a click on
a cell shows it whole, the review panel the row's asserts and output)."""
REFILLED = ("prompts", "upload", "template", "asserts", "system", "raw", "presets", "axes", "samples", "base_seed",
            "name", "use_cache", "judge_prompt", "judge_url", "judge_model", "judge_tokens")
"""The form fields Open fills from a stored run (not the judge's API key, which is never stored)."""
GRADER_BUDGET_INFO = (f"Used for every grading step, over any budget a suite gives (each step at most its own). "
                      f"Empty: {GRADER_BUDGET_UNSET}.")


@dataclass
class FormFields:
    """The form's components, named as BatchForm's fields."""

    prompts: gr.Textbox
    upload: gr.State
    template: gr.Textbox
    asserts: gr.Textbox
    system: gr.Textbox
    raw: gr.Checkbox
    presets: gr.CheckboxGroup
    axes: gr.Textbox
    samples: gr.Number
    base_seed: gr.Number
    name: gr.Textbox
    use_cache: gr.Checkbox
    judge_prompt: gr.Textbox
    judge_url: gr.Textbox
    judge_model: gr.Textbox
    judge_key: gr.Textbox
    judge_tokens: gr.Textbox

    @property
    def inputs(self) -> set:
        return {getattr(self, f.name) for f in fields(self)}

    def read(self, data: dict) -> BatchForm:
        values = {f.name: data[getattr(self, f.name)] for f in fields(self)}
        return BatchForm(**{**values, "presets": tuple(values["presets"] or ()), "raw": bool(values["raw"]),
                            "use_cache": bool(values["use_cache"])})


@dataclass
class BatchTab:
    form: FormFields
    run_id: gr.State
    upload_button: gr.UploadButton
    clear_upload: gr.Button
    upload_note: gr.Markdown
    plan: gr.Markdown
    check: gr.Button
    run: gr.Button
    cancel: gr.Button
    progress: gr.Markdown
    query: gr.Textbox
    failures: gr.Checkbox
    table: gr.Dataframe
    inspector: InspectorPanel
    summary: gr.Dataframe
    review_row: gr.Markdown
    verdict: gr.Radio
    review_note: gr.Textbox
    review_save: gr.Button
    review_clear: gr.Button
    selected_row: gr.State
    pass_plot: gr.BarPlot
    speed_plot: gr.BarPlot
    pivot: gr.Dataframe
    side_a: gr.Dropdown
    run_b: gr.Dropdown
    side_b: gr.Dropdown
    compare: gr.HTML
    runs: gr.Dropdown
    open: gr.Button
    rename_text: gr.Textbox
    rename: gr.Button
    delete: gr.Button
    rerun: gr.Button
    rerun_fresh: gr.Button
    csv: gr.Button
    jsonl: gr.Button
    promptfoo: gr.Button
    export_file: gr.File
    api: APIBatchesPanel  # the API's batch jobs, beside the tab's own runs
    controller: BatchController

    @property
    def views(self) -> list:
        """What shows a run (``view_updates``)."""
        return [self.table, self.summary, self.pass_plot, self.speed_plot, self.pivot, self.side_a, self.side_b,
                self.compare, self.runs, self.run_b, *self.inspector.outputs, self.selected_row, self.review_row]


def _form_column(services: Services) -> dict:
    with gr.Column(scale=1):
        prompts = gr.Textbox(label="Prompts, one per line", lines=6, elem_id="batch-prompts",
                             placeholder="What is the capital of France?\nWrite a haiku about rain.")
        with gr.Row():
            upload_button = gr.UploadButton("Upload .txt / .csv / .jsonl / promptfooconfig.yaml (with the files it "
                                            "reads)", file_count="multiple", size="sm", elem_id="batch-upload")
            clear_upload = gr.Button("Use the text box instead", size="sm", elem_id="batch-clear-upload")
        upload_note = gr.Markdown("", elem_id="batch-upload-note")
        template = gr.Textbox(label="Template (optional): {{column}} from the file's columns", lines=1,
                              elem_id="batch-template")
        asserts = gr.Textbox(label="Asserts for every prompt, one per line", lines=3, elem_id="batch-asserts",
                             placeholder="contains:Paris\nmax-length:200\nnot-regex:^\\s*$\nis-json\n"
                                         "similar:The capital of France is Paris\npython:checks.py\nttft:500",
                             info=f"Kinds: {kinds_help()}; not- before any. Weights and "
                                  "thresholds: JSONL asserts {\"type\", \"value\", \"weight\", \"threshold\"}.")
        with gr.Accordion("Judge (model-graded asserts: llm-rubric, factuality, g-eval...; the prompt is "
                          "llm-rubric's)", open=False, elem_id="batch-judge-panel"):
            judge_prompt = gr.Textbox(value=JUDGE_PROMPT, lines=8, max_lines=30, elem_id="batch-judge-prompt",
                                      label="What the judge is asked ({{output}} and {{rubric}} are filled in; "
                                            "it answers JSON: reason, pass, score)")
            with gr.Row():
                judge_url = gr.Textbox(label="Judge server (empty: a loaded model judges)", elem_id="batch-judge-url",
                                       placeholder="http://127.0.0.1:8000/v1", scale=2)
                judge_model = gr.Textbox(label="Judge model (the server's, or a loaded model's name, over any grader a "
                                               "suite names; empty: the model in use)", elem_id="batch-judge-model",
                                         scale=1)
                judge_key = gr.Textbox(label="Its API key (not stored)", type="password", elem_id="batch-judge-key",
                                       scale=1)
            judge_tokens = gr.Textbox(label="Grader budget: the most tokens the judge writes per grading step "
                                            "(promptfoo's grader max_tokens)", info=GRADER_BUDGET_INFO,
                                      placeholder="e.g. 96", elem_id="batch-judge-tokens")
        system = gr.Textbox(label="System prompt", lines=1, elem_id="batch-system")
        raw = gr.Checkbox(label="Raw prompts (no chat template)", value=False, elem_id="batch-raw")
    with gr.Column(scale=1):
        presets = gr.CheckboxGroup(choices=services.presets.names(), label="Presets (none: the Parameters tab's)",
                                   elem_id="batch-presets")
        axes = gr.Textbox(label="Vary parameters, one per line", lines=3, elem_id="batch-axes",
                          placeholder="temperature=0,0.7,1.2\ntop_p=0.9,1.0\nmodel=A,B (loaded models)",
                          info="Also lora=none,NAME (adapters) and model=A,B (models loaded in the Model tab, side "
                               "by side on the same prompts and seeds)")
        with gr.Row():
            samples = gr.Number(value=1, precision=0, minimum=1, maximum=100, label="Samples per cell",
                                elem_id="batch-samples")
            base_seed = gr.Number(value=0, precision=0, minimum=0, label="Base seed", elem_id="batch-seed")
        name = gr.Textbox(label="Run name", value="Batch run", elem_id="batch-name")
        use_cache = gr.Checkbox(label="Reuse cached results (a cell whose whole request already ran)", value=True,
                                elem_id="batch-use-cache")
        plan = gr.Markdown("", elem_id="batch-plan")
        with gr.Row():
            check = gr.Button("Check plan", elem_id="batch-check")
            run = gr.Button("Run", variant="primary", elem_id="batch-run")
            cancel = gr.Button("Cancel", variant="stop", elem_id="batch-cancel")
        progress = gr.Markdown("", elem_id="batch-progress")
    form = FormFields(prompts, gr.State(None), template, asserts, system, raw, presets, axes, samples, base_seed, name,
                      use_cache, judge_prompt, judge_url, judge_model, judge_key, judge_tokens)
    return dict(form=form, upload_button=upload_button, clear_upload=clear_upload, upload_note=upload_note, plan=plan,
                check=check, run=run, cancel=cancel, progress=progress)


def _result_tabs() -> dict:
    with gr.Tab("Results"):
        with gr.Row():
            query = gr.Textbox(label="Filter", placeholder="text in prompt, output or setting", elem_id="batch-filter",
                               scale=3)
            failures = gr.Checkbox(label="Failures only", elem_id="batch-failures", scale=1)
        table = gr.Dataframe(value=result_table([]), interactive=False, wrap=False, elem_id="batch-results",
                             column_widths=COLUMN_WIDTHS, max_height=640)
        review_row = gr.Markdown(NO_ROW, elem_id="batch-review-row")
        with gr.Row(equal_height=True):
            verdict = gr.Radio(["good", "bad"], label="Your review of this row", elem_id="batch-review",
                               scale=1)
            review_note = gr.Textbox(label="Note", placeholder="why (optional)", elem_id="batch-review-note", scale=3)
            review_save = gr.Button("Save review", size="sm", elem_id="batch-review-save", scale=0, min_width=120)
            review_clear = gr.Button("Clear review", size="sm", elem_id="batch-review-clear", scale=0,
                                     min_width=120)
        with gr.Accordion("Prompt and reproduce record of a row (click a row)", open=False,
                          elem_id="batch-inspect-panel"):
            inspector = create_inspector_panel("batch", with_record=True)
    with gr.Tab("Summary"):
        summary = gr.Dataframe(value=summary_table([]), interactive=False, elem_id="batch-summary")
        with gr.Row():
            pass_plot = gr.BarPlot(x="setting", y="pass rate %", title="Pass rate per setting",
                                   elem_id="batch-pass-plot")
            speed_plot = gr.BarPlot(x="setting", y="tok/s", title="Tokens/s per setting", elem_id="batch-speed-plot")
    with gr.Tab("Pivot"):
        pivot = gr.Dataframe(value=pivot_table([]), interactive=False, wrap=True, elem_id="batch-pivot",
                             max_height=640)
    with gr.Tab("Compare"):
        with gr.Row():
            side_a = gr.Dropdown(label="A: setting", choices=[], elem_id="batch-compare-a")
            run_b = gr.Dropdown(label="B: run (default: this run)", choices=[], elem_id="batch-compare-run")
            side_b = gr.Dropdown(label="B: setting", choices=[], elem_id="batch-compare-b")
        compare = gr.HTML(elem_id="batch-compare")
    return dict(query=query, failures=failures, table=table, review_row=review_row, verdict=verdict,
                review_note=review_note, review_save=review_save, review_clear=review_clear, inspector=inspector,
                summary=summary, pass_plot=pass_plot, speed_plot=speed_plot, pivot=pivot, side_a=side_a, run_b=run_b,
                side_b=side_b, compare=compare)


def _runs_tab() -> dict:
    with gr.Tab("Runs"):
        runs = gr.Dropdown(label="Stored runs", choices=[], elem_id="batch-runs")
        with gr.Row():
            open_ = gr.Button("Open", size="sm", elem_id="batch-open")
            rename_text = gr.Textbox(label="New name", elem_id="batch-rename-text", scale=2)
            rename = gr.Button("Rename", size="sm", elem_id="batch-rename")
            delete = gr.Button("Delete", size="sm", variant="stop", elem_id="batch-delete")
            rerun = gr.Button("Re-run", size="sm", elem_id="batch-rerun")
            rerun_fresh = gr.Button("Re-run without cache", size="sm", elem_id="batch-rerun-fresh")
        with gr.Row():
            csv = gr.Button("Export CSV", size="sm", elem_id="batch-export-csv")
            jsonl = gr.Button("Export JSONL", size="sm", elem_id="batch-export-jsonl")
            promptfoo = gr.Button("Export promptfoo JSON", size="sm", elem_id="batch-export-promptfoo")
        export_file = gr.File(label="Export", visible=False, elem_id="batch-export-file")
    return dict(runs=runs, open=open_, rename_text=rename_text, rename=rename, delete=delete, rerun=rerun,
                rerun_fresh=rerun_fresh, csv=csv,
                jsonl=jsonl, promptfoo=promptfoo, export_file=export_file)


def create_batch_tab(services: Services) -> BatchTab:
    with gr.Row():
        form = _form_column(services)
    with gr.Tabs():
        results = _result_tabs()
        stored = _runs_tab()
        api = create_api_batches_tab(services)
    return BatchTab(**form, **results, **stored, api=api, run_id=gr.State(None), selected_row=gr.State(None),
                    controller=BatchController(services))


def view_updates(tab: BatchTab, run_id: int | None, query: str = "", failures_only: bool = False
                 ) -> Updates:
    """``BatchTab.views`` by component: every panel shows run ``run_id`` (the row inspector is emptied)."""
    c = tab.controller
    rows = c.rows(run_id)
    labels = list(dict.fromkeys(r.setting for r in rows))
    summ = summary_table(rows)
    fastest = float(summ["tok/s"].max()) if len(summ) and summ["tok/s"].notna().any() else 1.0
    a, b = (labels[0] if labels else None), (labels[1] if len(labels) > 1 else (labels[0] if labels else None))
    compared = compare_html(_setting_rows(rows, a), _setting_rows(rows, b), f"A: {a}", f"B: {b}")
    emptied = {shown: None if shown is tab.inspector.tokens else "" for shown in tab.inspector.outputs}
    return {tab.table: result_table(rows, query, failures_only), tab.summary: summ,
            tab.pass_plot: gr.update(value=summ, y_lim=[0, 100]),
            tab.speed_plot: gr.update(value=summ, y_lim=[0, fastest * 1.15]), tab.pivot: pivot_table(rows),
            tab.side_a: gr.update(choices=labels, value=a), tab.side_b: gr.update(choices=labels, value=b),
            tab.compare: compared, tab.runs: gr.update(choices=c.run_choices(), value=run_id),
            tab.run_b: gr.update(choices=c.run_choices()), **emptied, tab.selected_row: None, tab.review_row: NO_ROW}


def _setting_rows(rows, label):
    return rows_for_setting(rows, label or "")


def wire_batch_tab(tab: BatchTab, params: ParametersTab) -> None:
    """Events of the Batch tab; ``params`` (the Parameters tab) is the base when no preset is chosen."""
    _wire_running(tab, params)
    _wire_views(tab)
    _wire_runs(tab)
    wire_api_batches(tab.api)


def _wire_running(tab: BatchTab, params: ParametersTab) -> None:
    c = tab.controller

    @shows_errors
    def check(data: dict) -> str:
        return c.plan(c.job(tab.form.read(data), params.params(data)))

    @shows_errors
    def run(data: dict) -> Iterator[Updates]:
        job = c.job(tab.form.read(data), params.params(data))
        plan = c.plan(job)
        for step in c.run(job):
            yield {tab.plan: plan, tab.progress: step.status, tab.run_id: step.run_id, **view_updates(tab, step.run_id)}

    def upload(files: Any) -> tuple[tuple[str, bytes] | None, str]:  # paths, or things with .name
        """The upload and its note; a refused one is said in the note, where it stays, and the text box is used."""
        given = files if isinstance(files, list) else [files]
        return c.take_upload([f if isinstance(f, str) else f.name for f in given])

    inputs = tab.form.inputs | set(params.inputs)
    tab.check.click(check, inputs, [tab.plan])
    tab.run.click(run, inputs, [tab.plan, tab.progress, tab.run_id, *tab.views], concurrency_limit=None)
    tab.cancel.click(c.cancel, [tab.run_id], [tab.progress], concurrency_limit=None)
    tab.upload_button.upload(upload, [tab.upload_button], [tab.form.upload, tab.upload_note])
    tab.form.judge_tokens.change(_budget_message, [tab.form.judge_tokens], [tab.form.judge_tokens],
                                 trigger_mode="always_last", show_progress="hidden")
    tab.clear_upload.click(lambda: (None, ""), None, [tab.form.upload, tab.upload_note])


def _budget_message(typed: str) -> Update:
    """The grader budget box's message: what it is for, or that a wrong value is not used and what is."""
    message = grader_budget(typed)[1]
    return gr.update(info=message or GRADER_BUDGET_INFO, elem_classes=[WRONG] if message else [])


def _wire_views(tab: BatchTab) -> None:
    c = tab.controller

    def compare_view(rid: int | None, a: str | None, b_run: int | None, b: str | None) -> str:
        other = c.rows(b_run if b_run is not None else rid)
        return compare_html(_setting_rows(c.rows(rid), a), _setting_rows(other, b), f"A: {a}", f"B: {b}")

    def b_settings(b_run: int | None, rid: int | None) -> Update:
        labels = list(dict.fromkeys(r.setting for r in c.rows(b_run if b_run is not None else rid)))
        return gr.update(choices=labels, value=labels[0] if labels else None)

    @shows_errors
    def select_row(rid: int | None, q: str, only_failures: bool, selected: gr.SelectData) -> Updates:
        """One click on a result row: the row is named in the review panel and tinted (found by the cells clicked,
        whatever the table's sort), and the inspector shows the exact prompt the model read and the row's record."""
        rows = c.rows(rid)
        found = clicked_row(rows, selected.row_value) if rid is not None else None
        if found is None:
            raise UserError("Run a batch or open a stored run, then click one of its rows.")
        number, row = found
        seen = c.inspect_row(rid, row)
        rendered, tokens, note = inspection_views(seen.seen) if seen.seen else ("", None, seen.note)
        review, key = row.review or {}, row_key(row)
        inspector, record = tab.inspector, record_views(seen.record, c.services.config.api_port)
        return {inspector.note: f"row {number}: {seen.which} · {note}", inspector.rendered: rendered,
                inspector.tokens: tokens, inspector.record_json: record[0], inspector.record_curl: record[1],
                inspector.record_py: record[2], tab.selected_row: key, tab.verdict: review.get("verdict"),
                tab.review_note: review.get("note", ""), tab.review_row: c.reviewed(rid, key),
                tab.table: result_table(rows, q, only_failures, key)}

    def review(clear: bool) -> Callable[..., Updates]:
        @shows_errors
        def save(rid: int | None, key: Sequence[Any] | None, verdict: str | None, note: str, q: str, only_failures: bool
                 ) -> Updates:
            gr.Info(c.review(rid, tuple(key) if key else None, None if clear else verdict, "" if clear else note))
            rows = c.rows(rid)
            shown = {tab.table: result_table(rows, q, only_failures, key), tab.summary: summary_table(rows)}
            return {**shown, tab.verdict: None, tab.review_note: ""} if clear else shown
        return save

    for control in (tab.query, tab.failures):
        control.change(lambda rid, q, f, key: result_table(c.rows(rid), q, f, key),
                       [tab.run_id, tab.query, tab.failures, tab.selected_row], [tab.table], show_progress="hidden")
    compare_inputs = [tab.run_id, tab.side_a, tab.run_b, tab.side_b]
    for side in (tab.side_a, tab.side_b):
        side.input(compare_view, compare_inputs, [tab.compare], show_progress="hidden")
    tab.run_b.input(b_settings, [tab.run_b, tab.run_id], [tab.side_b]).then(compare_view, compare_inputs,
                                                                              [tab.compare])
    tab.table.select(select_row, [tab.run_id, tab.query, tab.failures], [*tab.inspector.outputs, tab.selected_row,
                                                                          tab.verdict, tab.review_note,
                                                                          tab.review_row, tab.table])
    review_inputs = [tab.run_id, tab.selected_row, tab.verdict, tab.review_note, tab.query, tab.failures]
    review_outputs = [tab.table, tab.summary, tab.verdict, tab.review_note]
    tab.review_save.click(review(False), review_inputs, review_outputs)
    tab.review_clear.click(review(True), review_inputs, review_outputs)


def _wire_runs(tab: BatchTab) -> None:
    c = tab.controller

    @shows_errors
    def open_run(chosen: int | None) -> Updates:
        """Show the run, and fill the form with what made it (prompts, asserts, grid), to change and run again."""
        if chosen is None:
            raise UserError(NO_RUN)
        try:
            form, note = c.form_of(chosen)
        except UserError as exc:  # the run still opens; the form stays as it is
            return {tab.run_id: chosen, **view_updates(tab, chosen), tab.upload_note: str(exc)}
        values = {getattr(tab.form, n): list(v) if n == "presets" else v for n, v in ((n, getattr(form, n))
                                                                                       for n in REFILLED)}
        return {tab.run_id: chosen, **view_updates(tab, chosen), **values, tab.upload_note: note}

    @shows_errors
    def rename(chosen: int | None, new_name: str) -> Update:
        c.rename(chosen, new_name)
        return gr.update(choices=c.run_choices(), value=chosen)

    @shows_errors
    def delete(chosen: int | None, current: int | None) -> Updates:
        c.delete(chosen)
        rid = None if current == chosen else current
        return {tab.run_id: rid, **view_updates(tab, rid)}

    def rerun(use_cache: bool) -> Callable[[int | None], Iterator[Updates]]:
        @shows_errors
        def follow(chosen: int | None) -> Iterator[Updates]:
            for step in c.rerun(chosen, use_cache):
                yield {tab.progress: step.status, tab.run_id: step.run_id, **view_updates(tab, step.run_id)}
        return follow

    @shows_errors
    def export(chosen: int | None, kind: str) -> Update:
        return gr.update(value=str(c.export(chosen, kind)), visible=True)

    # 36 outputs: a spinner on each is noise (and costs the page; feedback.confine_progress)
    tab.open.click(open_run, [tab.runs], [tab.run_id, *tab.views, *[getattr(tab.form, n) for n in REFILLED],
                                          tab.upload_note], show_progress="hidden")
    tab.rename.click(rename, [tab.runs, tab.rename_text], [tab.runs])
    tab.delete.click(delete, [tab.runs, tab.run_id], [tab.run_id, *tab.views])
    tab.rerun.click(rerun(True), [tab.runs], [tab.progress, tab.run_id, *tab.views], concurrency_limit=None)
    tab.rerun_fresh.click(rerun(False), [tab.runs], [tab.progress, tab.run_id, *tab.views], concurrency_limit=None)
    tab.csv.click(lambda r: export(r, "csv"), [tab.runs], [tab.export_file])
    tab.jsonl.click(lambda r: export(r, "jsonl"), [tab.runs], [tab.export_file])
    tab.promptfoo.click(lambda r: export(r, "json"), [tab.runs], [tab.export_file])


def on_load(tab: BatchTab) -> tuple[list, object]:
    """(outputs, function): a page (re)load lists the stored runs and the presets there are now."""
    c = tab.controller
    return [tab.runs, tab.form.presets], lambda: (gr.update(choices=c.run_choices()),
                                                   gr.update(choices=c.services.presets.names()))
