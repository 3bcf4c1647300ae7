"""promptfoo's ``classifier`` assert, scored by a local text-classification model.

The assert names its model as promptfoo does, ``provider: huggingface:text-classification:ORG/MODEL`` (a text or
``{id: ...}``; in a promptfoo file also the test's ``options.provider``). The model is a folder in the models dir,
looked up by these names in order: ``ORG/MODEL`` (the full relative path), ``ORG--MODEL``, ``ORG_MODEL``
(text-generation-webui's download name) and ``MODEL`` (the last part); a run whose model is in none of them is
refused before its first row, naming the folders tried. The runner loads each model once per run
(:class:`Classifiers`, with :mod:`loaders.text_classifier`) and classifies each output (as the assert's
transform rewrites it): every label gets a probability.

As promptfoo 0.115's matchesClassification: with a value (a label) the score is that label's probability (0 when
the model has no such label), without one the highest probability; it passes when the score reaches the threshold
(default 1); ``not-classifier`` flips the verdict and scores 1 - score. (promptfoo allows the score to fall
Number.EPSILON short of the threshold; no float32 probability lies in that gap for a threshold written with a few
decimals.) The compact form names the model after ``by``: ``classifier:toxic by ORG/MODEL``, ``classifier:by
ORG/MODEL`` (the top label).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from loaders.base import ModelLoadError
from loaders.text_classifier import TextClassifier, load_text_classifier
from webui.batch.promptfoo.dialect import read_threshold
from webui.batch.asserts.values import ValueForm, _one_line
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.suite_files import SuiteFiles
from webui.batch.asserts.graded import verdict_key
from webui.batch.asserts.types import Outcome

if TYPE_CHECKING:
    from webui.batch.asserts.types import AssertData, KindData, Observed

CLASSIFIER = "classifier"
WRITTEN = "toxic by ORG/MODEL"
"""The compact form's example value."""
PREFIX = "huggingface:text-classification:"
THRESHOLD = 1.0
"""promptfoo's default threshold: the probability must be 1."""
EXAMPLE = f'{{"type": "classifier", "value": "toxic", "provider": "{PREFIX}ORG/MODEL", "threshold": 0.5}}'


def names_classifier(given: Any) -> bool:
    """Whether a promptfoo provider (an id, or a mapping with one) is a text-classification one."""
    pid = given.get("id") if isinstance(given, Mapping) else given
    return isinstance(pid, str) and pid.startswith(PREFIX)


def provider_id(given: Any) -> str:
    """An assert's ``provider`` checked: the ``huggingface:text-classification:ORG/MODEL`` id (from a text or a
    ``{id, label}`` mapping); BatchInputError naming what else it is."""
    if isinstance(given, Mapping):
        extra = sorted(map(str, set(given) - {"id", "label"}))
        if extra:
            raise BatchInputError(f"classifier: the provider's {', '.join(extra)} is not read here (a local "
                                  f"classifier takes its id only: {PREFIX}ORG/MODEL)")
        given = given.get("id")
    if given is None:
        raise BatchInputError(f"classifier needs the model that classifies, as its provider: {EXAMPLE}")
    if not isinstance(given, str) or not given.startswith(PREFIX) or not given[len(PREFIX):].strip():
        raise BatchInputError(f"classifier: the provider {given!r} is not supported here; a classifier runs a "
                              f"local text-classification model named {PREFIX}ORG/MODEL (a folder in the models "
                              "dir)")
    name = given[len(PREFIX):].strip()
    if name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise BatchInputError(f"classifier: {name!r} is no model name; write ORG/MODEL or MODEL")
    return PREFIX + name


def model_name(provider: str) -> str:
    """``ORG/MODEL`` of a checked provider id."""
    return provider[len(PREFIX):]


def folder_names(name: str) -> list[str]:
    """The folder names a model ``ORG/MODEL`` is looked for under, in order."""
    return list(dict.fromkeys([name, name.replace("/", "--"), name.replace("/", "_"), name.rsplit("/", 1)[-1]]))


def find_classifier(models_dir: Path, provider: str) -> Path:
    """The folder of the provider's model in ``models_dir``; BatchInputError naming the folders tried."""
    names = folder_names(model_name(provider))
    for name in names:
        folder = models_dir / name
        if (folder / "config.json").is_file():
            return folder
    raise BatchInputError(f"classifier: no model folder for {model_name(provider)} in {models_dir} (tried "
                          f"{', '.join(names)}); put the text-classification model's folder (config.json, its "
                          "weights and tokenizer files) there under one of those names")


