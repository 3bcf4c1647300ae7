"""The response cache: a batch cell whose whole request was already run is answered from it.

The key is the SHA-256 of everything that decides the output: the model's name and
loader, how it was loaded (device, dtype, the loader's own options: a model loaded in bfloat16 or with
another attention implementation answers otherwise), the adapters and their weights, the exact prompt text (after the chat
template), whether it is raw, and every sampling parameter with the seed (and, when it samples, the version of
the draw: webui.engine.sampling.DRAW, so a seed's tokens from an older draw are not served). A cell
is cached only when it finished (not cancelled, no error), so a re-run of a stored
run after changing one axis computes only the new cells.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from loaders.base import LoadedModel
from webui.batch.run.results import Generated
from webui.owner import current as current_owner
from webui.store.db import Database


def cache_key(model: LoadedModel, loras: Any, prompt: str, raw: bool, params: dict[str, Any]) -> str:
    from webui.engine.sampling import DRAW

    request = {"model": model.name, "loader": model.loader, "device": str(model.device), "dtype": str(model.dtype),
               "load_options": dict(model.load_options), "loras": [list(x) for x in loras], "prompt": prompt,
               "raw": raw, "params": params}
    if params.get("temperature", 1.0) != 0:
        request["draw"] = DRAW
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _stored(key: str) -> str:
    """Each owner's entries apart: a logged-in user's keys carry the user (hex keys hold no ':')."""
    owner = current_owner()
    return f"{owner}:{key}" if owner else key


class ResponseCache:
    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, key: str) -> Generated | None:
        """The reply kept for ``key`` (its RESPONSE_FIELDS: no error, tool steps or logprobs); None: none."""
        row = self._db.query_one("SELECT response FROM response_cache WHERE key = ?", (_stored(key),))
        return None if row is None else Generated.from_response(json.loads(row["response"]))

    def put(self, key: str, made: Generated) -> None:
        with self._db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO response_cache (key, response, created) VALUES (?, ?, ?)",
                         (_stored(key), json.dumps(made.response()), time.time()))

    def clear(self) -> int:
        """Forget this owner's cached responses."""
        owner = current_owner()
        with self._db.transaction() as conn:
            if not owner:
                return conn.execute("DELETE FROM response_cache WHERE instr(key, ':') = 0").rowcount
            prefix = owner + ":"
            return conn.execute("DELETE FROM response_cache WHERE substr(key, 1, ?) = ?",
                                (len(prefix), prefix)).rowcount
