"""ModelManager: the loaded models (a slot each: the model, its engine, its adapters), loading, unloading and
switching them within a memory budget, and which one each owner uses.

What there is to load is the catalog's (:mod:`webui.catalog`). The transformers loader dequantizes a GGUF
slowly, so a .gguf is converted once into a safetensors folder under ``<user data>/converted`` (the catalog's
``workdir``) and that folder is loaded from then on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple

from loaders.base import (LoadedModel, LoaderError, LoadOptions, LoraModel, ModelLoadError, Progress, is_lora_model,
                          ram_bytes)
from loaders.options import changed, check_options, options_of
from loaders.registry import LoaderRegistry
from loaders.remote_loader import RemoteLoader, RemoteModel
from webui.catalog import DEFAULT_MODEL_LOADER, Catalog, LoraEntry, ModelEntry, set_dir
from webui.config import AppConfig
from webui.engine import Engine
from webui.names import check_name
from webui.settings import SettingsStore

log = logging.getLogger(__name__)


class ModelId(NamedTuple):
    """The one id a model goes by everywhere (the Model tab, the API's model ids, batch rows and exports, the
    batch CLI), as parts: its name, and the loader when it is not the one the model loads with by default ("").
    Written ``name`` or ``name@loader`` (:meth:`parse`, ``str()``)."""

    name: str
    loader: str = ""

    @classmethod
    def parse(cls, text: str) -> "ModelId":
        base, at, loader = text.rpartition("@")
        return cls(base, loader) if at and base and loader else cls(text)

    def __str__(self) -> str:
        return f"{self.name}@{self.loader}" if self.loader else self.name


def model_id(name: str, loader: str, default_loader: str | None) -> str:
    """A model's id (:class:`ModelId`): its name on the loader it loads with by default, ``name@loader`` on any
    other. A bare name thus always means one loader, whatever was loaded first or last."""
    return str(ModelId(name, "" if not default_loader or loader == default_loader else loader))


@dataclass
class Slot:
    """A loaded model, the engine that runs it and the adapters attached to it from the Model tab."""

    model: LoadedModel
    engine: Engine
    entry: ModelEntry | None  # None: a remote server
    loras: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The id requests use (model_id): the model's name on its default loader, else ``name@loader``."""
        return self.model.name

    @property
    def active_loras(self) -> tuple[tuple[str, float], ...]:
        """The attached adapters with their weights, as a request that names none runs with them."""
        return tuple(self.loras.items())


class NotLoaded(ModelLoadError):
    """A request named a model that is not loaded."""


def default_budget_bytes() -> int:
    """3/4 of the machine's RAM."""
    ram = ram_bytes()
    return int(ram * 0.75) if ram else 16 * 2**30


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


@dataclass(frozen=True)
class Fit:
    """How a load that needs ``need`` bytes fits the memory budget beside the models that stay loaded."""

    name: str
    need: int
    budget: int | None  # None: no limit
    staying: tuple[tuple[str, int], ...]  # (name, bytes) of each model that stays loaded
    smaller: str = ""  # what makes a load through this loader smaller (Loader.smaller_load)

    @property
    def used(self) -> int:
        return sum(size for _, size in self.staying)

    @property
    def fits(self) -> bool:
        return self.budget is None or self.used + self.need <= self.budget

    @property
    def never(self) -> bool:
        """More than the whole budget: no unloading can make room."""
        return self.budget is not None and self.need > self.budget

    def shrink(self) -> str:
        """What would make it fit in the budget at all."""
        smaller = f"load it with {self.smaller}, or " if self.smaller else ""
        return f"{smaller}start the workbench with a larger --memory-budget MB (0: no limit)"

    def remedy(self) -> str:
        """What would make it load: unloading only when that frees enough, else a smaller load or budget
        ("" when it fits)."""
        budget = self.budget
        if budget is None or self.fits:
            return ""
        if self.never:
            return self.shrink()
        enough = [n for n, size in self.staying if self.used - size + self.need <= budget]
        unload = (f"unload one in the Model tab ({' or '.join(enough)} frees enough)" if enough else
                  f"unload some of them in the Model tab (it fits once {mib(self.used + self.need - budget)} "
                  "more are free)")
        return f"{unload}, or load without keeping the others, or {self.shrink()}"

    def refusal(self) -> str:
        """Why it cannot load, and what would help ("" when it fits)."""
        budget = self.budget
        if budget is None or self.fits:
            return ""
        if self.never:
            return (f"loading {self.name} needs about {mib(self.need)}, more than the whole {mib(budget)} "
                    f"memory budget, so it cannot load even with every other model unloaded; {self.remedy()}")
        loaded = ", ".join(f"{n} ({mib(size)})" for n, size in self.staying)
        return (f"loading {self.name} needs about {mib(self.need)}, but the models loaded ({loaded}) already take "
                f"{mib(self.used)} of the {mib(budget)} memory budget; {self.remedy()}")


