"""Transforms: code that rewrites an output before asserts check it (promptfoo's ``transform``).

A transform is inline JavaScript (``output.trim().toLowerCase()``; one line is an expression, several a function
body with ``return``), a JavaScript file (``file://clean.js[:functionName]``, run by webui.batch.asserts.js) or a Python
file (``file://clean.py[:function]``, default function ``get_transform``, run by webui.batch.asserts.python). It is
called with (output, context) where context is ``{vars, prompt}``, and returns the new output (anything that is
not text becomes its JSON).

promptfoo writes one on a test (``options.transform``, also under ``defaultTest``; a test's own replaces the
default) and on an assert (``transform``). Here an assert holds the transforms that apply to it, in order
(``Assert.transform``: the test's, then its own), so asserts with transforms are plain data that round-trip; the
stored output is always the model's. A transform that fails makes the assert fail with what happened.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from webui.batch.asserts.errors import BatchInputError, ScriptError
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.asserts.js import JS_TIMEOUT, call_javascript, check_javascript
from webui.batch.asserts.python import call_python, python_target

if TYPE_CHECKING:
    from webui.batch.asserts.types import Observed

TRANSFORM_TIMEOUT = JS_TIMEOUT  # seconds a transform may take


def is_python_transform(value: str) -> bool:
    """Whether a transform is Python (a .py file), which runs with the process's rights, unlike JavaScript."""
    return _is_python(value)


def _is_python(value: str) -> bool:
    return value.strip().startswith("file://") and python_target(value)[0].suffix.lower() == ".py"


def check_transforms(given: Any) -> tuple[str, ...]:
    """An assert's transforms as it holds them (a text or a list of texts; each inline JavaScript or a
    ``file://`` .js/.py file that exists), checked before a batch runs."""
    items = () if given is None else (given,) if isinstance(given, str) else given
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in items):
        raise BatchInputError(f"transform must be JavaScript code or a file://path.js or file://path.py, or a list "
                              f"of them; got {given!r:.80}")
    for value in items:
        if not _is_python(value):
            check_javascript(value, {}, kind="transform")
            continue
        path, function = python_target(value, "get_transform")
        if not path.is_file():
            raise BatchInputError(f"transform {value}: there is no file {path}")
        if not function.isidentifier():
            raise BatchInputError(f"transform {value}: '{function}' is not a function name")
    return tuple(items)


def resolved(value: Any, files: SuiteFiles) -> Any:
    """A promptfoo transform with its ``file://`` path made absolute, from the suite's folder."""
    if isinstance(value, str) and value.strip().startswith("file://"):
        return f"file://{files.path(value.strip().removeprefix('file://'))}"
    return value


def transformed(transforms: Sequence[str], seen: Observed) -> Observed:
    """What was observed, with its output passed through ``transforms`` in order (the first gets the output's
    value when it has one: tool calls). ScriptError when one fails."""
    output = seen.script_output
    context = {"vars": dict(seen.variables), "prompt": {"raw": seen.prompt}}
    for value in transforms:
        output = apply_transform(value, output, context)
    return dataclasses.replace(seen, output=output, output_value=None)


def apply_transform(value: str, output: Any, context: Mapping[str, Any], timeout: float = TRANSFORM_TIMEOUT) -> str:
    """One transform on one output (text, or a value such as tool calls): the new output (text; anything else
    as JSON). ScriptError names the transform and says what went wrong, or that it returned nothing."""
    if _is_python(value):
        name, result = call_python(value, [output, dict(context)], timeout, default="get_transform")
        kind = "null" if result is None else "value"
    else:
        name, kind, result = call_javascript(value, output, context, timeout, transform=True)
    if kind in ("null", "undefined"):
        raise ScriptError(f"transform {name} returned nothing ({kind}); return the new output")
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
