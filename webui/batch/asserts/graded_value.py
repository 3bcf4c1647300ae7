"""How a graded assert is written (its value form: a rubric, criteria, a custom rubricPrompt, its own grader
budget) and read from promptfoo's form; the kinds themselves: :mod:`webui.batch.asserts.graded`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.graded import GRADED, factuality_scores, max_score_options
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.asserts.values import ValueForm, _needed, _needed_in_dict, _one_line

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, KindData


CONTEXT_TRANSFORM_REFUSED = ("contextTransform is not supported here: give the test a `context` var holding the "
                             "context (and a `query` var for context-faithfulness and context-relevance)")


def custom_prompts(given: Any, kind: str) -> tuple[str, ...]:
    """A ``rubricPrompt`` as held: one text per step (a text: the first step's; a JSON list of chat messages
    stays one text, which the judge reads as its messages' contents)."""
    steps = len(GRADED[kind].steps)
    items = [given] if isinstance(given, str) else list(given) if isinstance(given, (list, tuple)) else None
    if items is not None and items and all(isinstance(i, dict) and "content" in i for i in items):
        items = [json.dumps(items, ensure_ascii=False)]  # promptfoo's chat form of a prompt: one prompt
    if not items or len(items) > steps or not all(isinstance(i, str) and i.strip() for i in items):
        raise BatchInputError(f"{kind}: rubricPrompt must be a non-empty text" + (
            f" or a list of up to {steps} texts (one per step)" if steps > 1 else "") + f", got {given!r}")
    return tuple(items)


class GradedValue(ValueForm):
    """A graded kind's value (a text: its rubric, criteria or reference; g-eval also a list of criteria; none for
    context-faithfulness and context-relevance), and in the dict form promptfoo's ``rubricPrompt`` (a custom
    grading prompt), its own grading ``provider`` read for its ``config.max_tokens`` (the assert's grader budget,
    held as the option ``max_tokens``; webui.batch.run.judge.step_tokens) and, for factuality, a test's
    ``options.factuality`` (each category's score)."""

    name = "graded"
    options = frozenset({"rubricPrompt", "factuality", "max_score", "max_tokens"})
    keys = ("rubricPrompt", "contextTransform", "factuality", "provider")

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if kind.name == "max-score":  # its value is held as its options
            return None, {"max_score": max_score_options(options.get("max_score", value))}
        if "max_score" in options:
            raise BatchInputError(f"{kind.name}: method, weights and threshold as a value apply to max-score only")
        if "max_tokens" in options:
            options = {**options, "max_tokens": grader_tokens({"max_tokens": options["max_tokens"]}, kind.name)}
            options = {k: v for k, v in options.items() if v is not None}
        if "rubricPrompt" in options:
            options = {**options, "rubricPrompt": custom_prompts(options["rubricPrompt"], kind.name)}
        if "factuality" in options:
            if kind.name != "factuality":
                raise BatchInputError(f"{kind.name}: factuality scores apply to factuality asserts only")
            options = {**options, "factuality": factuality_scores(options["factuality"])}
        if not GRADED[kind.name].example:
            if value is not None:
                needs = GRADED[kind.name].needs
                reads = f"the test's {' and '.join(needs)} vars" if needs else "the output and the prompt"
                raise BatchInputError(f"{kind.name} takes no value: it reads {reads}; got {value!r}")
            return None, options
        if value is None and _whole_prompt(kind.name, options):
            return None, options
        if GRADED[kind.name].each and isinstance(value, (list, tuple)):
            if not value or not all(isinstance(v, str) and v.strip() for v in value):
                raise BatchInputError(f"{kind.name} needs a text or a list of texts (criteria), got {value!r}")
            return tuple(value), options
        return super().hold(kind, value, options)

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        return (_needed(kind, text) if GRADED[kind.name].example else text or None), {}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        if given.get("contextTransform") is not None:
            raise BatchInputError(f"{kind.name}: {CONTEXT_TRANSFORM_REFUSED}")
        options = {key: given[key] for key in ("rubricPrompt", "factuality") if given.get(key) is not None}
        tokens = own_grader_tokens(given["provider"], kind.name) if given.get("provider") is not None else None
        if tokens is not None:
            options["max_tokens"] = tokens
        if kind.name == "max-score":
            return None, {**options, "max_score": max_score_options(value)}
        if not GRADED[kind.name].example:
            return (None if value == "" else value), options
        if value is None and _whole_prompt(kind.name, options):
            return None, options
        value = _needed_in_dict(kind, value)
        if GRADED[kind.name].each and isinstance(value, list):
            return value, options
        return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)), options

    def write(self, item: AssertData) -> str | None:
        if isinstance(item.value, tuple):
            return json.dumps(list(item.value), ensure_ascii=False)
        return None if item.value is None else _one_line(str(item.value))

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        if item.kind == "max-score":
            return {"value": dict(item.options["max_score"])}
        value = {} if item.value is None else {"value": list(item.value) if isinstance(item.value, tuple) else
                                               item.value}
        custom = item.options.get("rubricPrompt")
        written = (custom[0] if len(custom) == 1 else list(custom)) if custom else None  # as promptfoo writes it
        scores, tokens = item.options.get("factuality"), item.options.get("max_tokens")
        return {**value, **({"rubricPrompt": written} if written else {}),
                **({"factuality": dict(scores)} if scores else {}),
                **({"provider": {"config": {"max_tokens": tokens}}} if tokens else {})}


