"""The prompt inspector's views, shared by the Insight tab, a chat message and a batch row."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from webui.insight import PromptInspection
from webui.reproduce import ReproduceRecord
from webui.counts import counted


def inspection_views(seen: PromptInspection) -> tuple[str, pd.DataFrame, str]:
    """(exact text, token table, summary: count and share of the context)."""
    tokens = pd.DataFrame({"#": range(len(seen.ids)), "id": seen.ids,
                           "token": [repr(t)[1:-1] for t in seen.tokens]})
    note = (f"**{counted(len(seen.ids))}** · {seen.used:.1%} of the {seen.context_length:,}-token context"
            if seen.context_length else f"**{counted(len(seen.ids))}**")
    return seen.text, tokens, note


@dataclass
class InspectorPanel:
    """Summary, exact text, tokens; and the reproduce record (JSON, curl, openai) where there is one."""

    note: gr.Markdown
    rendered: gr.Code
    tokens: gr.Dataframe
    record_json: gr.Code | None = None
    record_curl: gr.Code | None = None
    record_py: gr.Code | None = None

    @property
    def outputs(self) -> list:
        return [c for c in (self.note, self.rendered, self.tokens, self.record_json, self.record_curl,
                            self.record_py) if c is not None]


def create_inspector_panel(prefix: str, with_record: bool) -> InspectorPanel:
    note = gr.Markdown("", elem_id=f"{prefix}-inspect-note")
    rendered = gr.Code(label="Exactly what the model reads", language=None, interactive=False,
                       elem_id=f"{prefix}-inspect-rendered")
    tokens = gr.Dataframe(interactive=False, elem_id=f"{prefix}-inspect-tokens", max_height=300)
    panel = InspectorPanel(note, rendered, tokens)
    if with_record:
        panel.record_json = gr.Code(language="json", label="Record (paste it in the Insight tab to re-run)",
                                    interactive=False, elem_id=f"{prefix}-record")
        panel.record_curl = gr.Code(language="shell", label="curl", interactive=False, elem_id=f"{prefix}-record-curl")
        panel.record_py = gr.Code(language="python", label="openai (Python)", interactive=False,
                                  elem_id=f"{prefix}-record-python")
    return panel


def record_views(record: ReproduceRecord | None, api_port: int) -> tuple[str, str, str]:
    if record is None:
        return "", "", ""
    base = f"http://127.0.0.1:{api_port}/v1"
    return record.to_json(), record.curl(base), record.openai_snippet(base)
