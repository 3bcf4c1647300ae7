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

log = logging.getLogger(__name__)


@dataclass
class Settings:
    last_model: str | None = None
    last_loader: str | None = None
    load_options: dict[str, Any] = field(default_factory=dict)  # device, dtype, threads
    last_preset: str | None = "Balanced"  # a fresh install starts from a sensible preset, not neutral
    params: dict[str, Any] | None = None  # keys that differ from neutral; None: the last preset's
    system_prompt: str = ""
    use_chat_template: bool = True
    chat_template: str = ""  # the Chat tab's instruction template: "" the model's own, else a template's name
    context_policy: str = "drop oldest messages"  # or "refuse": a chat longer than the context


class SettingsStore:
    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._settings = self._read()

    def _read(self) -> Settings:
        if not self.path.is_file():
            return Settings()
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            known = {f.name for f in dataclasses.fields(Settings)}
            return Settings(**{k: v for k, v in data.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            self.path.rename(aside)
            log.warning("settings file %s could not be read (%s); kept it as %s and started from defaults",
                        self.path, exc, aside)
            return Settings()

    def get(self) -> Settings:
        with self._lock:
            return dataclasses.replace(self._settings)

    def update(self, **changes: Any) -> Settings:
        """Apply ``changes`` and write the file; unknown keys are a programming error."""
        with self._lock:
            self._settings = dataclasses.replace(self._settings, **changes)
            atomic_write_text(self.path, json.dumps(dataclasses.asdict(self._settings), indent=2))
            return dataclasses.replace(self._settings)
