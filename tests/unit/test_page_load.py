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