class ClassifierValue(ValueForm):
    """The classifier's value: a label or none (the highest probability), and its ``provider`` (the model)."""

    name = "classifier"
    options = frozenset({"provider"})
    keys = ("provider",)

    def hold(self, kind: KindData, value: Any, options: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise BatchInputError(f"classifier: the value is a label of the model (a text) or left out, got "
                                  f"{value!r}")
        return value, {**options, "provider": provider_id(options.get("provider"))}

    def read(self, kind: KindData, text: str) -> tuple[Any, dict[str, Any]]:
        """``LABEL by ORG/MODEL``, or ``by ORG/MODEL`` (the top label)."""
        label, by, name = ("", "by ", text[3:]) if text.startswith("by ") else text.rpartition(" by ")
        if not by or not name.strip():
            raise BatchInputError(f"classifier needs its model: write classifier:LABEL by ORG/MODEL (or "
                                  f"classifier:by ORG/MODEL for the top label), or the object form: {EXAMPLE}")
        return (label.strip() or None), {"provider": PREFIX + name.strip().removeprefix(PREFIX)}

    def read_dict(self, kind: KindData, value: Any, given: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return (None if value == "" else value), {"provider": given.get("provider")}

    def write(self, item: AssertData) -> str | None:
        label = "" if item.value is None else _one_line(str(item.value)) + " "
        return f"{label}by {model_name(item.options['provider'])}"

    def write_dict(self, item: AssertData) -> dict[str, Any]:
        return {**({} if item.value is None else {"value": item.value}), "provider": item.options["provider"]}


CLASSIFIER_VALUE = ClassifierValue()


def read_promptfoo(item: Mapping[str, Any], files: SuiteFiles) -> dict[str, Any]:
    """promptfoo's classifier assert: its value, threshold and provider."""
    value = {"value": item["value"]} if item.get("value") is not None else {}
    return {**value, **read_threshold(item), "provider": item.get("provider")}


def classification_grade(probabilities: Mapping[str, float], label: str | None, source: str
                         ) -> tuple[bool, float, str]:
    """(passed at promptfoo's default threshold, score, reason) for a text's label probabilities."""
    if label is None:
        score = max(probabilities.values())
        said = f"maximum classification score {score:.2f}"
    else:
        score = float(probabilities.get(label, 0.0))
        said = f"classification {label} has score {score:.2f}" + (
            "" if label in probabilities else f" (the model has no label {label!r})")
    shown = ", ".join(f"{name} {p:.2f}" for name, p in probabilities.items())
    return score >= THRESHOLD, score, f"{said}; labels by {source}: {shown}"


def check(a: AssertData, seen: Observed) -> Outcome:
    """A classifier assert's outcome: the verdict the runner got from its model, held against the threshold."""
    verdict = seen.judged.get(verdict_key(a))
    if verdict is None:
        return Outcome(False, "no classification (classifier asserts are scored in batch runs)", 0.0)
    return Outcome(verdict.passed, verdict.reason, verdict.score, not verdict.unscored)


class Classifiers:
    """A run's classifier models, each loaded once (the first output that needs it loads it)."""

    def __init__(self, models_dir: Path):
        self.models_dir = models_dir
        self._loaded: dict[Path, TextClassifier] = {}
        self._lock = threading.Lock()

    def folder(self, provider: str) -> Path:
        return find_classifier(self.models_dir, provider)

    def model(self, provider: str) -> TextClassifier:
        """The provider's model, loaded on first use; BatchInputError or ModelLoadError saying why not."""
        folder = self.folder(provider)
        with self._lock:
            if folder not in self._loaded:
                self._loaded[folder] = load_text_classifier(folder)
            return self._loaded[folder]

    def grade(self, item: AssertData, text: str) -> tuple[bool, float, str, bool]:
        """(passed at the default threshold, score, reason, unscored) of a classifier assert on ``text``; a
        model that cannot be loaded gives an unscored verdict saying why."""
        provider = item.options["provider"]
        try:
            model = self.model(provider)
        except (BatchInputError, ModelLoadError) as exc:
            return False, 0.0, f"classifier {model_name(provider)}: {exc}", True
        try:
            probabilities = model.classify(text)
        except (RuntimeError, ValueError) as exc:
            return False, 0.0, f"classifier {model.name} could not classify the output: {exc}", True
        return (*classification_grade(probabilities, item.value, model.name), False)
