"""The Batch tab's view of the API's batch jobs (#45): batches apps made through ``/v1/batches`` (OpenAI's Batch API)
and ``/v1/messages/batches`` (Anthropic's Message Batches API, endpoint ``/v1/messages``), shown beside the tab's
own runs with their progress, what each did and why one failed; one still running can be cancelled here.

They hold every API key's prompts, so with a UI login only admin users see them (as the Requests tab's traffic).

    view = APIBatchesView(services)
    rows = view.table(user)                   # newest first: id, status, progress, ...
    text = view.detail(batch_id, user)        # one batch, in words
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from webui.controllers.errors import UserError
from webui.controllers.requests import sees_api_traffic
from webui.services import Services
from webui.store.api_batches import CANCELLABLE, OPEN, APIBatch

COLUMNS = ["Batch", "Status", "Progress", "Failed", "Endpoint", "Model", "Key", "Created"]
SHOWN = 50  # the newest batches the table lists
ONLY_ADMINS = "Only admin users see the API's batches (the server's `--ui-admin` names them)."


@dataclass(frozen=True)
class Listed:
    rows: list[list[str]]
    note: str
    running: bool  # whether any batch listed is still open (the tab refreshes itself while one is)


def progress(batch: APIBatch) -> str:
    done = batch.completed + batch.failed
    share = f" ({100 * done // batch.total}%)" if batch.total else ""
    return f"{done} / {batch.total}{share}"


def _when(stamp: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


class APIBatchesView:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.api_batches

    def allowed(self, user: str | None) -> bool:
        return sees_api_traffic(self.services.config, user)

    def table(self, user: str | None) -> Listed:
        if not self.allowed(user):
            return Listed([], ONLY_ADMINS, False)
        batches, more = self.store.page(limit=SHOWN)
        rows = [[b.id, b.status, progress(b), str(b.failed), b.endpoint, b.model or "-", b.client or "-",
                 _when(b.created_at)] for b in batches]
        if not self.services.config.api:
            note = "The API is off: start the workbench with `--api` to take batch jobs (`/v1/files`, `/v1/batches`)."
        elif not batches:
            note = ("No API batches yet: an app uploads a JSONL of requests to `/v1/files` and starts it with "
                    "`/v1/batches`, or sends its requests to `/v1/messages/batches` (docs/api.md, \"Files and "
                    "batches\", \"Message Batches\"). Its progress shows here.")
        else:
            note = f"The newest {SHOWN} of the API's batches." if more else "The API's batches, newest first."
            note += " Click a batch to see it."
        return Listed(rows, note, any(b.status in OPEN for b in batches))

    def _get(self, batch_id: str | None, user: str | None) -> APIBatch:
        if not self.allowed(user):
            raise UserError(ONLY_ADMINS.replace("`", ""))
        if not batch_id:
            raise UserError("Click a batch in the table first.")
        batch = self.store.get(batch_id)
        if batch is None:
            raise UserError(f"The batch {batch_id} is gone (deleted, or its data dir was changed).")
        return batch

    def detail(self, batch_id: str | None, user: str | None) -> str:
        """One batch in words: what it runs, how far it is, its tokens, files and errors."""
        if not batch_id:
            return ""
        b = self._get(batch_id, user)
        lines = [f"**{b.id}** · {b.status} · {progress(b)} rows done, {b.failed} failed · `{b.endpoint}` · "
                 f"model {b.model or '-'} · key {b.client or '(no keys)'}",
                 (f"Input file `{b.input_file_id}`" if b.api == "openai" else
                  "Anthropic's Message Batches API (requests sent inline; results at "
                  f"`GET /v1/messages/batches/{b.id}/results` once ended)") +
                 f" · made {_when(b.created_at)} · window {b.completion_window} (until {_when(b.expires_at)})",
                 "Times: " + ", ".join(f"{status} {_when(at)}" for status, at in b.times.items()),
                 f"Tokens: {b.usage.input_tokens} in ({b.usage.cached_tokens} from the prefix cache), "
                 f"{b.usage.output_tokens} out"]
        if b.output_file_id or b.error_file_id:
            lines.append(f"Output file `{b.output_file_id or '-'}` · error file `{b.error_file_id or '-'}` "
                         "(read them with `GET /v1/files/ID/content`)")
        for error in (b.errors or [])[:10]:
            where = f"line {error['line']}: " if error.get("line") else ""
            lines.append(f"- {where}{error.get('message')}")
        if len(b.errors or []) > 10:
            lines.append(f"- ... and {len(b.errors or []) - 10} more")
        return "\n\n".join(lines)

    def cancel(self, batch_id: str | None, user: str | None) -> str:
        """Ask the API's runner to stop the batch (it stops its rows in flight and writes the files of what ran; an
        Anthropic batch's requests not run are canceled)."""
        b = self._get(batch_id, user)
        if b.status in ("cancelling", "cancelled"):
            return f"{b.id} is {b.status} already."
        if not self.store.set_status(b.seq, "cancelling", only_from=CANCELLABLE):
            raise UserError(f"{b.id} is {self.store.status(b.seq)}: only a batch in progress can be cancelled.")
        after = "the files of what ran are written" if b.api == "openai" else "the requests not run are canceled"
        return f"{b.id} is being cancelled: the rows running now stop, and {after}."
