"""A stored batch run back as the Batch tab's form: its prompts, asserts and grid, so a person can change them and
run again (Open in the Runs tab).

Prompts that all carry the same asserts, written as one line each, go back into the text boxes. Prompts with asserts
of their own (from a file), several lines, or ids of their own go back as a JSONL "upload" that holds each prompt with
its asserts, so nothing is lost; the note under the upload button says so.
"""

from __future__ import annotations

import json
from typing import Any

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.run.grid import BASE_LABEL, GridSpec, format_value
from webui.batch.run.prompts import PromptRow, escape_newlines
from webui.store.batch_runs import BatchRun


def form_values(run: BatchRun) -> tuple[dict[str, Any], str]:
    """(BatchForm's field values for ``run``, a note on what was filled in) ; BatchInputError for a spec that
    cannot be read."""
    spec = run.spec
    rows = [PromptRow.from_dict(r) for r in spec.rows]
    grid = GridSpec.from_dict(spec.grid)
    remote = spec.remote_judge or {}
    values: dict[str, Any] = dict(
        template="", system=spec.system_prompt, raw=spec.raw,
        presets=tuple(grid.presets), axes=axes_text(grid.axes), samples=grid.samples, base_seed=grid.base_seed,
        name=run.name, use_cache=spec.use_cache, judge_url=remote.get("url", ""),
        judge_model=remote.get("model", "") or spec.judge_model,
        judge_tokens=str(spec.judge_tokens) if spec.judge_tokens else "")
    if spec.judge_prompt:
        values["judge_prompt"] = spec.judge_prompt
    notes = []
    if _as_lines(rows):
        values.update(prompts="\n".join(escape_newlines(r.text) for r in rows),
                      asserts="\n".join(a.label for a in rows[0].asserts), upload=None)
    else:
        lines = [json.dumps({"id": r.id, **({"messages": list(r.messages)} if r.messages else {"prompt": r.text}),
                             "asserts": [a.to_dict() for a in r.asserts]}, ensure_ascii=False) for r in rows]
        values.update(prompts="\n".join(escape_newlines(r.text) for r in rows), asserts="",
                      upload=(f"run-{run.id}-prompts.jsonl", ("\n".join(lines) + "\n").encode("utf-8")))
        notes.append(f"Using the {len(rows)} prompts of run #{run.number} with each one's own asserts (the text box "
                     "shows them and is ignored; “Use the text box instead” drops the file).")
    labels = [s.label for s in spec.settings]
    if not grid.presets and not grid.axes and labels != [BASE_LABEL]:
        notes.append(f"Its settings ({', '.join(map(str, labels))}) came from a promptfoo suite, which the form "
                     "cannot hold; Re-run runs them again.")
    elif not grid.presets and grid.base is not None and grid.base.changed():
        changed = ", ".join(f"{k}={format_value(v)}" for k, v in grid.base.changed().items())
        notes.append(f"With no preset it ran on the Parameters tab's values of then ({changed}); Run uses the "
                     "tab's values now.")
    return values, " ".join(notes)


def axes_text(axes: dict[str, list[Any]]) -> str:
    """The grid's axes as the form writes them, one per line (``temperature=0,0.7``; a JSON list where a value is
    not plain or holds a comma)."""
    out = []
    for name, values in axes.items():
        shown = [format_value(v) for v in values]
        plain = all(isinstance(v, (int, float, str)) and "," not in s and not s.startswith("[")
                    for v, s in zip(values, shown))
        out.append(f"{name}={','.join(shown)}" if plain else f"{name}={json.dumps(values, ensure_ascii=False)}")
    return "\n".join(out)


def _as_lines(rows: list[PromptRow]) -> bool:
    """Whether the prompts read back the same from the text boxes: one line each, numbered ids, the same asserts
    on every prompt, each written exactly by its label."""
    if not rows:
        return True
    first = rows[0].asserts
    for position, row in enumerate(rows, 1):
        if row.id != str(position) or row.text != row.text.strip() or "\r" in row.text or row.asserts != first \
                or row.messages is not None:  # a chat is no line of text
            return False
    try:
        return all(parse_assert(a.label) == a for a in first)
    except BatchInputError:
        return False
