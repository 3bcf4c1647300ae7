"""The browser UI: tabs stacked over the shared services. No logic here that the API would need.

Each tab module lays out its components and wires them to its controller
(webui/controllers); each contributes its own page-load update, sent as one (see
``page_load``). Per-browser-tab
state lives in gr.State (the open chat) or is keyed by Gradio's session hash
(the running request), never in module globals.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import gradio as gr

from webui.controllers.generation import ActiveRequests, status_text
from webui import owner
from webui.services import Services
from webui.ui.feedback import confine_progress, create_tab_opener
from webui.ui.live import LiveReplies
from webui.ui.page_channel import PageChannel, line_value
from webui.ui import (ab_tab, account, batch_tab, chat_tab, insight_tab, model_tab, notebook_tab, parameters_tab,
                      requests_tab, training_tab)

log = logging.getLogger(__name__)

CSS = """
#status-line {font-family: ui-monospace, monospace; font-size: 0.9em}
#chat-log button[aria-label='Clear'] {display: none}  /* it blanked the view and deleted nothing: Delete deletes */
/* a message's image or document is a row of its own in Gradio 6's log, with its own Edit (its Submit failed in the
   page: "….slice is not a function") and Share (Hugging Face Spaces only): a message is edited by its text's Edit */
#chat-log .message-row:has(.message.component) + .message-buttons button[aria-label='Edit'] {display: none}
#chat-log .message-buttons button[aria-label='Share'] {display: none}
#notebook-text textarea {font-family: ui-monospace, monospace}
.batch-compare {width: 100%; border-collapse: collapse; font-size: 0.9em}
.batch-compare td, .batch-compare th {border: 1px solid var(--border-color-primary); padding: 4px; vertical-align: top}
.batch-compare tr.differs td:last-child {color: var(--color-accent); font-weight: 600}
mark.diff-del {background: #fdd; text-decoration: line-through}
mark.diff-add {background: #dfd}
#batch-results td, #batch-results th, #batch-pivot td {word-break: normal; overflow-wrap: break-word}
#batch-results table, #batch-results .cell-wrap * {font-family: var(--font)}  /* narrower than mono: more fits */
#batch-results th, #batch-results .header-content {white-space: nowrap}  /* a header never breaks inside a word */
#batch-pivot {overflow-x: auto}
#requests-table td {white-space: nowrap}
.param-wrong .info-text {color: #c2410c; font-weight: 600}  /* a value not used: a warning, not help-text grey */
.dark .param-wrong .info-text {color: #fb923c}
#params-showing {display: none}  /* which parameters the page applied last: for the page's own checks, not shown */
.load-option {min-width: min(160px, 100%) !important}  /* a checkbox ignores min_width: narrow, its text was cut */
"""


def logged_in_user() -> str | None:
    """The user of the Gradio event being handled (None without a login, or outside an event)."""
    from gradio.context import LocalContext

    return getattr(LocalContext.request.get(None), "username", None)


def build_ui(services: Services, live: LiveReplies | None = None, channel: PageChannel | None = None) -> gr.Blocks:
    """The page; ``live``: where the Chat and Notebook tabs stream a reply's text; ``channel``: where the page saves
    its drafts and reads its status lines (create_server mounts their routes)."""
    live, channel = live or LiveReplies(), channel or PageChannel()
    owner.set_resolver(logged_in_user)  # the stores keep each logged-in user's data apart
    active = ActiveRequests()
    with gr.Blocks(title="LLM Workbench", analytics_enabled=False) as demo:
        with gr.Row(equal_height=True):
            gr.Markdown("### LLM Workbench", elem_id="app-title")
            current = services.in_use()
            picker = gr.Dropdown(choices=services.models.names(), value=current.name if current else None,
                                 label="Model in use (Chat, Notebook, Insight; load more in the Model tab)",
                                 elem_id="model-in-use", scale=1, min_width=260)
            # kept up to date by the page script from GET /page-lines (webui.ui.page_channel), not a Gradio timer
            gr.HTML(line_value(status_text(services)), elem_id="status-line", scale=3)
            channel.shows("status-line", lambda: status_text(services))
            user = account.create_account(services)  # with a login: who, and Log out
        opener = create_tab_opener()
        with gr.Tabs(elem_id="tabs") as tabs:
            chat_panel = gr.Tab("Chat", id="chat", elem_id="tab-chat")
            notebook_panel = gr.Tab("Notebook", id="notebook", elem_id="tab-notebook")
            with gr.Tab("Batch", id="batch", elem_id="tab-batch"):
                batch = batch_tab.create_batch_tab(services)
            ab_panel = gr.Tab("A/B", id="ab", elem_id="tab-ab")
            insight_panel = gr.Tab("Insight", id="insight", elem_id="tab-insight")
            with gr.Tab("Parameters", id="parameters", elem_id="tab-parameters"):
                params = parameters_tab.create_parameters_tab(services)
            with gr.Tab("Model", id="model", elem_id="tab-model") as model_panel:
                model = model_tab.create_model_tab(services, picker, model_panel, channel)
            with gr.Tab("Training", id="training", elem_id="tab-training"):
                training = training_tab.create_training_tab(services)
            with gr.Tab("Requests", id="requests", elem_id="tab-requests"):
                requests = requests_tab.create_requests_tab(services)
            requests_tab.wire_refresh(requests, tabs)
            with chat_panel:
                chat = chat_tab.create_chat_tab(services, params, active, live, channel)
            with notebook_panel:
                notebook = notebook_tab.create_notebook_tab(services, params, active, live, channel)
            batch_tab.wire_batch_tab(batch, params)
            chat_tab.wire_notebook(chat, notebook.text, opener)
            chat_tab.wire_model_in_use(chat, picker)
            with insight_panel:
                insight = insight_tab.create_insight_tab(services, params)
            with ab_panel:
                ab = ab_tab.create_ab_tab(services, params, active, live)
            requests_tab.wire_open(requests, chat, notebook.text, insight, batch, opener)
            training_tab.wire_ab(training, ab, opener)
        params.panel.page_showing.render()  # outside the tabs, so that it is in the page whichever tab is open
        # the page's token for its drafts and lines (webui.ui.page_channel), handed over by the load event
        page_token = gr.Textbox("", visible="hidden", elem_id="page-token", container=False)
        page_token.change(None, [page_token], None,
                          js="(token) => window.workbenchPage && window.workbenchPage.start(token)")
        parts = [parameters_tab.on_load(params), chat_tab.on_load(chat), notebook_tab.on_load(notebook),
                 batch_tab.on_load(batch), model_tab.on_load(model), insight_tab.on_load(insight), ab_tab.on_load(ab),
                 requests_tab.on_load(requests), training_tab.on_load(training)]
        if user is not None:
            parts.append(account.on_load(user))
        parts.append(([page_token], channel.open))
        demo.load(*page_load(parts), show_progress="hidden")  # 177 outputs: a spinner on each is noise
        confine_progress(demo)
    return demo


def page_load(parts: list[tuple[list, object]]) -> tuple[object, None, list]:
    """(function, inputs, outputs) of the one load event that fills every tab's part of a (re)loaded page.

    One event, so the page gets all of it at once: separate loads arrived one by one, and one that came after
    the user had typed (the Notebook's saved draft, say) replaced what was typed. The page knows it has them
    when the parameters' showing (``#params-showing``) moves. A part that fails is left as built, and said.
    """
    outputs = [component for components, _ in parts for component in components]

    def load(request: gr.Request) -> dict[Any, Any]:
        values: dict[Any, Any] = {}
        for components, fill in parts:
            try:
                if not callable(fill):
                    raise TypeError(f"a page part's fill is not a function: {fill!r}")
                got = fill(request) if inspect.signature(fill).parameters else fill()
                values.update(_by_component(components, got))
            except Exception as exc:  # noqa: BLE001 - one tab's failure must not leave the whole page empty
                log.exception("loading part of the page failed")
                gr.Warning(f"Part of the page could not be loaded ({exc}); reload to try again.")
        return values  # by component: a part that failed is left out, so it stays as built

    return load, None, outputs



def _by_component(components: list, got: Any) -> dict[Any, Any]:
    """A page part's values by component: as its fill returned them (a dict keyed by its components), or in the
    order of its components (one value for one component)."""
    if isinstance(got, dict) and got and all(isinstance(key, gr.blocks.Block) for key in got):
        strays = [key for key in got if key not in components]
        if strays:
            raise ValueError(f"a page part filled components it does not list: {strays}")
        return got
    return dict(zip(components, got if len(components) > 1 else [got], strict=True))
