"""Batch tab: prompts x a settings grid x samples, run together on the engine, with asserts and views.

The logic (loading prompts, the grid, asserts, running, storing, exporting)
lives in webui.batch; this module only turns form values into a BatchJob and
results into tables.
"""

from __future__ import annotations

import difflib
import html
import tempfile
import time
from pathlib import Path

import gradio as gr
import pandas as pd

from webui.batch import (BatchInputError, GridSpec, ResultRow, cell_text, compare, load_prompts_text, parse_axes,
                         parse_lines, pivot, prompt_label, rows_for_setting, summarize, to_csv, to_jsonl,
                         with_asserts)
from webui.batch.runner import BatchJob
from webui.batch.store import RunNotFound
from webui.insight import InsightUnavailable, inspect_rendered
from webui.names import InvalidName
from webui.reproduce import RecordError, record_for_batch_row
from webui.controllers import UserError
from webui.services import Services
from webui.ui.feedback import shows_errors
from webui.store import StoreError
from webui.ui.inspection import create_inspector_panel, inspection_views, record_views

REFRESH_SECONDS = 0.7
RESULT_COLUMNS = ["prompt", "setting", "sample", "seed", "output", "finish", "tokens", "cached prompt", "ttft (s)",
                  "tok/s", "asserts", "passed"]


def shown_rows(rows: list[ResultRow], query: str = "", failures_only: bool = False) -> list[ResultRow]:
    """The rows the results table shows for a filter, in its order."""
    q = query.strip().lower()
    return [r for r in rows if not (failures_only and r.passed is not False)
            and not (q and q not in f"{r.prompt} {r.output} {r.setting}".lower())]


def result_table(rows: list[ResultRow], query: str = "", failures_only: bool = False) -> pd.DataFrame:
    out = []
    for r in shown_rows(rows, query, failures_only):
        marks = " ".join(("✓ " if a.passed else "✗ ") + a.label for a in r.asserts)
        out.append([prompt_label(r), r.setting, r.sample, r.seed, cell_text(r), r.finish_reason, r.completion_tokens,
                    f"{r.cached_tokens}/{r.prompt_tokens}", None if r.ttft is None else round(r.ttft, 3),
                    None if r.tokens_per_second is None else round(r.tokens_per_second, 1), marks,
                    "" if r.passed is None else ("pass" if r.passed else "FAIL")])
    return pd.DataFrame(out, columns=RESULT_COLUMNS)


def summary_table(rows: list[ResultRow]) -> pd.DataFrame:
    data = [[s.label, s.rows, s.passed, s.failed, None if s.pass_rate is None else round(100 * s.pass_rate, 1),
             None if s.mean_tokens_per_second is None else round(s.mean_tokens_per_second, 1),
             None if s.mean_ttft is None else round(s.mean_ttft, 3)] for s in summarize(rows)]
    return pd.DataFrame(data, columns=["setting", "rows", "passed", "failed", "pass rate %", "tok/s", "ttft (s)"])


def pivot_table(rows: list[ResultRow]) -> pd.DataFrame:
    prompts, settings, matrix = pivot(rows)
    return pd.DataFrame([[p, *cells] for p, cells in zip(prompts, matrix)], columns=["prompt", *settings])


def diff_html(a: str | None, b: str | None) -> tuple[str, str]:
    """Both outputs with the words that differ highlighted."""
    if a is None or b is None:
        return html.escape(a or "(missing)"), html.escape(b or "(missing)")
    wa, wb = a.split(" "), b.split(" ")
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        ta, tb = html.escape(" ".join(wa[i1:i2])), html.escape(" ".join(wb[j1:j2]))
        if op == "equal":
            left.append(ta)
            right.append(tb)
        else:
            if ta:
                left.append(f"<mark class='diff-del'>{ta}</mark>")
            if tb:
                right.append(f"<mark class='diff-add'>{tb}</mark>")
    return " ".join(left), " ".join(right)


