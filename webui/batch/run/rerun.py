"""What a batch run ran on, and getting it again for a re-run.

A run keeps, for each setting, the id of the model it ran on (webui.models.model_id: NAME, or NAME@loader off the
model's default loader), the loader and the load options (``ran_on`` in the stored spec; every row keeps them too).
A re-run runs each setting on exactly that: the loaded model with that id, or, when it is not loaded, that model
loaded beside the others with that loader and those options (ModelManager.ensure, as the batch CLI loads a grid's
model axis). What cannot be had is refused with a message naming it; a re-run never falls back to another loader
of the same name.

Runs stored before they kept ``ran_on`` are read from what they have: each row's model, the spec's loader(s) and
load options. A run stored without any loader re-runs on its model's default loader, with a note saying so.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from loaders.base import LoaderError
from webui.batch.asserts.errors import BatchInputError
from webui.catalog import ModelEntry
from webui.models import ModelId, ModelManager, NotLoaded, Slot
from webui.names import InvalidName
from webui.store.batch_runs import BatchRun, RanOn
from webui.store.errors import StoreError


def ran_on(slot: Slot) -> RanOn:
    """What a cell run on the loaded model ``slot`` runs on."""
    return RanOn(slot.name, slot.model.loader, dict(slot.model.load_options))


def stored_ran_on(run: BatchRun, rows: Sequence[Mapping[str, Any]],
                  models: ModelManager) -> tuple[dict[str, RanOn], list[str]]:
    """(what each setting of the stored run ``run`` ran on, by setting label; notes on what had to be assumed)."""
    first_row: dict[str | None, Mapping[str, Any]] = {}
    for row in rows:
        first_row.setdefault(row.get("setting"), row)
    names = [n for n in (run.model or "").split(", ") if n]
    out: dict[str, RanOn] = {}
    guessed: list[str] = []
    spec = run.spec
    for setting in spec.settings:
        label = setting.label
        if setting.ran_on is not None:
            out[label] = setting.ran_on
            continue
        row = first_row.get(label, {})  # older runs: the row's model, else the axis value, else the run's model
        name = row.get("model") or setting.model or (names[0] if names else None)
        if not name:
            raise BatchInputError(f"run #{run.number} was stored without the model it ran on, so it cannot be re-run "
                                  "on it; run its prompts again from the form instead")
        loader = row.get("loader") or spec.loaders.get(name) or (spec.loader if len(names) <= 1 else None)
        if loader is None:
            out[label] = RanOn(name, None)
            guessed.append(name)
            continue
        options = row.get("load_options")
        options = options if options is not None else spec.load_options.get(name)
        out[label] = RanOn(_model_id(models, name, loader), loader, options)
    notes = [f"Run #{run.number} was stored without its loader, so {name} re-runs on the loader it loads with by "
             f"default ({_default_loader(models, name) or 'unknown'})." for name in dict.fromkeys(guessed)]
    return out, notes


def _entry(models: ModelManager, name: str) -> ModelEntry | None:
    return next((e for e in models.catalog.available() if e.model_name == name), None)


def _model_id(models: ModelManager, name: str, loader: str) -> str:
    """The id today of a model a run stored as ``name`` (then the first one loaded went by its bare name) on
    ``loader``; a model no longer in the models dir (or a remote one) keeps the name it had."""
    base = name.removesuffix(f"@{loader}")
    entry = _entry(models, base)
    return models.id_of(entry, loader) if entry is not None else name


def _default_loader(models: ModelManager, name: str) -> str | None:
    entry = _entry(models, ModelId.parse(name).name)
    return models.default_loader(entry) if entry is not None else None


def is_loaded(models: ModelManager, need: RanOn) -> bool:
    try:
        models.slot(need.model)
        return True
    except NotLoaded:
        return False


def provide(models: ModelManager, need: RanOn) -> Slot:
    """The loaded model ``need`` names, loaded first if it is not; a BatchInputError names what is missing."""
    try:
        slot = models.slot(need.model)
    except NotLoaded:
        if need.loader == "remote":
            raise BatchInputError(f"re-run: the run ran on {need.model} on a remote server, which is not connected "
                                  "now; connect to it in the Model tab (remote server), then re-run") from None
        try:
            slot = models.ensure(need.model, need.load_options)
        except (LoaderError, InvalidName, StoreError, ValueError) as exc:
            raise BatchInputError(f"re-run: the run ran on {need.describe()}, which is not loaded and could not be "
                                  f"loaded: {exc}") from None
    if need.loader and slot.model.loader != need.loader:
        raise BatchInputError(f"re-run: the run ran on {need.model} with the {need.loader} loader, but {slot.name} is "
                              f"loaded with {slot.model.loader}; load {need.model} with {need.loader} in the Model tab")
    now = slot.model.load_options
    differ = {k: v for k, v in (need.load_options or {}).items() if k in now and now[k] != v}
    if differ:
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(differ.items()))
        loaded = ", ".join(f"{k}={now[k]}" for k in sorted(differ))
        raise BatchInputError(f"re-run: the run ran on {slot.name} loaded with {wanted}, but it is loaded now with "
                              f"{loaded}; load it again with {wanted} in the Model tab (or unload it: the re-run then "
                              "loads it as the run had it)")
    return slot
