"""Number controls whose box keeps what was typed and passes it on as it is, for the Parameters tab's check.

The rule for a wrong value (see webui/controllers/parameters.py) is that its box keeps exactly what was typed and
the message beside it says it is not used and what is. Gradio's own would not let it: a number box drops what is
not a number ("abc" left it empty), a slider's box snaps a value into its range when it loses focus (9 became 5),
and the server refuses a value out of range with a message naming no parameter. So these classes pass the value
on as it is, and ``TYPED_BOXES_HEAD`` makes their boxes plain text boxes that keep what was typed. They are
classes, not patched instances, because Gradio rebuilds a component from its class when an event updates it (its
message, say). Gradio writes a .pyi stub beside any module defining a component (ignored by git; a read-only
checkout only skips it).
"""

from __future__ import annotations

from typing import Any

import gradio as gr

TYPED = "typed-number"
"""The class of every control whose box keeps what was typed."""

TYPED_BOXES_HEAD = """<script>
(() => {
  // The boxes of the controls of class typed-number are text boxes: they keep what was typed ("abc", "-1").
  const typed = (node) => {
    if (!(node instanceof Element)) return;
    for (const box of node.querySelectorAll('.%(cls)s input[type=number]')) {
      box.type = 'text';
      box.inputMode = 'decimal';
    }
  };
  new MutationObserver((changes) => { for (const c of changes) c.addedNodes.forEach(typed); })
    .observe(document.documentElement, {childList: true, subtree: true});
  typed(document.documentElement);
  // A slider's box snaps its value into the slider's range when it loses focus: this one keeps it as typed.
  document.addEventListener('blur', (event) => {
    const box = event.target;
    if (box instanceof Element && box.matches('.%(cls)s input[data-testid=number-input]')) event.stopPropagation();
  }, true);
})();
</script>""" % {"cls": TYPED}


class TypedSlider(gr.Slider):
    is_template = True  # the page draws it as a Slider

    # Slider says -> float; what was typed is passed on as it is, for the controller to read or name
    def preprocess(self, payload: Any) -> Any:  # type: ignore[override,unused-ignore]
        return payload


class TypedNumber(gr.Number):
    is_template = True  # the page draws it as a Number

    # Number says -> float; what was typed is passed on as it is, for the controller to read or name
    def preprocess(self, payload: Any) -> Any:  # type: ignore[override,unused-ignore]
        return payload