def compare_html(rows_a: list[ResultRow], rows_b: list[ResultRow], label_a: str, label_b: str) -> str:
    if not rows_a or not rows_b:
        return "<p>Choose two settings (or two runs) that have results.</p>"
    pairs = compare(rows_a, rows_b)
    same = sum(p.same for p in pairs)
    body = []
    for p in pairs:
        left, right = diff_html(p.output_a, p.output_b)
        mark = "same" if p.same else "differs"
        body.append(f"<tr class='{mark}'><td>{html.escape(p.prompt)}</td><td>{p.sample}</td>"
                    f"<td>{left}</td><td>{right}</td><td>{mark}</td></tr>")
    return (f"<p>{same} of {len(pairs)} outputs are the same.</p><table class='batch-compare'><thead><tr>"
            f"<th>prompt</th><th>sample</th><th>{html.escape(label_a)}</th><th>{html.escape(label_b)}</th><th></th>"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>")


def create_batch_tab(services: Services) -> dict:
    runner, store = services.batch_runner, services.batches
    run_id = gr.State(None)
    upload = gr.State(None)  # (file name, content) of an uploaded prompt file
    with gr.Row():
        with gr.Column(scale=1):
            prompts = gr.Textbox(label="Prompts, one per line", lines=6, elem_id="batch-prompts",
                                 placeholder="What is the capital of France?\nWrite a haiku about rain.")
            with gr.Row():
                upload_btn = gr.UploadButton("Upload .txt / .csv / .jsonl", file_types=[".txt", ".csv", ".jsonl"],
                                             size="sm", elem_id="batch-upload")
                clear_upload = gr.Button("Use the text box instead", size="sm", elem_id="batch-clear-upload")
            upload_note = gr.Markdown("", elem_id="batch-upload-note")
            template = gr.Textbox(label="Template (optional): {{column}} from the file's columns", lines=1,
                                  elem_id="batch-template")
            asserts = gr.Textbox(label="Asserts for every prompt, one per line", lines=3, elem_id="batch-asserts",
                                 placeholder="contains:Paris\nmax-length:200\nregex:^[A-Z]\nis-json")
            system = gr.Textbox(label="System prompt", lines=1, elem_id="batch-system")
            raw = gr.Checkbox(label="Raw prompts (no chat template)", value=False, elem_id="batch-raw")
        with gr.Column(scale=1):
            presets = gr.CheckboxGroup(choices=services.presets.names(), label="Presets (none: the Parameters tab's)",
                                       elem_id="batch-presets")
            axes = gr.Textbox(label="Vary parameters, one per line", lines=3, elem_id="batch-axes",
                              placeholder="temperature=0,0.7,1.2\ntop_p=0.9,1.0\nmax_new_tokens=64")
            with gr.Row():
                samples = gr.Number(value=1, precision=0, minimum=1, maximum=100, label="Samples per cell",
                                    elem_id="batch-samples")
                base_seed = gr.Number(value=0, precision=0, minimum=0, label="Base seed", elem_id="batch-seed")
            name = gr.Textbox(label="Run name", value="Batch run", elem_id="batch-name")
            plan_md = gr.Markdown("", elem_id="batch-plan")
            with gr.Row():
                check_btn = gr.Button("Check plan", elem_id="batch-check")
                run_btn = gr.Button("Run", variant="primary", elem_id="batch-run")
                cancel_btn = gr.Button("Cancel", variant="stop", elem_id="batch-cancel")
            progress = gr.Markdown("", elem_id="batch-progress")
    with gr.Tabs():
        with gr.Tab("Results"):
            with gr.Row():
                query = gr.Textbox(label="Filter", placeholder="text in prompt, output or setting",
                                   elem_id="batch-filter", scale=3)
                failures = gr.Checkbox(label="Failures only", elem_id="batch-failures", scale=1)
            table = gr.Dataframe(value=result_table([]), interactive=False, wrap=True, elem_id="batch-results",
                                 column_widths=["16%", "13%", "5%", "5%", "27%", "6%", "6%", "6%", "5%", "7%", "4%"])
            with gr.Accordion("Prompt and reproduce record of a row (click a row)", open=False,
                              elem_id="batch-inspect-panel"):
                inspector = create_inspector_panel("batch", with_record=True)
        with gr.Tab("Summary"):
            summary = gr.Dataframe(value=summary_table([]), interactive=False, elem_id="batch-summary")
            with gr.Row():
                pass_plot = gr.BarPlot(x="setting", y="pass rate %", title="Pass rate per setting",
                                       elem_id="batch-pass-plot")
                speed_plot = gr.BarPlot(x="setting", y="tok/s", title="Tokens/s per setting",
                                        elem_id="batch-speed-plot")
        with gr.Tab("Pivot"):
            pivot_df = gr.Dataframe(interactive=False, wrap=True, elem_id="batch-pivot")
        with gr.Tab("Compare"):
            with gr.Row():
                side_a = gr.Dropdown(label="A: setting", choices=[], elem_id="batch-compare-a")
                run_b = gr.Dropdown(label="B: run (default: this run)", choices=[], elem_id="batch-compare-run")
                side_b = gr.Dropdown(label="B: setting", choices=[], elem_id="batch-compare-b")
            compare_out = gr.HTML(elem_id="batch-compare")
        with gr.Tab("Runs"):
            runs = gr.Dropdown(label="Stored runs", choices=[], elem_id="batch-runs")
            with gr.Row():
                open_btn = gr.Button("Open", size="sm", elem_id="batch-open")
                rename_text = gr.Textbox(label="New name", elem_id="batch-rename-text", scale=2)
                rename_btn = gr.Button("Rename", size="sm", elem_id="batch-rename")
                delete_btn = gr.Button("Delete", size="sm", variant="stop", elem_id="batch-delete")
                rerun_btn = gr.Button("Re-run", size="sm", elem_id="batch-rerun")
            with gr.Row():
                csv_btn = gr.Button("Export CSV", size="sm", elem_id="batch-export-csv")
                jsonl_btn = gr.Button("Export JSONL", size="sm", elem_id="batch-export-jsonl")
            export_file = gr.File(label="Export", visible=False, elem_id="batch-export-file")

    def run_choices() -> list[tuple[str, int]]:
        return [(f"#{r.id} {r.name} · {r.done}/{r.total} · {r.status}", r.id) for r in store.list()]

    def stored_rows(rid: int | None) -> list[ResultRow]:
        if rid is None:
            return []
        handle = runner.active(rid)
        if handle is not None:
            return handle.rows()
        try:
            return [ResultRow.from_dict(d) for d in store.results(rid)]
        except RunNotFound:
            return []

    def views(rid: int | None, q: str = "", only_failures: bool = False):
        rows = stored_rows(rid)
        labels = list(dict.fromkeys(r.setting for r in rows))
        summ = summary_table(rows)
        fastest = float(summ["tok/s"].max()) if len(summ) and summ["tok/s"].notna().any() else 1.0
        return (result_table(rows, q, only_failures), summ, gr.update(value=summ, y_lim=[0, 100]),
                gr.update(value=summ, y_lim=[0, fastest * 1.15]), pivot_table(rows),
                gr.update(choices=labels, value=labels[0] if labels else None),
                gr.update(choices=labels, value=labels[1] if len(labels) > 1 else (labels[0] if labels else None)),
                gr.update(choices=run_choices(), value=rid), gr.update(choices=run_choices()))

    view_outputs = [table, summary, pass_plot, speed_plot, pivot_df, side_a, side_b, runs, run_b]

    def build_job(data: dict, params) -> BatchJob:
        uploaded = data[upload]
        tmpl = data[template].strip() or None
        if uploaded:
            rows = load_prompts_text(uploaded[0], uploaded[1], tmpl)
        else:
            rows = parse_lines(data[prompts], tmpl)
        rows = with_asserts(rows, data[asserts].splitlines())
        grid = GridSpec(list(data[presets] or []), parse_axes(data[axes]), int(data[samples] or 1),
                        int(data[base_seed] or 0), base=params)
        return BatchJob(data[name].strip() or "Batch run", rows, grid, data[system], bool(data[raw]))

    def describe(job: BatchJob) -> str:
        settings, cells = runner.plan(job)
        rate = services.engine.stats().tokens_per_second or 8.0 * min(len(cells), services.engine.config.max_running)
        budget = sum(c.setting.params.max_new_tokens for c in cells)
        seconds = budget / rate
        took = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
        return (f"**{len(job.rows)} prompts × {len(settings)} settings × {job.grid.samples} samples = "
                f"{len(cells)} cells** · at most {budget:,} tokens · roughly {took} or less")

    return dict(run_id=run_id, upload=upload, prompts=prompts, upload_btn=upload_btn, clear_upload=clear_upload,
                upload_note=upload_note, template=template, asserts=asserts, system=system, raw=raw,
                presets=presets, axes=axes, samples=samples, base_seed=base_seed, name=name, plan_md=plan_md,
                check_btn=check_btn, run_btn=run_btn, cancel_btn=cancel_btn, progress=progress, query=query,
                failures=failures, table=table, summary=summary, pivot_df=pivot_df, side_a=side_a, side_b=side_b,
                run_b=run_b, compare_out=compare_out, runs=runs, open_btn=open_btn, rename_text=rename_text,
                rename_btn=rename_btn, delete_btn=delete_btn, rerun_btn=rerun_btn, csv_btn=csv_btn,
                jsonl_btn=jsonl_btn, export_file=export_file, view_outputs=view_outputs, views=views,
                build_job=build_job, describe=describe, stored_rows=stored_rows, run_choices=run_choices,
                inspector=inspector)


def wire_batch_tab(services: Services, c: dict, params) -> None:
    """Events of the Batch tab; ``params`` (the Parameters tab) is the base when no preset is chosen."""
    runner, store = services.batch_runner, services.batches
    form = {c[k] for k in ("upload", "prompts", "template", "asserts", "system", "raw", "presets", "axes", "samples",
                           "base_seed", "name")}

    def job_from(data: dict) -> BatchJob:
        try:
            return c["build_job"](data, params.params(data))
        except (BatchInputError, InvalidName) as exc:
            raise UserError(str(exc)) from exc

    def check(data: dict):
        try:
            return c["describe"](job_from(data))
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc

    def run(data: dict):
        job = job_from(data)
        try:
            plan_text = c["describe"](job)
            handle = runner.start(job)
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc
        rid = handle.run_id
        while not handle.wait(REFRESH_SECONDS):
            eta = handle.eta_seconds()
            status = f"Running: {handle.done}/{handle.total} done" + (f" · about {eta:.0f}s left" if eta else "")
            yield (plan_text, status, rid, *c["views"](rid))
        word = {"done": "Finished", "cancelled": "Cancelled", "failed": "Failed"}[handle.status]
        took = time.monotonic() - handle.started
        yield (plan_text, f"{word}: {handle.done}/{handle.total} rows in {took:.1f}s", rid, *c["views"](rid))

    def cancel(rid: int | None) -> str:
        if rid is None or not runner.cancel(rid):
            return "Nothing is running."
        return "Cancelling… finished rows are kept."

    def uploaded(file) -> tuple:
        path = Path(file if isinstance(file, str) else file.name)
        content = path.read_bytes()
        try:
            count = len(load_prompts_text(path.name, content))
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc
        return (path.name, content), f"Using **{path.name}**: {count} prompts (the text box is ignored)."

    def compare_view(rid: int | None, a: str | None, b_run: int | None, b: str | None) -> str:
        rows_a = rows_for_setting(c["stored_rows"](rid), a or "")
        rows_b = rows_for_setting(c["stored_rows"](b_run if b_run is not None else rid), b or "")
        return compare_html(rows_a, rows_b, f"A: {a}", f"B: {b}")

    def b_settings(b_run: int | None, rid: int | None):
        labels = list(dict.fromkeys(r.setting for r in c["stored_rows"](b_run if b_run is not None else rid)))
        return gr.update(choices=labels, value=labels[0] if labels else None)

    def open_run(chosen: int | None):
        if chosen is None:
            raise UserError("Choose a stored run first.")
        return chosen, *c["views"](chosen)

    def rename(chosen: int | None, new_name: str):
        try:
            store.rename(_need(chosen), new_name)
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        return gr.update(choices=c["run_choices"](), value=chosen)

    def delete(chosen: int | None, current: int | None):
        try:
            store.delete(_need(chosen))
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        rid = None if current == chosen else current
        return rid, *c["views"](rid)

    def rerun(chosen: int | None):
        stored = store.get(_need(chosen))
        try:
            job = BatchJob.from_spec(f"{stored.name} (re-run)", stored.spec)
            handle = runner.start(job)
        except BatchInputError as exc:
            raise UserError(str(exc)) from exc
        while not handle.wait(REFRESH_SECONDS):
            yield f"Re-running: {handle.done}/{handle.total} done", handle.run_id, *c["views"](handle.run_id)
        yield f"Re-run {handle.status}: {handle.done}/{handle.total} rows", handle.run_id, *c["views"](handle.run_id)

    def export(chosen: int | None, kind: str):
        rid = _need(chosen)
        rows = c["stored_rows"](rid)
        folder = Path(tempfile.mkdtemp(prefix="batch-export-"))
        path = folder / f"batch-run-{rid}.{kind}"
        path.write_text(to_csv(rows) if kind == "csv" else to_jsonl(rows), encoding="utf-8")
        return gr.update(value=str(path), visible=True)

    run_outputs = [c["plan_md"], c["progress"], c["run_id"], *c["view_outputs"]]
    c["check_btn"].click(shows_errors(check), form | set(params.inputs), [c["plan_md"]])
    c["run_btn"].click(shows_errors(run), form | set(params.inputs), run_outputs, concurrency_limit=None)
    c["cancel_btn"].click(shows_errors(cancel), [c["run_id"]], [c["progress"]], concurrency_limit=None)
    c["upload_btn"].upload(shows_errors(uploaded), [c["upload_btn"]], [c["upload"], c["upload_note"]])
    c["clear_upload"].click(lambda: (None, ""), None, [c["upload"], c["upload_note"]])
    for control in (c["query"], c["failures"]):
        control.change(lambda rid, q, f: c["views"](rid, q, f)[0], [c["run_id"], c["query"], c["failures"]],
                       [c["table"]], show_progress="hidden")
    compare_inputs = [c["run_id"], c["side_a"], c["run_b"], c["side_b"]]
    for control in (c["side_a"], c["side_b"]):
        control.change(shows_errors(compare_view), compare_inputs, [c["compare_out"]], show_progress="hidden")
    c["run_b"].change(shows_errors(b_settings), [c["run_b"], c["run_id"]], [c["side_b"]])
    c["open_btn"].click(shows_errors(open_run), [c["runs"]], [c["run_id"], *c["view_outputs"]])
    c["rename_btn"].click(shows_errors(rename), [c["runs"], c["rename_text"]], [c["runs"]])
    c["delete_btn"].click(shows_errors(delete), [c["runs"], c["run_id"]], [c["run_id"], *c["view_outputs"]])
    c["rerun_btn"].click(shows_errors(rerun), [c["runs"]], [c["progress"], c["run_id"], *c["view_outputs"]], concurrency_limit=None)
    def select_row(rid: int | None, q: str, only_failures: bool, selected: gr.SelectData):
        """One click on a result row: the exact prompt the model read, its tokens, and the row's record."""
        index = selected.index[0] if isinstance(selected.index, (list, tuple)) else selected.index
        rows = shown_rows(c["stored_rows"](rid), q, only_failures)
        if rid is None or not 0 <= index < len(rows):
            raise UserError("Run a batch or open a stored run, then click one of its rows.")
        row, run = rows[index], store.get(rid)
        model = services.models.loaded  # runs stored before runs kept their loader: guess from what is loaded
        loader = model.loader if model is not None and model.name == run.model else "transformers"
        record = record_for_batch_row(run.model or "?", run.spec, row, loader)
        which = f"row {index + 1}: prompt {row.prompt_id}, {row.setting}, sample {row.sample}"
        try:
            request = record.request(model.tokenizer)
            rendered, tokens, note = inspection_views(inspect_rendered(model, request.prompt,
                                                                       request.add_special_tokens))
        except (InsightUnavailable, RecordError, AttributeError) as exc:
            rendered, tokens, note = "", None, f"Tokens need a local model ({exc})."
        return (f"{which} · {note}", rendered, tokens, *record_views(record, services.config.api_port))

    c["table"].select(shows_errors(select_row), [c["run_id"], c["query"], c["failures"]], c["inspector"].outputs)
    c["csv_btn"].click(shows_errors(lambda r: export(r, "csv")), [c["runs"]], [c["export_file"]])
    c["jsonl_btn"].click(shows_errors(lambda r: export(r, "jsonl")), [c["runs"]], [c["export_file"]])


def _need(run: int | None) -> int:
    if run is None:
        raise UserError("Choose a stored run first.")
    return run
