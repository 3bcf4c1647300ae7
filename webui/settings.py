"""UI settings that outlive the process: last model and loader, last preset, parameters, UI options.

Stored as one JSON file in the user data dir, written atomically. A file that
cannot be read is set aside (renamed, not overwritten) so nothing is lost, and
the defaults are used instead.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webui.fsutil import atomic_write_text
from webui.owner import current as current_owner
from webui.owner import folder_name

log = logging.getLogger(__name__)


@dataclass
class Settings:
    last_model: str | None = None
    last_loader: str | None = None
    load_options: dict[str, Any] = field(default_factory=dict)  # device, dtype, threads
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """'model@loader' -> the loader's own load options last loaded with (those not at their default)."""
    last_preset: str | None = "Balanced"  # a fresh install starts from a sensible preset, not neutral
    params: dict[str, Any] | None = None  # keys that differ from neutral; None: the last preset's
    changed_from: str | None = None  # the preset the parameters were changed from (last_preset is None then)
    system_prompt: str = ""
    use_chat_template: bool = True
    chat_template: str = ""  # the Chat tab's instruction template: "" the model's own, else a template's name
    context_policy: str = "drop oldest messages"  # or "refuse": a chat longer than the context
    notebook_text: str = ""  # the Notebook as last typed or generated, saved or not (a reload shows it again)
    notebook_name: str = ""  # the name in its box, saved or not
    chat_draft: str = ""  # the Chat tab's message box as last typed, not sent yet (a reload shows it again)
    chat_instruct_command: str = ""  # chat-instruct's command as last typed; "": text-generation-webui's default
    max_tool_steps: int = 5  # turns of a chat reply that may call tools before the model must answer (#44)
    tool_choice: str = "auto"  # a chat reply's first turn: "auto" (the model chooses) or "required" (it calls one)
    new_chat_tools: list[str] = field(default_factory=list)  # the tools a new chat offers: the last ones picked


SHARED = ("last_model", "last_loader", "load_options", "model_options")  # how the machine loads: one for everybody


class SettingsStore:
    """The shared settings file at ``path``; a logged-in user's own settings are in ``users/<user>/settings.json``
    beside it, with the model loaded at start (``SHARED``) kept in the shared file for everybody."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._by_owner: dict[str, Settings] = {"": self._read(path)}

    def _path(self, owner: str) -> Path:
        return self.path.parent / "users" / folder_name(owner) / self.path.name if owner else self.path

    @staticmethod
    def _read(path: Path) -> Settings:
        if not path.is_file():
            return Settings()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            known = {f.name for f in dataclasses.fields(Settings)}
            return Settings(**{k: v for k, v in data.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            aside = path.with_name(f"{path.name}.unreadable-{int(time.time())}")
            path.rename(aside)
            log.warning("settings file %s could not be read (%s); kept it as %s and started from defaults",
                        path, exc, aside)
            return Settings()

    def _of(self, owner: str) -> Settings:
        """(Lock held.)"""
        if owner not in self._by_owner:
            self._by_owner[owner] = self._read(self._path(owner))
        return self._by_owner[owner]

    def get(self) -> Settings:
        owner = current_owner()
        with self._lock:
            mine = self._of(owner)
            shared = self._by_owner[""]
            return dataclasses.replace(mine, **{k: getattr(shared, k) for k in SHARED})

    def remember_model_options(self, key: str, values: dict[str, Any]) -> None:
        """Keep ``values`` as the load options of ``key`` ('model@loader') for everybody."""
        with self._lock:
            shared = self._of("")
            self._by_owner[""] = dataclasses.replace(shared, model_options={**shared.model_options, key: values})
            atomic_write_text(self.path, json.dumps(dataclasses.asdict(self._by_owner[""]), indent=2))

    def update(self, **changes: Any) -> Settings:
        """Apply ``changes`` and write the file(s); unknown keys are a programming error."""
        owner = current_owner()
        with self._lock:
            parts = {"": changes} if not owner else {
                "": {k: v for k, v in changes.items() if k in SHARED},
                owner: {k: v for k, v in changes.items() if k not in SHARED}}
            for who, part in parts.items():
                if part or who == owner:
                    self._by_owner[who] = dataclasses.replace(self._of(who), **part)
                    atomic_write_text(self._path(who), json.dumps(dataclasses.asdict(self._by_owner[who]), indent=2))
        return self.get()
