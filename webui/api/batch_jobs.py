"""Running the API's batches (#45): one runner per API server, started and stopped with the app (its lifespan).

Batches run one at a time, in the order they were made (one being cancelled goes first: ending it is quick).
Each row is sent to this very app in process (httpx.ASGITransport, as webui/api/replay.py sends a replay) as the
key that made the batch and at background priority (webui/api/auth.py ``InProcessCaller``), so it is read,
checked, kept and answered exactly as the same HTTP request to its endpoint, and sampled the same (a greedy row
gives the text it gives sent alone). At most ``rows_in_flight`` rows run at once, so a long batch never fills the
engine's queue; background requests never take its last free slot and wait while a chat's prompt is read.

Each row's result is kept as it comes (webui/store/api_batches.py), so a server stopped or killed mid-batch goes
on, once started again, from the rows not done; a done row never runs again. A row answered 503 (no model loaded,
the engine full) is not done: the batch waits and sends it again (the wait doubling up to a minute). At the end the
output file (rows answered below 400) and the error file (the others, and the rows a cancel or the completion
window left unrun, as OpenAI's ``batch_cancelled`` and ``batch_expired`` errors) are written.

Each of a batch's lines is made by ``result_line``, or ``unrun_line`` for a row that never ran. A batch made through
Anthropic's Message Batches API (webui/api/message_batches.py) runs the same way, its rows sent to ``/v1/messages``;
each row's result is kept in Anthropic's shape (``message_result``) and the batch writes no files: its results are
read from its rows (a row that never ran: ``message_unrun_result``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.types import ASGIApp

from webui.api.auth import InProcessCaller, in_process
from webui.api.errors import APIError
from webui.engine.types import BACKGROUND
from webui.store.api_batches import APIBatch, APIBatchStore, BatchRow, RowUsage
from webui.store.api_files import FileStore, StoredFile

log = logging.getLogger("webui.api")

ROWS_IN_FLIGHT = 4
RETRY_S = (1.0, 60.0)  # the first and the longest wait before a row answered 503 is sent again
BUSY = (503, 529)  # "cannot take it now": 503, which /v1/messages answers as Anthropic's 529 (overloaded)
UNRUN = {"cancelled": ("batch_cancelled", "the batch was cancelled before this request ran"),
         "expired": ("batch_expired", "this request could not run before the batch's completion window ended")}


@dataclass(frozen=True)
class Answer:
    status_code: int
    request_id: str | None
    body: Any


def result_line(custom_id: str, answer: Answer) -> dict[str, Any]:
    """A row's line of the output file (answered below 400) or of the error file, in OpenAI's shape."""
    return {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": custom_id,
            "response": {"status_code": answer.status_code, "request_id": answer.request_id, "body": answer.body},
            "error": None}


def message_result(custom_id: str, answer: Answer) -> dict[str, Any]:
    """A row's result in Anthropic's shape: its message, or the error it was answered (Anthropic's error body)."""
    if answer.status_code < 400:
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": answer.body}}
    error = answer.body if isinstance(answer.body, dict) and answer.body.get("type") == "error" else None
    if error is None:  # (not answered by the endpoint: a row that could not be sent, an answer not JSON)
        inner = answer.body.get("error") if isinstance(answer.body, dict) else None
        said = inner.get("message") if isinstance(inner, dict) else None
        error = APIError(answer.status_code, str(said or answer.body), type="server_error").anthropic_body()[1]
    return {"custom_id": custom_id, "result": {"type": "errored", "error": {**error, "request_id": answer.request_id}}}


RESULTS = {"openai": result_line, "anthropic": message_result}  # how each API keeps a row's result


def message_unrun_result(custom_id: str, batch: APIBatch) -> dict[str, Any]:
    """The result of a row of an ended Anthropic batch that never ran: canceled, expired, or (the batch stopped on
    an error of this server) errored with that error."""
    if batch.status in ("cancelled", "expired"):
        return {"custom_id": custom_id, "result": {"type": "canceled" if batch.status == "cancelled" else "expired"}}
    said = "; ".join(str(e.get("message")) for e in batch.errors or []) or "the batch ended before this request ran"
    return {"custom_id": custom_id, "result": {"type": "errored", "error": APIError(
        500, said, type="server_error").anthropic_body()[1]}}


def unrun_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """A row's line of the error file when it never ran (the batch was cancelled or expired first)."""
    return {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": message}}


def row_usage(body: Any) -> RowUsage:
    """The tokens an answer says it used (OpenAI's chat and completions names, or the Responses and Messages APIs')."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return RowUsage()

    def first(*names: str, within: dict[str, Any] = usage) -> int:
        return next((v for n in names if isinstance(v := within.get(n), int)), 0)

    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = first("cached_tokens", within=details) if isinstance(details, dict) else 0
    return RowUsage(first("prompt_tokens", "input_tokens"), cached, first("completion_tokens", "output_tokens"))


class BatchJobs:
    """The runner (see the module's docstring). ``start`` and ``stop`` on the API app's event loop; ``wake`` from
    anywhere, when a batch is made or cancelled."""

    def __init__(self, app: ASGIApp, batches: APIBatchStore, files: FileStore,
                 rows_in_flight: int = ROWS_IN_FLIGHT) -> None:
        self.app, self.batches, self.files, self.rows_in_flight = app, batches, files, rows_in_flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Clear what a crash left in the files folder, then go on with the open batches (and wait for more)."""
        if self._task is not None:
            return
        self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
        await asyncio.to_thread(self.files.sweep)
        self._task = asyncio.create_task(self._run_all(), name="api-batch-jobs")

    async def stop(self) -> None:
        """Stop at once: rows in flight are cancelled (not done, so they run again after a restart)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def wake(self) -> None:
        if self._loop is not None and self._event is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._event.set)

    async def _run_all(self) -> None:
        while True:
            try:
                await self._next_batch()
            except Exception:  # noqa: BLE001 - the store failed (a full disk, say): said, then tried again
                log.exception("the API's batch runner failed; it tries again in 5 s")
                await asyncio.sleep(5)

    async def _next_batch(self) -> None:
        """Take the next open batch to its end (or wait for one)."""
        assert self._event is not None, "started"
        self._event.clear()
        batch = await asyncio.to_thread(self.batches.next_open)
        if batch is None:
            await self._event.wait()
            return
        try:
            await self._work(batch)
        except Exception as exc:  # noqa: BLE001 - the batch fails saying why; the runner goes on with the next
            log.exception("batch %s failed", batch.id)
            message = f"the batch stopped on an error of this server: {type(exc).__name__}: {exc}"
            await asyncio.to_thread(self.batches.fail, batch.seq, [{"code": "server_error", "message": message,
                                                                      "param": None, "line": None}])

    async def _work(self, batch: APIBatch) -> None:
        """Take ``batch`` on from where it is to its end."""
        if batch.status == "cancelling":
            return await self._end(batch, "cancelled")
        if batch.status == "in_progress":
            outcome = await self._run_rows(batch)
            if outcome != "completed":
                return await self._end(batch, outcome)
            await asyncio.to_thread(self.batches.set_status, batch.seq, "finalizing", only_from=("in_progress",))
        await self._end(batch, "completed")

    async def _stopping(self, batch: APIBatch, woken: bool) -> str | None:
        """Why ``batch`` must stop now ("cancelled", "expired"), or None; when ``woken``, other batches being
        cancelled are ended meanwhile."""
        if woken:
            other = await asyncio.to_thread(self.batches.next_open)
            if other is not None and other.seq != batch.seq and other.status == "cancelling":
                await self._end(other, "cancelled")
        status = await asyncio.to_thread(self.batches.status, batch.seq)
        if status != "in_progress":
            return "cancelled"
        return "expired" if time.time() >= batch.expires_at else None

    async def _run_rows(self, batch: APIBatch) -> str:
        """Run the rows not done, a few at a time; "completed" when none is left, else why it stopped."""
        app = in_process(self.app, InProcessCaller(batch.client, BACKGROUND))
        queue: deque[BatchRow] = deque()
        running: dict[asyncio.Task, BatchRow] = {}
        after, exhausted, woken = 0, False, False
        paused_until, wait = 0.0, RETRY_S[0]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://batch",
                                     timeout=None) as client:
            try:
                while True:
                    if stop := await self._stopping(batch, woken):
                        return stop
                    if not queue and not exhausted:
                        more = await asyncio.to_thread(self.batches.pending, batch.seq, after, 4 * self.rows_in_flight)
                        queue.extend(more)
                        after, exhausted = (more[-1].line, False) if more else (after, True)
                    while queue and len(running) < self.rows_in_flight and time.monotonic() >= paused_until:
                        row = queue.popleft()
                        running[asyncio.create_task(self._call(client, row))] = row
                    if not running and not queue and exhausted:
                        return "completed"
                    done, woken = await self._next(running, paused_until)
                    for task in done:
                        row, answer = running.pop(task), task.result()
                        if answer.status_code in BUSY:  # busy or no model: not done; the batch waits and tries again
                            queue.appendleft(row)
                            paused_until, wait = time.monotonic() + wait, min(wait * 2, RETRY_S[1])
                        else:
                            await asyncio.to_thread(self._keep, batch, row, answer)
                            wait = RETRY_S[0]
            finally:
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    async def _next(self, running: dict[asyncio.Task, BatchRow], paused_until: float
                    ) -> tuple[set[asyncio.Task], bool]:
        """Wait for rows to finish, a wake (a batch made or cancelled) or the end of a pause."""
        assert self._event is not None, "started"
        waiter = asyncio.create_task(self._event.wait())
        pause = paused_until - time.monotonic()
        try:
            done, _ = await asyncio.wait({*running, waiter}, timeout=pause if pause > 0 else None,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        woken = waiter in done
        if woken:
            self._event.clear()
        return done - {waiter}, woken

    async def _call(self, client: httpx.AsyncClient, row: BatchRow) -> Answer:
        """The row's request through the app, answered as an HTTP client would see it."""
        try:
            answer = await client.post(row.url, content=row.body, headers={"content-type": "application/json"})
            try:
                body = answer.json()
            except ValueError:
                return Answer(500, answer.headers.get("x-request-id"), APIError(
                    500, f"the answer was not JSON: {answer.text[:200]!r}", type="server_error").body())
            return Answer(answer.status_code, answer.headers.get("x-request-id"), body)
        except Exception as exc:  # noqa: BLE001 - the row fails with the reason, in its line of the error file
            log.exception("batch row %s could not be sent", row.custom_id)
            return Answer(500, None, APIError(500, f"the request could not be run: {type(exc).__name__}",
                                              type="server_error").body())

    def _keep(self, batch: APIBatch, row: BatchRow, answer: Answer) -> None:
        usage = row_usage(answer.body) if answer.status_code < 400 else RowUsage()
        self.batches.finish_row(batch.seq, row.line, answer.status_code, RESULTS[batch.api](row.custom_id, answer),
                                usage)

    async def _end(self, batch: APIBatch, status: str) -> None:
        await asyncio.to_thread(self._write_and_end, batch, status)
        await asyncio.to_thread(self.files.sweep)

    def _write_and_end(self, batch: APIBatch, status: str) -> None:
        """Write the output and error files from the kept rows, then end the batch with them in ``status`` (an
        Anthropic batch ends without files: its results are read from its rows)."""
        if batch.api == "anthropic":
            return self.batches.end(batch.seq, status, None, None)
        unrun = UNRUN.get(status)

        def lines(ok: bool) -> Iterator[dict[str, Any]]:
            for row in self.batches.rows(batch.seq):
                if row.status_code is not None and row.result is not None and (row.status_code < 400) == ok:
                    yield row.result
                elif row.status_code is None and unrun is not None and not ok:
                    yield unrun_line(row.custom_id, *unrun)

        output, error = self._file(batch, "output", lines(True)), self._file(batch, "error", lines(False))
        self.batches.end(batch.seq, status, output, error)

    def _file(self, batch: APIBatch, kind: str, lines: Iterable[dict[str, Any]]) -> StoredFile | None:
        """A batch_output file of ``lines`` as JSONL (bytes only: kept by ``end``), or None when there are none."""
        file_id, size = self.files.write((json.dumps(line) + "\n").encode() for line in lines)
        if not size:
            self.files.path(file_id).unlink(missing_ok=True)
            return None
        created = int(time.time())
        kept_for = batch.output_expires_after
        return StoredFile(file_id, batch.client, f"{batch.id}_{kind}.jsonl", "batch_output", size, created,
                          None if kept_for is None else created + kept_for)
