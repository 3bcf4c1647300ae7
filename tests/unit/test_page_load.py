"""The page's one load event without a browser: each part's values reach its components by component, whether the
part returns them keyed by component or in its components' order; a part that fails is left out."""

from __future__ import annotations

import gradio as gr
import pytest

from webui.ui.app import page_load


def test_each_part_fills_its_own_components_and_a_failed_one_stays_as_built():
    with gr.Blocks():
        a, b, c, d, e = (gr.Textbox() for _ in range(5))

    def broken():
        raise RuntimeError("no")

    load, _, outputs = page_load([([a, b], lambda: {b: "B"}), ([c, d], lambda: ("C", "D")), ([e], broken),
                                  ([e], lambda: gr.update(value="E"))])
    assert outputs == [a, b, c, d, e, e]
    with pytest.warns(UserWarning, match="could not be loaded"):  # the broken part, said
        assert load(None) == {b: "B", c: "C", d: "D", e: gr.update(value="E")}  # a: not filled, so not changed


def test_a_part_that_fills_a_component_it_does_not_list_or_too_few_is_refused():
    with gr.Blocks():
        a, b = gr.Textbox(), gr.Textbox()
    with pytest.warns(UserWarning, match="could not be loaded"):
        assert page_load([([a], lambda: {b: "B"}), ([a, b], lambda: ("A",))])[0](None) == {}


def test_events_that_show_no_progress_keep_the_pages_loading_statuses_few(services):
    """The page updates the loading status of every component an event ever reported progress on, with each message
    of any event (webui.ui.feedback.confine_progress): events showing no progress report it to one hidden element,
    the page load and a preset among them, so the statuses the page keeps after a load, a preset and a new chat are
    one element's, not 177 + 55."""
    from webui.ui.app import build_ui

    demo = build_ui(services)
    backend = [fn for fn in demo.fns.values() if fn.fn is not None]
    sink = next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "progress-sink")
    hidden = [fn for fn in backend if fn.show_progress == "hidden"]
    assert hidden and all(fn.show_progress_on == [sink] for fn in hidden)
    load = next(fn for fn in backend if getattr(fn.fn, "__name__", "") == "load" and len(fn.outputs) > 100)
    preset = next(fn for fn in backend if getattr(fn.fn, "__name__", "") == "apply_preset")
    assert load.show_progress == preset.show_progress == "hidden"
    assert all(fn.show_progress_on is None for fn in backend if fn.show_progress != "hidden")  # a model's load bar
    assert demo.get_config_file()["dependencies"][load._id]["show_progress_on"] == [sink._id]  # as the page gets it
