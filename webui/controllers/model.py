"""ModelController: the Model tab's behaviour: load / unload / reload / connect, LoRA adapters, what is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from loaders.base import LoaderError, LoadOptions, Progress, is_text_backend
from loaders.options import check_options
from webui.controllers.errors import UserError
from webui.controllers.generation import prefix_cache_text
from webui.names import InvalidName
from webui.models import mib
from webui.services import Services

AUTO_LOADER = "auto"
REMOTE_SAMPLERS = ("the server's: temperature, top_p, stop, seed, penalties, logit_bias, max tokens; top_k, min_p, "
                   "typical_p, repetition_penalty, min_tokens, no_repeat_ngram_size, ignore_eos sent as vLLM-style "
                   "extras only when set (a server that lacks one answers with a clear error)")
PREFIX_CACHE = {"blocks": "yes (the engine's blocks)", "native": "yes (in the backend's own cache)", "": "no"}


def option_text(values: dict[str, Any]) -> str:
    """``n_ctx=8192 · flash_attn=auto`` (the values a model was loaded with)."""
    return " · ".join(f"`{k}={v}`" for k, v in values.items())


@dataclass(frozen=True)
class ModelInfo:
    """What the Model tab says about the loaded model, and its chat template."""

    text: str
    template: str


class ModelController:
    def __init__(self, services: Services) -> None:
        self.services, self.models = services, services.models

    # -- what there is ------------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [e.name for e in self.models.catalog.available()]

    def selected_model(self) -> str | None:
        """The models-dir name of the model in use, else the last one the user loaded."""
        current = self.services.in_use()
        return current.entry.name if current and current.entry else self.services.settings.get().last_model

    def selected_loader(self) -> str:
        """The loader the user last loaded with (auto when they let the model decide)."""
        return self.services.settings.get().last_loader or AUTO_LOADER

    def loader_choices(self) -> list[tuple[str, str]]:
        """(label, value) pairs; a loader whose backend is missing says why and how to install it."""
        choices = [("auto (from what the model holds; the default model: transformers)", AUTO_LOADER)]
        for s in self.services.registry.status():
            label = s.name if s.available else f"{s.name} — unavailable: {s.reason}; install: {s.install_hint}"
            choices.append((label, s.name))
        return choices

    def info(self) -> ModelInfo:
        model = self.services.loaded
        if model is None:
            return ModelInfo("No model loaded.", "")
        caps = model.capabilities
        if is_text_backend(model):
            return ModelInfo(f"**{model.name}** on the remote server `{model.base_url}` · it samples and batches "
                             f"itself; context length: {model.context_length or 'not reported'}  \nChats are sent "
                             "as messages and the server applies its own chat template.", "(the remote server's own)")
        options = model.load_options
        text = (f"**{model.name}** · loader `{model.loader}` · {model.device} / {model.dtype}  \n"
                f"context length: {model.context_length} tokens · memory: {model.memory_bytes() / 2**20:,.0f} MiB · "
                f"batched forward: {'yes' if caps.batched_forward else 'no'} · LoRA: {'yes' if caps.lora else 'no'} · "
                f"prefix cache: {PREFIX_CACHE[caps.prefix_cache]} · "
                f"images: {'yes, it takes images (a vision-language model)' if caps.images else 'no (text only)'}  \n"
                f"path: `{model.path}`"
                + (f"  \nload options: {option_text(options)}" if options else "")
                + ("  \n⚠ trust_remote_code is on: Python code from this model's folder runs in the workbench"
                   if options.get("trust_remote_code") else ""))
        return ModelInfo(text, model.tokenizer.chat_template or "(this model has no chat template)")

    def capability_table(self) -> str:
        """Markdown: what each registered loader can do, and why one is unavailable."""
        rows = ["| loader | available | formats | devices | batched | LoRA | logprobs | prefix cache | images | "
                "samplers |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s in self.services.registry.status():
            c = s.capabilities
            available = "yes" if s.available else f"no: {s.reason}"
            samplers = "none: embeddings only" if not c.generates else \
                "all (our pipeline on its logits)" if c.stepped else REMOTE_SAMPLERS
            rows.append(f"| {s.name} | {available} | {', '.join(c.formats) or '-'} | {', '.join(c.devices)} | "
                        f"{'yes' if c.batched_forward else 'no'} | {'yes' if c.lora else 'no'} | "
                        f"{'yes' if c.logprobs else 'no'} | {PREFIX_CACHE[c.prefix_cache]} | "
                        f"{'vision-language models' if c.images else 'no'} | {samplers} |")
        return "\n".join(rows) + ("\n\nPrefix cache: prompts already read are not prefilled again (chat turns, "
                                  "regenerate, n > 1, batch grids). Models with sliding-window layers (e.g. Gemma "
                                  "2/3, Mistral with a sliding window) keep only their last tokens, so they are "
                                  "always prefilled in full.")

    # -- loading --------------------------------------------------------------------------------------------
    def load(self, name: str | None, loader: str | None, device: str, dtype: str, threads: float | None,
             progress: Progress | None = None, keep_others: bool = True,
             extra: dict[str, Any] | None = None) -> ModelInfo:
        """Load ``name`` (beside the loaded models, or instead of them) with the loader's own options ``extra``
        and use it; on failure what was loaded stays loaded and the message says so."""
        if not name:
            raise UserError("Choose a model first.")
        n_threads = int(threads) if threads else None
        chosen = None if loader in (None, AUTO_LOADER) else loader
        try:
            self.models.load(name, chosen, LoadOptions(device, self._dtype(name, loader, dtype), n_threads,
                                                       extra=extra or {}),
                             progress=progress, keep_others=keep_others, owner=self.services.owner)
        except (LoaderError, InvalidName, ValueError) as exc:
            raise self._kept(exc) from exc
        self.services.settings.update(last_model=name, last_loader=chosen,
                                      load_options={"device": device, "dtype": dtype, "threads": n_threads})
        return self.info()

    # -- the chosen loader's own options ---------------------------------------------------------------------
    def effective_loader(self, name: str | None, loader: str | None) -> str | None:
        """The loader a load of ``name`` would use (``auto``: the one that reads it), or None if none can."""
        if loader not in (None, "", AUTO_LOADER):
            return loader
        if not name:
            return None
        try:
            return self.models.loader_for(self.models.catalog.resolve(name), None).name
        except (LoaderError, InvalidName):
            return None

    def option_values(self, name: str | None, loader: str | None) -> dict[str, Any]:
        """The form's values for the loader ``loader``: what ``name`` was last loaded with, else the defaults."""
        if loader is None:
            return {}
        chosen = self.services.registry.get(loader)
        remembered = self.models.remembered_options(name, loader) if name else {}
        return check_options(chosen, remembered)

    def takes_dtype(self, name: str | None, loader: str | None) -> bool:
        """Whether the dtype control means anything for the loader a load of ``name`` would use."""
        chosen = self.effective_loader(name, loader)
        try:
            return chosen is None or self.services.registry.get(chosen).takes_dtype
        except LoaderError:  # an unknown loader: its load says so
            return True

    def _dtype(self, name: str | None, loader: str | None, dtype: str) -> str:
        """The dtype to load with: the one chosen, or auto where the loader takes none (the hidden control's value
        is kept for the loaders that do)."""
        return dtype if self.takes_dtype(name, loader) else "auto"

    def estimate_text(self, name: str | None, loader: str | None, device: str, dtype: str, threads: float | None,
                      extra: dict[str, Any], keep_others: bool = True) -> str:
        """What loading would take, said before loading: the estimate, what the budget has free now, and a
        warning when it cannot fit (more than the whole budget, or beside the models that would stay)."""
        if not name:
            return ""
        chosen = self.effective_loader(name, loader)
        missing = next((s for s in self.services.registry.status() if s.name == chosen and not s.available), None)
        if missing is not None:  # it cannot load: an estimate would say it could
            return (f"⚠ **The {missing.name} loader is unavailable** ({missing.reason}), so no estimate: it cannot "
                    f"load until installed. Install: {missing.install_hint}.")
        try:
            options = LoadOptions(device, self._dtype(name, loader, dtype), int(threads) if threads else None,
                                  extra=extra)
            fit = self.models.estimate_fit(name, None if loader in (None, AUTO_LOADER) else loader, options,
                                           keep_others)
        except (LoaderError, InvalidName, ValueError, OSError) as exc:
            return f"⚠ {exc}"
        budget = self.models.budget_bytes()
        room = "" if budget is None else (f" · the memory budget has {mib(max(budget - self.models.used_bytes(), 0))} "
                                          f"free of {mib(budget)}")
        text = f"Loading it needs about **{mib(fit.need)}** before any request runs{room}"
        if fit.never:
            return (text + f"  \n⚠ **More than the whole memory budget**: it cannot load even with every other "
                           f"model unloaded; {fit.remedy()}.")
        if not fit.fits:
            return text + f"  \n⚠ **It does not fit beside the loaded models**: {fit.remedy()}."
        return text

    def unload(self) -> ModelInfo:
        """Unload the model in use; the one loaded before it (if any) is used next."""
        if (slot := self.services.in_use()) is not None:
            self.models.unload(slot.name)
        return self.info()

    def use(self, name: str | None) -> ModelInfo:
        """Make the loaded model ``name`` the one in use (Chat, Notebook, Insight, requests that name none)."""
        if not name:
            raise UserError("Choose a loaded model first.")
        try:
            self.models.use(name, self.services.owner)
        except LoaderError as exc:
            raise UserError(str(exc)) from exc
        return self.info()

    def loaded_names(self) -> list[str]:
        return self.models.names()

    def current_name(self) -> str | None:
        current = self.services.in_use()
        return current.name if current else None

    def loaded_table(self) -> str:
        """Markdown: every loaded model, the one in use first marked, and the memory they take of the budget."""
        slots = self.models.slots()
        if not slots:
            return "No model loaded."
        current = self.current_name()
        rows = ["| | model | loader | device | memory | LoRA |", "| --- | --- | --- | --- | --- | --- |"]
        for slot in slots:
            m = slot.model
            memory = "-" if is_text_backend(m) else f"{m.memory_bytes() / 2**20:,.0f} MiB"  # the server holds it
            loras = ", ".join(f"{n} ×{w:g}" for n, w in slot.loras.items()) or "-"
            rows.append(f"| {'● in use' if slot.name == current else ''} | {slot.name} | {m.loader} | "
                        f"{m.device}/{m.dtype} | {memory} | {loras} |")
        budget = self.models.budget_bytes()
        used = f"{self.models.used_bytes() / 2**20:,.0f} MiB"
        total = (f"{used} of the {budget / 2**20:,.0f} MiB budget (`--memory-budget`)" if budget
                 else f"{used} (no budget)")
        held = "".join(f" (of which {mib(size)}: {holder}, until it ends)"
                       for holder, size in self.models.reserved().items())
        return "\n".join(rows) + (f"\n\nLoaded models take {total}{held}. Each has its own engine; they generate side "
                                  "by side.")

    def reload(self, progress: Progress | None = None) -> ModelInfo:
        try:
            self.models.reload(progress=progress, owner=self.services.owner)
        except LoaderError as exc:
            raise UserError(str(exc)) from exc
        return self.info()

    def connect(self, url: str, key: str, name: str, keep_others: bool = True) -> ModelInfo:
        """Use a remote OpenAI-compatible server as a model."""
        if not url.strip():
            raise UserError("Type the server's base URL first, e.g. http://gpu-box:8000/v1")
        try:
            self.models.load_remote(url, key, name.strip() or None, keep_others=keep_others,
                                    owner=self.services.owner)
        except LoaderError as exc:
            raise self._kept(exc) from exc
        return self.info()

    def _kept(self, exc: Exception) -> UserError:
        still = self.models.names()
        return UserError(f"{exc}." + (f" Still loaded: {', '.join(still)}." if still else ""))

    # -- adapters -------------------------------------------------------------------------------------------
    def lora_choices(self) -> list[str]:
        """Adapters in the loras dir that fit the loaded model."""
        return [e.name for e in self.models.compatible_loras(owner=self.services.owner)]

    def active_text(self) -> str:
        loaded = self.services.loaded
        if loaded is not None and not loaded.capabilities.lora:
            return f"The {loaded.loader} loader cannot apply LoRA adapters."
        if not self.services.active_loras:
            return f"No adapter attached. Put adapters (peft folders) in `{self.services.config.loras_dir}`."
        return "Attached: " + ", ".join(f"**{n}** ×{w:g}" for n, w in self.services.active_loras)

    def attach(self, name: str | None, weight: float | None) -> str:
        return self._change_lora(self.models.attach_lora, name, 1.0 if weight is None else float(weight))

    def detach(self, name: str | None) -> str:
        return self._change_lora(self.models.detach_lora, name)

    def _change_lora(self, change: Callable[..., None], name: str | None, *args: float) -> str:
        if not name:
            if not self.lora_choices():
                raise UserError(f"No adapter fits this model: put LoRA adapters (peft folders with "
                                f"adapter_config.json) in {self.services.config.loras_dir}, then reload the page.")
            raise UserError("Choose an adapter first.")
        try:
            change(name, *args, owner=self.services.owner)
        except (LoaderError, InvalidName) as exc:
            raise UserError(str(exc)) from exc
        return self.active_text()

    # -- prefix cache ---------------------------------------------------------------------------------------
    def prefix_cache_text(self) -> str:
        return prefix_cache_text(self.services)

    def clear_prefix_cache(self) -> str:
        self.services.engine.clear_prefix_cache()
        return self.prefix_cache_text()
