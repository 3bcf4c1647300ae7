"""promptfoo's dialect as an overlay on the kinds table (webui.batch.asserts.kinds.ASSERT_KINDS).

promptfoo 0.115 names its assert types as we name our kinds. Where it writes one otherwise (its reader, which turns
promptfoo's assert into our dict form), checks it otherwise, or holds its value otherwise (regex: a JavaScript
RegExp), :data:`PROMPTFOO_KINDS` says so, by kind name. A kind not named there is promptfoo's as it is ours: read by
:func:`webui.batch.promptfoo.dialect.read_value`, checked and held as ours. An entry whose ``read`` is None names a
kind promptfoo has not, or not as we run it. The core assertion model (webui.batch.asserts) knows none of this; an
assert read from a promptfoo file carries ``dialect="promptfoo"`` and is checked with :func:`check_of` and held with
:func:`form_of`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from webui.batch.asserts import classify
from webui.batch.asserts.graded import GRADED
from webui.batch.asserts.graded_value import promptfoo_graded
from webui.batch.asserts.kinds import ASSERT_KINDS, AssertKind, contains_json
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.asserts.types import Outcome
from webui.batch.asserts.values import JS_PATTERN, ValueForm
from webui.batch.promptfoo import dialect as pf

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, Observed


@dataclass(frozen=True)
class PromptfooKind:
    """How promptfoo 0.115 has one of our kinds, where it differs from ours."""

    read: Callable[[Mapping[str, Any], SuiteFiles], dict[str, Any]] | None = pf.read_value
    """promptfoo's assert (a dict; ``file://`` paths relative to the folder) -> the dict form's fields besides
    type and weight; None: a type promptfoo has not, or not as we run it."""
    check: Callable[[AssertData, Observed], Outcome] | None = None
    """promptfoo's check where it differs from ours (webui.batch.promptfoo.dialect); None: ours."""
    form: ValueForm | None = None
    """How its value is held where it differs (regex: a JavaScript RegExp); None: as ours."""


_NOT_PROMPTFOOS = PromptfooKind(read=None)

PROMPTFOO_KINDS: dict[str, PromptfooKind] = {
    "icontains": PromptfooKind(check=pf.icontains),
    "equals": PromptfooKind(check=pf.equals),
    "regex": PromptfooKind(check=pf.regex, form=JS_PATTERN),
    "starts-with": PromptfooKind(check=pf.starts_with),
    "contains-any": PromptfooKind(read=pf.read_list),
    "contains-all": PromptfooKind(read=pf.read_list),
    "icontains-any": PromptfooKind(read=pf.read_list, check=pf.icontains_list(every=False)),
    "icontains-all": PromptfooKind(read=pf.read_list, check=pf.icontains_list(every=True)),
    "is-json": PromptfooKind(read=pf.read_schema),
    "contains-json": PromptfooKind(read=pf.read_schema, check=contains_json(pf.json_objects)),
    "is-xml": PromptfooKind(check=pf.is_xml),
    "contains-xml": PromptfooKind(check=pf.contains_xml),
    "max-length": _NOT_PROMPTFOOS,
    "python": PromptfooKind(read=pf.read_script("")),
    "javascript": PromptfooKind(read=pf.read_script("file://")),
    "latency": PromptfooKind(read=pf.read_limit),
    "cost": PromptfooKind(read=pf.read_limit),
    "ttft": _NOT_PROMPTFOOS,
    "tokens-per-second": _NOT_PROMPTFOOS,
    "levenshtein": PromptfooKind(read=pf.read_one_text),
    "rouge-n": PromptfooKind(read=pf.read_one_text),
    "is-valid-openai-tools-call": PromptfooKind(read=pf.read_tools),
    "is-valid-openai-function-call": PromptfooKind(read=pf.read_tools),
    "tool-call-f1": PromptfooKind(read=pf.read_list),
    **{name: PromptfooKind(read=promptfoo_graded) for name in GRADED if name != classify.CLASSIFIER},
    classify.CLASSIFIER: PromptfooKind(read=classify.read_promptfoo),
}
"""Our kinds promptfoo has otherwise, by name; a kind not here is promptfoo's as it is ours."""


def promptfoo_kind(name: str) -> PromptfooKind | None:
    """How promptfoo has the kind ``name``; None: promptfoo has not that kind (or a name that only spells
    ``not-<kind>``, which promptfoo writes as not- before the kind)."""
    kind = ASSERT_KINDS.get(name)
    if kind is None or kind.negation_of:
        return None
    own = PROMPTFOO_KINDS.get(name, PromptfooKind())
    return own if own.read is not None else None


def _own(kind: AssertKind, dialect: str) -> PromptfooKind | None:
    return PROMPTFOO_KINDS.get(kind.name) if dialect == pf.DIALECT else None


def check_of(kind: AssertKind, dialect: str) -> Callable[[AssertData, Observed], Outcome]:
    """The check of an assert of ``kind`` in ``dialect`` ("promptfoo": promptfoo's where it differs; "": ours)."""
    own = _own(kind, dialect)
    return own.check if own is not None and own.check is not None else kind.check


def form_of(kind: AssertKind, dialect: str) -> ValueForm:
    """How an assert of ``kind`` in ``dialect`` holds its value."""
    own = _own(kind, dialect)
    return own.form if own is not None and own.form is not None else kind.value