GRADED_VALUE = GradedValue()


def _whole_prompt(kind: str, options: Mapping[str, Any]) -> bool:
    """Whether an llm-rubric's own (or its test's) rubricPrompt is the whole grading prompt, so that it needs no
    value (promptfoo grades such an llm-rubric with that prompt alone, its {{rubric}} empty)."""
    return kind == "llm-rubric" and options.get("rubricPrompt") is not None


def promptfoo_graded(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """A graded assert as promptfoo writes it: its value, threshold, rubricPrompt and its own grading ``provider``
    (read for its ``config.max_tokens`` only; one naming a model is refused: the run has one judge), and
    contextTransform, which the value form refuses by name."""
    keys = ("value", "threshold", "rubricPrompt", "contextTransform", "factuality", "provider")
    out = {key: item[key] for key in keys if item.get(key) is not None}
    if "rubricPrompt" in out:
        given = out["rubricPrompt"]
        out["rubricPrompt"] = [_file_text(p, files) for p in given] if isinstance(given, list) else \
            _file_text(given, files)
    return out


def own_provider_refused(kind: str) -> str:
    return (f"{kind}: an assert's own grading provider is not used here; the judge is the run's (the Batch tab's "
            "judge settings, or launch.py batch --judge-url / --judge-model): remove provider (or keep only its "
            "config: {max_tokens: N}, the assert's grader token budget), or override every grader with launch.py "
            "batch --grader workbench:NAME (promptfoo's eval --grader)")


def budget_only(provider: Any) -> bool:
    """Whether a grading provider is a token budget alone, ``{config: {max_tokens: N}}`` (promptfoo's grader config
    without a model: the run's grader writes at most that; what a provider the run's grader replaced leaves)."""
    return isinstance(provider, Mapping) and set(provider) == {"config"}


def own_grader_tokens(provider: Any, kind: str) -> int | None:
    """An assert's own grading provider read for its token budget: ``{config: {max_tokens: N}}`` (promptfoo's
    grader config; what is left of a provider the run's grader replaced); one naming a model is refused."""
    if not budget_only(provider):
        raise BatchInputError(own_provider_refused(kind))
    return grader_tokens(provider["config"], f"{kind}: provider.config")


def grader_tokens(config: Any, where: str = "") -> int | None:
    """A grader's ``config`` read for its ``max_tokens`` (the only key read here): a whole number >= 1; None
    where it gives none."""
    at = f"{where}: " if where else ""
    if not isinstance(config, Mapping) or set(config) - {"max_tokens"}:
        raise BatchInputError(f"{at}a grader's config here takes max_tokens only (its token budget per grading "
                              f"step), got {config!r}")
    tokens = config.get("max_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise BatchInputError(f"{at}the grader's max_tokens must be a whole number >= 1, got {tokens!r}")
    return tokens


def _file_text(given: Any, files: SuiteFiles) -> Any:
    """A ``file://`` rubricPrompt's text (relative to the config's folder); anything else as given."""
    if not isinstance(given, str) or not given.strip().startswith("file://"):
        return given
    path = files.path(given.strip().removeprefix("file://"))
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BatchInputError(f"cannot read the rubricPrompt file {path}: {exc.strerror or exc}") from None
