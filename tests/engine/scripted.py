"""A scripted LoadedModel: emits queued token ids, so engine behaviour can be tested exactly.

It uses a real tokenizer (the default model's) so detokenizing and stop strings
run on real byte-level BPE tokens.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from loaders.base import Capabilities


class ScriptedModel:
    loader = "scripted"
    capabilities = Capabilities(logprobs=True)
    device, dtype = "cpu", "float32"

    def __init__(self, tokenizer, script: Sequence[int], *, name: str = "scripted", context_length: int = 256,
                 fail_at_step: int | None = None, step_delay: float = 0.0):
        self.name, self.path = name, Path(name)
        self.tokenizer = tokenizer
        self.script = list(script)
        self.context_length = context_length
        self.load_options: dict[str, Any] = {}  # a LoadedModel's, like every loader's models
        self.fail_at_step, self.step_delay = fail_at_step, step_delay
        self.vocab = self.vocab_size = 49152
        self.forward_calls = 0
        self.batch_sizes: list[int] = []
        self.stepping = threading.Event()

    def new_cache(self) -> dict[str, Any]:
        return {"steps": 0, "seen": 0}

    def forward(self, caches, new_ids):
        self.forward_calls += 1
        self.batch_sizes.append(len(caches))
        self.stepping.set()
        if self.fail_at_step is not None and self.forward_calls >= self.fail_at_step:
            raise RuntimeError("scripted failure in forward")
        if self.step_delay:
            time.sleep(self.step_delay)
        rows = []
        for cache, ids in zip(caches, new_ids):
            cache["seen"] += len(ids)
            step = cache["steps"]
            cache["steps"] += 1
            token = self.script[step] if step < len(self.script) else min(self.tokenizer.eos_token_ids)
            row = torch.zeros(self.vocab)
            row[token] = 100.0
            rows.append(row)
        return torch.stack(rows)

    def release(self, cache) -> None:
        cache["released"] = True

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


def loader_of(make, name: str = "scripted", about: str = "a scripted model"):
    """A loader called ``name`` whose every load gives ``make()`` (a scripted model), for any folder."""
    from loaders.base import BaseLoader

    class Loader(BaseLoader):
        description, requires, install_hint = about, (), ""
        capabilities = ScriptedModel.capabilities

        def match(self, path):
            return 0

        def prepare(self, path, workdir, progress=None):
            return path

        def load(self, path, options, progress=None):
            return make()

    Loader.name = name
    return Loader()
