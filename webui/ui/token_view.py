"""The token view component (Chat and Notebook): a gr.HTML whose alternatives branch the generation.

Clicking an alternative puts ``{"pos", "token_id"}`` in the component's value and
fires its ``submit`` event, which the tab handles by branching.
"""

from __future__ import annotations

from typing import Any, Sequence

import gradio as gr

from webui.token_view import BranchError, render

CSS = """
.tv { line-height: 1.9; white-space: pre-wrap; font-family: var(--font-mono); font-size: 0.9em; }
.tv-tok { position: relative; border-radius: 3px; padding: 1px 0; cursor: pointer; }
.tv-tok:hover, .tv-tok:focus { outline: 1px solid var(--body-text-color); }
.tv-pop { display: none; position: fixed; z-index: 1000; white-space: nowrap;
          background: var(--background-fill-primary); border: 1px solid var(--border-color-primary);
          border-radius: 6px; padding: 4px 6px; box-shadow: 0 2px 8px rgba(0,0,0,.25); font-size: 0.85em; }
.tv-tok:hover .tv-pop, .tv-tok:focus .tv-pop, .tv-tok:focus-within .tv-pop { display: block; }
.tv-pop table { border-collapse: collapse; margin: 0; }
.tv-pop td, .tv-pop th { padding: 1px 8px; text-align: right; border: none; }
.tv-pop td:first-child, .tv-pop th:first-child { text-align: left; }
.tv-pop .tv-chosen td { font-weight: bold; }
.tv-branch { cursor: pointer; border: 1px solid var(--border-color-primary); border-radius: 4px; padding: 0 4px;
             background: var(--button-secondary-background-fill); font-size: inherit; line-height: 1.4; }
.tv-pop code, .tv-branch code { font-size: inherit; padding: 0; background: none; }
.tv-branch:hover { background: var(--button-secondary-background-fill-hover); }
.tv-empty { color: var(--body-text-color-subdued); }
"""

JS = """
const place = (event) => {  // popups are position: fixed, so no container clips them: under their token, or
  const token = event.target.closest('.tv-tok');  // above it where the window ends first
  if (!token) return;
  const pop = token.querySelector('.tv-pop');
  const box = token.getBoundingClientRect();
  pop.style.left = Math.max(0, Math.min(box.left, window.innerWidth - 360)) + 'px';
  const height = pop.offsetHeight;  // shown already: the token is hovered or focused
  const below = box.bottom + height <= window.innerHeight || box.top - height < 0;
  pop.style.top = (below ? Math.max(0, Math.min(box.bottom, window.innerHeight - height)) : box.top - height) + 'px';
};
element.addEventListener('mouseover', place);
element.addEventListener('focusin', place);
element.addEventListener('click', (event) => {
  const button = event.target.closest('[data-branch-token]');
  if (!button) return;
  event.preventDefault();
  props.value = {...props.value, branch: {pos: Number(button.dataset.pos), token_id: Number(button.dataset.branchToken)}};
  trigger('submit');
});
"""

HELP = ("Each token is shaded by the probability the model gave it (red: unlikely, green: likely). Hover or "
        "focus a token to see its alternatives: **model** is the raw distribution, **sampled from** is after "
        "the sampling processors (*cut*: removed by them). Click an alternative to continue from there with it.")


def view_value(rows: Sequence[dict[str, Any]], branchable: bool = True) -> dict[str, Any]:
    return {"html": render(rows, branchable), "branch": None}


def create_token_view(elem_id: str) -> gr.HTML:
    gr.Markdown(HELP, elem_classes=["tv-help"])
    return gr.HTML(view_value([]), html_template="${value.html}", css_template=CSS, js_on_load=JS,
                   elem_id=elem_id, padding=False)


NO_BRANCH = "click one of a token's alternatives to branch from it"


def branch_of(value: Any) -> tuple[int, int]:
    """(position, token id) the user clicked; BranchError when the value holds none."""
    branch = value.get("branch") if isinstance(value, dict) else None
    if not isinstance(branch, dict):
        raise BranchError(NO_BRANCH)
    try:
        return int(branch["pos"]), int(branch["token_id"])
    except (TypeError, KeyError, ValueError):
        raise BranchError(NO_BRANCH) from None
