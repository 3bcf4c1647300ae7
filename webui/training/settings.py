"""LoRA training settings, declared once: the CLI's options, the record and (later) the Training tab read this table.

Each setting is a :class:`TrainSetting` (name, type, default, range or choices, one-line help), the same shape as a
loader's load options (loaders/options.py), whose value parsing it reuses. :func:`parse_settings` reads given values
(typed, or text from a command line or a form) into a frozen :class:`TrainingSettings`, checking each value and the
rules between them; a bad value is a :class:`TrainingError` naming the setting and what it takes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from loaders.hf import LOAD_IN
from loaders.options import LoadOption, LoadOptionError


class TrainingError(ValueError):
    """Bad training input (a setting, a name, a dataset line): the message says what to change."""


ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
SCHEDULERS = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class TrainSetting(LoadOption):
    positive: bool = False
    """The value must be above ``minimum`` (alpha, learning rate): an open lower bound."""

    def describe(self) -> str:
        if self.positive and self.maximum is not None:
            return f"a number above {self.minimum:g}, at most {self.maximum:g}"
        text = super().describe()
        return text.replace(f">= {self.minimum:g}", f"> {self.minimum:g}") if self.positive else text

    def read(self, value: Any) -> Any:
        """``value`` as this setting's type, checked; a TrainingError naming the setting if it is wrong."""
        bad = TrainingError(f"training setting '{self.name}' takes {self.describe()}; got {value!r}")
        try:
            parsed = self.parse(value)
        except LoadOptionError:
            raise bad from None
        if self.positive and self.minimum is not None and parsed <= self.minimum:
            raise bad
        return parsed


SETTINGS: tuple[TrainSetting, ...] = (
    TrainSetting("rank", int, 8, "LoRA rank r: the adapter's width (more learns more, trains slower)",
                 minimum=1, maximum=1024),
    TrainSetting("alpha", int, 16, "LoRA alpha: the adapter's output is scaled by alpha / rank",
                 minimum=0, positive=True),
    TrainSetting("dropout", float, 0.05, "dropout on the adapter's input while training", minimum=0, maximum=0.9),
    TrainSetting("target_modules", str, "attention",
                 "the layers that get an adapter: 'attention' (q/k/v/o projections), 'all-linear', or a comma list "
                 "of module names (e.g. q_proj,v_proj)"),
    TrainSetting("learning_rate", float, 3e-4, "AdamW's learning rate", minimum=0, maximum=1, positive=True),
    TrainSetting("scheduler", str, "linear", "how the learning rate changes after warm-up", choices=SCHEDULERS),
    TrainSetting("warmup_steps", int, 0, "steps over which the learning rate rises from 0", minimum=0),
    TrainSetting("epochs", float, 3.0, "passes over the dataset (ignored when max_steps is set)", minimum=0,
                 positive=True),
    TrainSetting("max_steps", int, 0, "optimizer steps to train; 0: as many as the epochs take", minimum=0),
    TrainSetting("micro_batch_size", int, 4, "examples per forward pass (padded to the longest)", minimum=1,
                 maximum=1024),
    TrainSetting("grad_accum", int, 1, "micro-batches per optimizer step (the batch is their product)", minimum=1,
                 maximum=1024),
    TrainSetting("cutoff_len", int, 256, "the longest example in tokens; longer ones are cut", minimum=4,
                 maximum=131072),
    TrainSetting("overlap", int, 0, "raw text: tokens each chunk shares with the one before", minimum=0),
    TrainSetting("hard_cut", str, "\\n\\n\\n",
                 "raw text: a separator no chunk crosses (\\n is a newline; empty: none)"),
    TrainSetting("seed", int, 0, "seed of the adapter's start, the data order and dropout", minimum=0),
    TrainSetting("save_every", int, 0, "save a checkpoint every N steps (0: only on stop and at the end)",
                 minimum=0),
    TrainSetting("eval_percent", float, 0.0, "hold out this percent of the dataset to measure an eval loss",
                 minimum=0, maximum=50),
    TrainSetting("eval_file", str, "", "a dataset file (of the same kind as the dataset) to measure an eval loss "
                 "on"),
    TrainSetting("eval_every", int, 10, "measure the eval loss every N steps (and at the end)", minimum=1),
    TrainSetting("train_on_all_turns", bool, False,
                 "chat and instruction data: train on every token, not only the assistant's replies"),
    TrainSetting("add_eos", bool, True, "instruction and chat data: end each example with the end-of-text token"),
    TrainSetting(LOAD_IN.name, str, LOAD_IN.default, "QLoRA: hold the base model in 8bit or 4bit (NF4) weights "
                 "while the adapter trains, in less memory (bitsandbytes, CUDA only); full: float32",
                 choices=LOAD_IN.choices),
)
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class TrainingSettings:
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: str = "attention"
    learning_rate: float = 3e-4
    scheduler: str = "linear"
    warmup_steps: int = 0
    epochs: float = 3.0
    max_steps: int = 0
    micro_batch_size: int = 4
    grad_accum: int = 1
    cutoff_len: int = 256
    overlap: int = 0
    hard_cut: str = "\\n\\n\\n"
    seed: int = 0
    save_every: int = 0
    eval_percent: float = 0.0
    eval_file: str = ""
    eval_every: int = 10
    train_on_all_turns: bool = False
    add_eos: bool = True
    load_in: str = "full"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def separator(self) -> str:
        """hard_cut with its escapes read (``\\n`` is a newline)."""
        return self.hard_cut.replace("\\n", "\n").replace("\\t", "\t")

    def modules(self) -> str | list[str]:
        """target_modules as peft takes it."""
        if self.target_modules == "attention":
            return list(ATTENTION)
        if self.target_modules == "all-linear":
            return "all-linear"
        return [m.strip() for m in self.target_modules.split(",") if m.strip()]


def parse_settings(values: Mapping[str, Any] | None = None) -> TrainingSettings:
    """Every setting from ``values`` (missing ones at their defaults), each checked, then the rules between them."""
    given = dict(values or {})
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise TrainingError(f"unknown training setting '{unknown[0]}'; the settings are: {', '.join(BY_NAME)}")
    read = {name: spec.read(given.get(name)) for name, spec in BY_NAME.items()}
    settings = TrainingSettings(**read)
    check_settings(settings)
    return settings


def check_settings(s: TrainingSettings) -> None:
    """The rules between settings, and the target modules' form."""
    if s.overlap >= s.cutoff_len:
        raise TrainingError(f"overlap ({s.overlap}) must be below cutoff_len ({s.cutoff_len}): each chunk must "
                            "bring new tokens")
    if s.eval_percent and s.eval_file:
        raise TrainingError("give eval_percent or eval_file, not both")
    modules = s.modules()
    if not modules:
        raise TrainingError("target_modules is empty; use 'attention', 'all-linear' or a comma list such as "
                            "q_proj,v_proj")
    if isinstance(modules, list):
        bad = [m for m in modules if not m.replace("_", "").replace(".", "").isalnum()]
        if bad:
            raise TrainingError(f"target module {bad[0]!r} is not a module name; use 'attention', 'all-linear' or "
                                "names such as q_proj,v_proj")


def help_table() -> str:
    """One line per setting: name, what it takes, default, help (for --help and the user guide)."""
    return "\n".join(f"  {s.name} ({s.describe()}; default {s.default!r}): {s.help}" for s in SETTINGS)


assert [f.name for f in fields(TrainingSettings)] == [s.name for s in SETTINGS], "one table: keep them in step"
assert all(getattr(TrainingSettings(), s.name) == s.default for s in SETTINGS), "defaults declared once"
