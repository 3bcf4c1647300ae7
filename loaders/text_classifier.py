"""Text-classification model folders (a Hugging Face ``*ForSequenceClassification``), for the classifier assert.

A folder is read with transformers' ``AutoModelForSequenceClassification`` and ``AutoTokenizer`` on the CPU; a
text gets a probability for every label of ``config.id2label``: the softmax of the logits, or each logit's
sigmoid when ``config.problem_type`` is ``multi_label_classification`` (what transformers' text-classification
pipeline gives, and what promptfoo's ``huggingface:text-classification`` provider reads from it). The input is
truncated to the model's length. This is no registered loader: such a model generates no text and is loaded only
by the batch runner, once per run. torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

from loaders.base import ModelLoadError
from loaders.hf import HF_INSTALL

MULTI_LABEL = "multi_label_classification"
CLASSIFIES = "ForSequenceClassification"


class TextClassifier:
    """A loaded text-classification model: label -> probability for a text."""

    def __init__(self, path: Path, model: Any, tokenizer: Any):
        self.path, self.name, self.model, self.tokenizer = path, path.name, model, tokenizer
        config = model.config
        self.labels = [str(config.id2label[i]) for i in range(int(config.num_labels))]
        self.multi_label = getattr(config, "problem_type", None) == MULTI_LABEL
        self._lock = threading.Lock()  # one forward at a time: cells of a run classify from several threads

    def classify(self, text: str) -> dict[str, float]:
        """Every label's probability for ``text`` (softmax over the labels; sigmoid of each for a multi-label
        model)."""
        import torch

        with self._lock, torch.inference_mode():
            inputs = self.tokenizer(text, return_tensors="pt", truncation=True)
            logits = self.model(**inputs).logits[0].float()
            probabilities = torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)
        return dict(zip(self.labels, (float(p) for p in probabilities.tolist())))


def check_architecture(path: Path) -> None:
    """A ModelLoadError when the folder's config.json names architectures and none classifies sequences (a causal
    LM would otherwise load with a random classification head)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"'{path}' has no readable config.json ({exc}); a text-classification model folder "
                             "holds config.json, its weights and its tokenizer files") from None
    named = config.get("architectures") if isinstance(config, dict) else None
    if isinstance(named, list) and named and not any(str(a).endswith(CLASSIFIES) for a in named):
        raise ModelLoadError(f"'{path.name}' is no text-classification model (its architectures: "
                             f"{', '.join(map(str, named))}); the classifier assert needs a *{CLASSIFIES} model")


def load_text_classifier(path: Path) -> TextClassifier:
    """The folder's classifier, on the CPU; a ModelLoadError saying why it cannot be read."""
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelLoadError(f"the classifier assert needs {' and '.join(missing)}: {HF_INSTALL}")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    check_architecture(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"could not load '{path}' as a text-classification model with transformers: {exc}") \
            from None
    if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id  # decoder classifiers find the last token by it
    model.eval()
    return TextClassifier(path, model, tokenizer)
