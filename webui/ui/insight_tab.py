"""Insight tab: the prompt as the model sees it, and the next-token distribution under the current parameters."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from webui.engine import EngineError
from webui.insight import InsightUnavailable, inspect_prompt, next_tokens, perplexity
from webui.reproduce import RecordError, parse_record
from webui.controllers import UserError
from webui.services import Services
from webui.ui.feedback import shows_errors
from webui.ui.inspection import inspection_views


def perplexity_table(services: Services) -> pd.DataFrame:
    """Every stored evaluation, newest first, to compare models, quantizations and adapters."""
    import datetime

    rows = [[r.model + "".join(f" +{n}×{w:g}" for n, w in r.loras), r.loader, r.dataset, r.tokens,
             round(r.ppl, 3), r.window, datetime.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M")]
            for r in services.perplexity.list()]
    return pd.DataFrame(rows, columns=["model", "loader", "text", "tokens", "perplexity", "window", "when"])


def create_insight_tab(services: Services, params) -> dict:
    with gr.Row():
        with gr.Column(scale=2):
            text = gr.Textbox(label="Text", lines=5, elem_id="insight-text",
                              placeholder="The capital of France is")
            with gr.Row():
                chat = gr.Checkbox(label="As a chat message (apply the chat template)", value=False,
                                   elem_id="insight-chat")
                system = gr.Textbox(label="System prompt", lines=1, elem_id="insight-system")
            with gr.Row():
                inspect_btn = gr.Button("Inspect prompt", elem_id="insight-inspect")
                next_btn = gr.Button("Next tokens", variant="primary", elem_id="insight-next")
            summary = gr.Markdown("", elem_id="insight-summary")
        with gr.Column(scale=3):
            chart = gr.BarPlot(x="token", y="probability", color="under these parameters", sort="-y",
                               title="Top 20 next tokens (raw probability)", elem_id="insight-chart")
    with gr.Tabs():
        with gr.Tab("Next tokens"):
            table = gr.Dataframe(interactive=False, elem_id="insight-next-table")
        with gr.Tab("Tokens of the prompt"):
            rendered = gr.Code(label="Exactly what the model reads", language=None, interactive=False,
                               elem_id="insight-rendered")
            token_table = gr.Dataframe(interactive=False, elem_id="insight-tokens")
        with gr.Tab("Re-run a record"):
            record_in = gr.Code(language="json", label="Paste a record (from a chat reply's Reproduce panel)",
                                interactive=True, elem_id="record-input")
            record_btn = gr.Button("Re-run it", variant="primary", elem_id="record-run")
            record_out = gr.Textbox(label="Output", lines=6, interactive=False, elem_id="record-output")
            record_note = gr.Markdown("", elem_id="record-note")
        with gr.Tab("Perplexity"):
            with gr.Row():
                ppl_text = gr.Textbox(label="Text to evaluate (or upload a .txt)", lines=4, elem_id="ppl-text",
                                      scale=4)
                with gr.Column(scale=1):
                    ppl_upload = gr.UploadButton("Upload .txt", file_types=[".txt"], size="sm", elem_id="ppl-upload")
                    ppl_window = gr.Number(value=512, precision=0, minimum=2, label="Window (tokens)",
                                           elem_id="ppl-window")
                    ppl_btn = gr.Button("Evaluate", variant="primary", elem_id="ppl-run")
            ppl_note = gr.Markdown("", elem_id="ppl-note")
            ppl_table = gr.Dataframe(value=perplexity_table(services), interactive=False, elem_id="ppl-results")

    def inspect(value: str, as_chat: bool, system_prompt: str):
        try:
            seen = inspect_prompt(services.models.loaded, value, as_chat, system_prompt)
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc
        return inspection_views(seen)

    def explore(data: dict):
        sampling = params.params(data)
        try:
            found = next_tokens(services.engine, data[text], data[chat], sampling, 20, data[system])
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc
        frame = pd.DataFrame({
            "token": [repr(t.token)[1:-1] for t in found], "id": [t.token_id for t in found],
            "probability": [round(t.probability, 4) for t in found],
            "after processors": [round(t.after, 4) for t in found],
            "under these parameters": ["kept" if t.kept else "cut" for t in found]})
        cut = sum(not t.kept for t in found)
        note = (f"Top token **{frame['token'][0]!s}** ({found[0].probability:.1%}). The current parameters cut "
                f"{cut} of these 20.")
        return frame, frame, note

    def evaluate(value: str, window: float | None, progress=gr.Progress()):
        model = services.models.loaded
        loras = services.models.active_loras
        try:
            result = perplexity(services.engine, value, int(window or 512), loras,
                                progress=lambda f, m: progress(f, desc=m))
        except (InsightUnavailable, ValueError) as exc:
            raise UserError(str(exc)) from exc
        label = " ".join(value.split())[:40] + ("…" if len(value) > 40 else "")
        services.perplexity.add(model.name, model.loader, loras, label, result.tokens, result.nll, result.ppl,
                                result.window)
        return (f"**Perplexity {result.ppl:.2f}** over {result.tokens:,} tokens (mean NLL {result.nll:.4f}, "
                f"window {result.window}).", perplexity_table(services))

    def load_text(file):
        from pathlib import Path

        return Path(file if isinstance(file, str) else file.name).read_text(encoding="utf-8", errors="replace")

    def rerun(text_in: str):
        try:
            record = parse_record(text_in or "")
            model = services.models.loaded
            if model is None:
                raise RecordError("no model is loaded; load the record's model first")
            note = "" if model.name == record.model else (
                f"Note: the record was made with **{record.model}**; **{model.name}** is loaded now. ")
            result = services.engine.generate(record.request(model.tokenizer))
        except (RecordError, EngineError, ValueError) as exc:
            raise UserError(str(exc)) from exc
        return result.text, note + f"{result.usage.completion_tokens} tokens · finish: {result.finish_reason} · " \
                                   f"seed {result.seed}"

    record_btn.click(shows_errors(rerun), [record_in], [record_out, record_note], concurrency_limit=None)
    ppl_btn.click(shows_errors(evaluate), [ppl_text, ppl_window], [ppl_note, ppl_table], concurrency_limit=None)
    ppl_upload.upload(shows_errors(load_text), [ppl_upload], [ppl_text])
    inspect_btn.click(shows_errors(inspect), [text, chat, system], [rendered, token_table, summary])
    next_btn.click(shows_errors(explore), {text, chat, system, *params.inputs}, [chart, table, summary], concurrency_limit=None)
    return {"text": text, "ppl_table": ppl_table}