class ModelManager:
    """The loaded models, each with its own engine (they generate side by side), within a memory budget.

    Each owner has one *in use* (``in_use(owner)``): the model Chat, Notebook and Insight use and requests that
    name no model get. With a UI login each user has their own (until they pick one: the shared choice, owner
    "", which is also the API's). Nothing here asks who is calling: the UI and API read the owner once and pass
    it. ``engine`` given here (``primary``) runs the first model loaded and answers "no model is loaded" when
    none is.
    """

    def __init__(self, config: AppConfig, engine: Engine, registry: LoaderRegistry,
                 settings: SettingsStore | None = None):
        self.config, self.registry, self.settings = config, registry, settings
        self.catalog = Catalog(config, registry)
        self._primary = engine
        self._lock = threading.RLock()
        self._slots: dict[str, Slot] = {}
        self._current: dict[str, str] = {}  # owner -> the model they use ("": without a login, and the default)
        self._reserved: dict[str, int] = {}  # memory held beside the slots (a training run's model copy), by holder

    # -- what is loaded --------------------------------------------------------------
    def in_use(self, owner: str) -> Slot | None:
        """The model ``owner`` uses ("": the shared choice, which users who picked none also get)."""
        name = self._current.get(owner) if owner in self._current else self._current.get("")
        return self._slots.get(name) if name else None

    @property
    def primary(self) -> Engine:
        """The engine given at construction: it runs the first model loaded and answers "no model is loaded"
        when none is."""
        return self._primary

    def engine_for(self, owner: str) -> Engine:
        """The engine of the model ``owner`` uses (with none loaded, the engine that says so)."""
        slot = self.in_use(owner)
        return slot.engine if slot else self._primary

    def slots(self) -> list[Slot]:
        """Every loaded model, in the order they were loaded."""
        return list(self._slots.values())

    def names(self) -> list[str]:
        return list(self._slots)

    def slot(self, name: str | None = None, owner: str = "") -> Slot:
        """The loaded model ``name`` (None or "": the one ``owner`` uses); NotLoaded says what is loaded
        instead."""
        if not name:
            slot = self.in_use(owner)
            if slot is None:
                raise NotLoaded("no model is loaded; load one in the Model tab or start with --model NAME")
            return slot
        slot = self._slots.get(name)
        wanted = ModelId.parse(name)
        if slot is None and wanted.loader:  # "name@loader" for the model loaded under its plain name
            slot = next((s for k, s in self._slots.items()
                         if ModelId.parse(k).name == wanted.name and s.model.loader == wanted.loader), None)
        if slot is None:
            others = [k for k in self._slots if k.startswith(f"{name}@")]
            hint = (f"; '{name}' means it on its default loader: name {' or '.join(others)} for the one loaded"
                    if others else "")
            raise NotLoaded(f"the model '{name}' is not loaded; loaded: {', '.join(self._slots) or 'none'} "
                            f"(load it in the Model tab){hint}")
        return slot

    def ensure(self, name: str, load_options: dict[str, Any] | None = None) -> Slot:
        """The loaded model ``name`` (its id: see model_id), loading it beside the others first if it is not
        (``NAME@loader`` picks the loader; ``load_options``: the loader's options, else those it was last loaded
        with); the model in use stays the one in use."""
        try:
            return self.slot(name)
        except NotLoaded:
            pass
        base, loader = ModelId.parse(name)
        entry = next((e for e in self.catalog.available() if e.model_name == base), None) or self.catalog.resolve(base)
        options = None if load_options is None else LoadOptions(self.config.device, self.config.dtype,
                                                                 self.config.threads, extra=dict(load_options))
        model = self.load(entry, loader or None, options, make_current=False)
        return self.slot(model.name)

    def use(self, name: str, owner: str) -> Slot:
        """Make the loaded model ``name`` the one ``owner`` uses."""
        with self._lock:
            slot = self.slot(name)
            self._current[owner] = slot.name
            return slot

    def budget_bytes(self) -> int | None:
        """What all loaded models may take together (None: no limit)."""
        mb = self.config.memory_budget_mb
        if mb == 0:
            return None
        return default_budget_bytes() if mb is None else int(mb * 2**20)

    def used_bytes(self) -> int:
        return sum(s.model.memory_bytes() for s in self._slots.values()) + sum(self._reserved.values())

    def fit(self, name: str, need: int, leaving: set[str], loader: Any = None) -> Fit:
        """How loading ``name`` (``need`` bytes) fits the budget once the models ``leaving`` are gone (memory
        reserved beside the slots stays)."""
        staying = tuple((key, s.model.memory_bytes()) for key, s in self._slots.items() if key not in leaving)
        return Fit(name, need, self.budget_bytes(), staying + tuple(self._reserved.items()),
                   loader.smaller_load if loader is not None else "")

    def reserve(self, holder: str, need: int) -> None:
        """Count ``need`` bytes held beside the loaded models (a training run's copy of one) against the budget
        until :meth:`release`; ModelLoadError says what would make room when they do not fit."""
        with self._lock:
            fit = self.fit(holder, need, set())
            if not fit.fits:
                raise ModelLoadError(fit.refusal())
            self._reserved[holder] = need

    def reserved(self) -> dict[str, int]:
        """The memory held beside the loaded models, by holder."""
        return dict(self._reserved)

    def release(self, holder: str) -> None:
        with self._lock:
            self._reserved.pop(holder, None)

    # -- loading ---------------------------------------------------------------
    def load(self, entry: ModelEntry | str, loader: str | None = None, options: LoadOptions | None = None,
             progress: Progress | None = None, *, keep_others: bool = True, make_current: bool = True,
             owner: str = "") -> LoadedModel:
        """Load a model beside the others (``keep_others``) or instead of them, and (``make_current``) make it
        the one ``owner`` uses; the same model on the same loader is loaded again in its place. On failure
        everything loaded before stays loaded."""
        if isinstance(entry, str):
            entry = self.catalog.resolve(entry)
        options = options or LoadOptions(self.config.device, self.config.dtype, self.config.threads)
        chosen = self.loader_for(entry, loader)
        # the loader's own options: those given now over those this model was last loaded with
        options = replace(options, extra={**self.remembered_options(entry.model_name, chosen.name), **options.extra})
        values = check_options(chosen, options.extra)  # a bad value is refused before any slow work
        # outside the lock: a first load of a .gguf converts it (a minute), and other models stay usable meanwhile
        # (conversions of one file take turns through a lock file of their own)
        path = chosen.prepare(entry.path, self.catalog.workdir(entry), progress)
        with self._lock:
            key = self._local_key(entry, chosen.name)
            leaving = set(self._slots) if not keep_others else {key}
            fit = self.fit(key, chosen.estimate_bytes(path, options), leaving, chosen)
            if not fit.fits:
                raise ModelLoadError(fit.refusal())
            model = chosen.load(path, options, progress)
            model.name = key
            model.load_options = values
            self._install(key, model, entry, keep_others, make_current, owner)
            self._remember(str(ModelId(entry.model_name, chosen.name)), changed(chosen, values))
            log.info("loaded %s with %s on %s (%s)", model.name, chosen.name, model.device, model.dtype)
            return model

    def loader_for(self, entry: ModelEntry, loader: str | None) -> Any:
        """The loader that loads ``entry``: the one named, else the default model's, else the best match."""
        if not loader and entry.default:
            loader = DEFAULT_MODEL_LOADER
        return self.registry.get(loader) if loader else self.registry.for_path(entry.path)

    def _remember(self, key: str, values: dict[str, Any]) -> None:
        """Keep the options ``key`` ('model@loader') loaded with; a settings file that cannot be written (a full
        disk) costs only that memory, never the load that succeeded."""
        if self.settings is None:
            return
        try:
            self.settings.remember_model_options(key, values)
        except OSError as exc:
            log.warning("loaded %s, but could not save its load options in %s (%s); free some disk space to "
                        "have them remembered", key, self.settings.path, exc)

    def remembered_options(self, model_name: str, loader: str) -> dict[str, Any]:
        """The load options ``model_name`` was last loaded with on ``loader`` (only names it still has)."""
        if self.settings is None:
            return {}
        saved = self.settings.get().model_options.get(str(ModelId(model_name, loader)), {})
        names = {o.name for o in options_of(self.registry.get(loader))}
        return {k: v for k, v in saved.items() if k in names} if isinstance(saved, dict) else {}

    def estimate_fit(self, entry: ModelEntry | str, loader: str | None, options: LoadOptions,
                     keep_others: bool = True) -> Fit:
        """What loading ``entry`` with ``options`` would take (from its files, without loading or converting
        anything) and how it would fit the budget: the check ``load`` makes, said before loading."""
        if isinstance(entry, str):
            entry = self.catalog.resolve(entry)
        chosen = self.loader_for(entry, loader)
        key = self._local_key(entry, chosen.name)
        leaving = {key} if keep_others else set(self._slots)
        return self.fit(key, chosen.estimate_bytes(entry.path, options), leaving, chosen)

    def load_remote(self, base_url: str, api_key: str | None = None, model: str | None = None,
                    timeout: float = 600.0, *, keep_others: bool = True, make_current: bool = True,
                    owner: str = "") -> LoadedModel:
        """Use a remote OpenAI-compatible server as a model; on failure everything loaded stays loaded."""
        with self._lock:
            loader = self.registry.get("remote")
            if not isinstance(loader, RemoteLoader):  # a plugin registered under the built-in's name
                raise ModelLoadError(f"the loader registered as 'remote' ({type(loader).__name__}) cannot connect "
                                     "to a server")
            remote = loader.connect(base_url.strip(), api_key or None, model or None, timeout)
            remote.name = self._key(remote.name, "remote", lambda s: s.entry is None and
                                    getattr(s.model, "base_url", None) == remote.base_url)
            self._install(remote.name, remote, None, keep_others, make_current, owner)
            log.info("using the remote model %s at %s", remote.name, remote.base_url)
            return remote

    def default_loader(self, entry: ModelEntry) -> str | None:
        """The loader ``entry`` loads with when none is named (None: no registered loader reads it)."""
        try:
            return self.loader_for(entry, None).name
        except LoaderError:
            return None

    def id_of(self, entry: ModelEntry, loader: str) -> str:
        """The id ``entry`` goes by when loaded with ``loader`` (model_id)."""
        return model_id(entry.model_name, loader, self.default_loader(entry))

    def _local_key(self, entry: ModelEntry, loader: str) -> str:
        """The id of a model about to load: :meth:`id_of`, or ``file@loader`` where another file of the same name
        holds that id."""
        key = self.id_of(entry, loader)
        slot = self._slots.get(key)
        return key if slot is None or slot.entry == entry else str(ModelId(entry.name, loader))

    def _key(self, name: str, loader: str, same: Callable[[Slot], bool]) -> str:
        """The id of a model about to load: the slot it replaces (same model, same loader), else its name, or
        ``name@loader`` when that name is taken by the same model on another loader."""
        for key, slot in self._slots.items():
            if slot.model.loader == loader and same(slot) and ModelId.parse(key).name == name:
                return key
        return name if name not in self._slots else str(ModelId(name, loader))

    def _install(self, key: str, model: LoadedModel, entry: ModelEntry | None, keep_others: bool,
                 make_current: bool, owner: str) -> None:
        """(Lock held.) Put a freshly loaded model in its slot, closing what it replaces."""
        slot = self._slots.get(key)
        if slot is None:
            engine = self._primary if all(s.engine is not self._primary for s in self._slots.values()) \
                else Engine(config=self._primary.config)
            engine.set_model(model)
            self._slots[key] = Slot(model, engine, entry)
        else:
            old = slot.model
            slot.engine.set_model(model)
            slot.model, slot.entry, slot.loras = model, entry, {}  # adapters belong to the model they were on
            old.close()
        if not keep_others:
            for other in [k for k in self._slots if k != key]:
                self._drop(other)
        if make_current:
            self._current[owner] = key
        self._current.setdefault("", key)

    def unload(self, name: str | None = None) -> None:
        """Unload the model ``name``, or every model when None; requests running on it end with an error."""
        with self._lock:
            for key in ([self.slot(name).name] if name else list(self._slots)):
                self._drop(key)

    def _drop(self, key: str) -> None:
        slot = self._slots.pop(key)
        slot.engine.set_model(None)
        if slot.engine is not self._primary:
            slot.engine.close()
        slot.model.close()
        for owner in [o for o, name in self._current.items() if name == key]:
            del self._current[owner]  # a user whose model went uses the shared choice again
        if "" not in self._current and self._slots:
            self._current[""] = next(reversed(self._slots))

    def reload(self, progress: Progress | None = None, name: str | None = None, owner: str = "") -> LoadedModel:
        """Load the model ``name`` (None: the one ``owner`` uses) again, with the same loader."""
        try:
            slot = self.slot(name, owner)
        except NotLoaded:
            raise ModelLoadError("no model is loaded, so there is nothing to reload") from None
        model = slot.model
        if isinstance(model, RemoteModel):
            return self.load_remote(model.base_url, None, model.server_model, make_current=False)
        assert slot.entry is not None
        return self.load(slot.entry, model.loader, None, progress, make_current=False)

    def close(self) -> None:
        """Unload every model and stop every engine but the primary (the caller's to close)."""
        self.unload()

    # -- LoRA adapters -------------------------------------------------------------------
    def compatible_loras(self, model: str | None = None, owner: str = "") -> list[LoraEntry]:
        """The available adapters whose shapes fit the loaded model ``model`` (None: the one ``owner`` uses;
        none if its loader cannot do LoRA)."""
        from loaders.lora import LoRAError

        try:
            loaded = self.slot(model, owner).model
        except NotLoaded:
            return []
        if not is_lora_model(loaded):
            return []
        fits = []
        for entry in self.catalog.available_loras():
            try:
                loaded.check_lora(entry.path)
            except LoRAError:
                continue
            fits.append(entry)
        return fits

    def loras_of(self, model: str | None = None, owner: str = "") -> tuple[tuple[str, float], ...]:
        """The adapters attached (from the Model tab or --lora) to the loaded model ``model`` (None: the one
        ``owner`` uses), with their weights: those applied to requests that name none."""
        try:
            return self.slot(model, owner).active_loras
        except NotLoaded:
            return ()

    def attach_lora(self, name: str, weight: float = 1.0, model: str | None = None, owner: str = "") -> None:
        """Load an adapter into a loaded model (no reload) and make it active with ``weight``."""
        from loaders.lora import LoRAError

        if not (isinstance(weight, (int, float)) and -10 <= weight <= 10) or isinstance(weight, bool):
            raise LoRAError(f"a LoRA weight must be a number in [-10, 10], got {weight!r}")
        with self._lock:
            slot = self.load_lora(name, model, owner)
            slot.loras[name] = float(weight)
        log.info("attached LoRA %s (weight %g) to %s", name, weight, slot.name)

    def load_lora(self, name: str, model: str | None = None, owner: str = "") -> Slot:
        """Load an adapter into a loaded model (no reload) for the requests that name it, without making it
        active: requests that name none (Chat, the status line's) run as before. Nothing if it is loaded already;
        returns the model's slot."""
        name = check_name("LoRA adapter", name)
        with self._lock:
            slot, lora_model = self._lora_slot(model, owner)
            if name not in lora_model.loras:
                path = set_dir(self.config.loras_dir) / name
                slot.engine.call_between_steps(lambda: lora_model.add_lora(name, path))
                log.info("loaded LoRA %s into %s (not active)", name, slot.name)
        return slot

    def detach_lora(self, name: str, model: str | None = None, owner: str = "") -> None:
        """Remove an adapter; requests still running with it end with an error that says so."""
        from loaders.lora import LoRAError

        name = check_name("LoRA adapter", name)
        with self._lock:
            slot, lora_model = self._lora_slot(model, owner)
            if name not in lora_model.loras:
                raise LoRAError(f"LoRA adapter '{name}' is not attached")

            def remove() -> None:
                slot.engine.fail_running(lambda r: any(n == name for n, _ in r.loras),
                                         f"generation stopped: the LoRA adapter '{name}' was detached")
                lora_model.remove_lora(name)
                slot.engine.drop_stale_prefixes()

            slot.engine.call_between_steps(remove)
            slot.loras.pop(name, None)

    def _lora_slot(self, model: str | None, owner: str) -> tuple[Slot, LoraModel]:
        """The slot of the model adapters go on, and that model as one that takes them."""
        from loaders.lora import LoRAError

        try:
            slot = self.slot(model, owner)
        except NotLoaded as exc:
            raise LoRAError(f"{exc}; load one before attaching LoRA adapters") from None
        if not is_lora_model(slot.model):
            able = [s.name for s in self.registry.status() if s.capabilities.lora]
            raise LoRAError(f"the {slot.model.loader} loader cannot apply LoRA adapters; loaders that can: "
                            f"{', '.join(able) or 'none'}")
        return slot, slot.model
