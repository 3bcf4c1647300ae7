"""The Engine: the one generate loop that UI, API and batch runner share.

One scheduler thread owns the model. Callers ``submit`` a GenerationRequest and
get a RequestStream of events. Every step feeds all running sequences to the
model at once (``LoadedModel.forward`` takes a list, so a loader that can batch
does); finished and cancelled sequences leave at the next step, and waiting
requests join up to ``max_running``. Nothing holds a lock for a whole
generation: the lock only guards the queues.

The engine only schedules: how a model reuses prompt KV already computed is
its PrefixReuse strategy (prefix_reuse.py, picked once per model), a
request on a text-only backend goes to the RelayRunner (relay.py), which runs
it on its own thread, and the scheduler thread does only model work: what each
step drew goes to the OutputWorker (output.py), whose thread detokenizes it,
matches stop strings and puts the events (a stop it finds ends the sequence at
the next step).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from loaders.base import LoadedModel, SteppedModel, is_stepped, is_text_backend
from webui.engine.prefix_cache import BLOCK_TOKENS, PrefixCacheStats
from webui.engine.prefix_reuse import PrefixReuse, prefix_reuse_for
from webui.engine.params import InvalidParameter
from webui.engine.output import Output, OutputWorker
from webui.engine.relay import RelayRunner
from webui.engine.sampling import Sampler, sample_rows
from webui.engine.sampling_rows import SamplingRows
from webui.engine.sequence import Sequence, check_loras, encode_prompt
from webui.engine.stream import RequestStream
from webui.engine.types import (EngineClosed, EngineError, GenerationRequest, GeneratesNoText, GenerationResult,
                                NoModelLoaded, FinishReason, BACKGROUND, INTERACTIVE, now)

log = logging.getLogger(__name__)

TPS_WINDOW = 5.0  # seconds of history behind EngineStats.tokens_per_second


class QueueFull(EngineError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the engine's queue is full ({limit} requests waiting); try again later")
        self.limit = limit


@dataclass(frozen=True)
class EngineConfig:
    max_running: int = 16  # sequences decoded together
    max_waiting: int = 256  # requests queued behind them before submit() refuses
    max_batch_tokens: int = 1024  # tokens fed to the model per step (decodes first, then prompt chunks)
    prefill_chunk: int = 256  # at most this many prompt tokens of one sequence per step
    prefix_cache_mb: float | None = None  # memory for the prefix cache; None: a default for the device; 0: off
    prefix_block_tokens: int = BLOCK_TOKENS

    def __post_init__(self) -> None:
        for name in ("max_running", "max_waiting", "max_batch_tokens", "prefill_chunk", "prefix_block_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prefix_cache_mb is not None and not self.prefix_cache_mb >= 0:
            raise ValueError(f"prefix_cache_mb must be >= 0 (0 turns the prefix cache off), got {self.prefix_cache_mb}")


@dataclass(frozen=True)
class EngineStats:
    model: str | None
    running: int
    waiting: int
    tokens_per_second: float
    prefix_cache: PrefixCacheStats | None = None  # None when the model cannot cache prefixes or it is off

    @property
    def busy(self) -> bool:
        return self.running + self.waiting > 0


class Engine:
    def __init__(self, model: LoadedModel | None = None, config: EngineConfig = EngineConfig()):
        self.config = config
        self._model = model
        self._cond = threading.Condition()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._calls: list[tuple[Callable[[], Any], threading.Event, list[Any]]] = []
        self._relays = RelayRunner()  # requests a text-only backend is generating, each on its own thread
        self._output = OutputWorker()  # the stepped sequences' text and events, off this thread
        self._recent: deque[tuple[float, int]] = deque()
        self._reuse = self._prefix_reuse(model)
        self._sampling: SamplingRows[Sampler] = SamplingRows()  # the sampling passes of the rows that sample, kept while they do
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="engine-scheduler", daemon=True)
        self._thread.start()

    # -- caller API ------------------------------------------------------------
    @property
    def model(self) -> LoadedModel | None:
        return self._model

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue ``request``; bad prompts (empty, too long) raise here, at once."""
        with self._cond:
            if self._closed:
                raise EngineClosed()
            model = self._model
            if model is None:
                raise NoModelLoaded()
            if not model.capabilities.generates:
                raise GeneratesNoText(model.name)
            if len(self._waiting) >= self.config.max_waiting:
                raise QueueFull(self.config.max_waiting)
        check_loras(model, request)
        if request.images and not is_stepped(model):
            raise InvalidParameter("images", f"{model.name} takes no images (a remote server's model is sent text "
                                             "only); load a vision-language model here", len(request.images))
        prompt_ids, images = encode_prompt(model, request) if is_stepped(model) else ([], None)  # a text backend
        stream = RequestStream(request.request_id, request.cancel, self._wake)  # tokenizes itself
        stream.prompt_tokens = len(prompt_ids) if is_stepped(model) else None
        seq = Sequence(request, stream, now(), tokenized_for=(model, prompt_ids, images))
        with self._cond:
            self._waiting.append(seq)
            self._cond.notify()
        return stream

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Submit and wait for the whole result."""
        return self.submit(request).result()

    def set_model(self, model: LoadedModel | None) -> None:
        """Swap the model between two steps; requests still running end with an error saying why."""
        self.call_between_steps(lambda: self._swap(model))

    @property
    def closed(self) -> bool:
        return self._closed

    def call_between_steps(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the scheduler thread between two steps (e.g. to change the model's adapters
        while nothing is in a forward); return its result or raise its exception here."""
        done, box = threading.Event(), list[Any]()  # [result, exception] once done
        with self._cond:
            if self._closed:
                raise EngineClosed()
            self._calls.append((fn, done, box))
            self._cond.notify()
        done.wait()
        result, exc = box
        if exc is not None:
            raise exc
        return result

    def fail_running(self, predicate: Callable[[GenerationRequest], bool], message: str) -> None:
        """End running requests that match ``predicate`` with an error (scheduler thread only)."""
        self._fail([s for s in self._running if predicate(s.request)], EngineError(message))

    def stats(self) -> EngineStats:
        with self._cond:
            cutoff = now() - TPS_WINDOW
            tokens = sum(n for t, n in self._recent if t >= cutoff)
            model = self._model
            prefix = self._reuse.stats()
            return EngineStats(model.name if model else None, len(self._running) + len(self._relays),
                               len(self._waiting), tokens / TPS_WINDOW, prefix)

    def clear_prefix_cache(self) -> None:
        """Forget every cached prompt block (the next requests prefill in full)."""
        self.call_between_steps(lambda: self._reuse.clear())

    def drop_stale_prefixes(self) -> int:
        """(Scheduler thread.) Free the blocks of adapters that are no longer attached; returns how many."""
        return self._reuse.drop_stale()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)
        self._output.close()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # -- scheduler thread ---------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._calls or self._waiting or self._running):
                    self._cond.wait()
                if self._closed:
                    break
                calls, self._calls = self._calls, []
            for fn, done, box in calls:
                try:
                    box[:] = [fn(), None]
                except Exception as exc:  # handed to the caller of call_between_steps
                    box[:] = [None, exc]
                done.set()
            with self._cond:
                admitted = self._admit()
            try:
                self._start(admitted)
                self._drop_cancelled()
                if self._running:
                    self._step()
            except Exception as exc:  # never let the scheduler die; fail what was running instead
                log.exception("engine step failed")
                self._fail(self._running, exc)
        self._shutdown()

    def _swap(self, model: LoadedModel | None) -> None:
        """(Scheduler thread.) Requests running on the old model end with an error that says why."""
        if model is not self._model:
            self._relays.cancel_all()
            what = "the model was unloaded" if model is None else f"the model was switched to '{model.name}'"
            self._fail(self._running, EngineError(f"generation stopped: {what} while this request was running"))
            self._reuse = self._prefix_reuse(model)  # kept blocks belong to the model that computed them
        self._model = model

    def _prefix_reuse(self, model: LoadedModel | None) -> PrefixReuse:
        """The model's prefix-reuse strategy (blocks, native or none), chosen once per model."""
        return prefix_reuse_for(model, self.config.prefix_cache_mb, self.config.prefix_block_tokens)

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        t = now()
        for seq in list(self._waiting):
            reason = _ended(seq, seq.queue_expired(t))
            if reason:
                self._waiting.remove(seq)
                self._output.put([seq.output(None, reason)])
        background_room = self.config.max_running - (1 if self.config.max_running > 1 else 0)
        while self._waiting and len(self._running) + len(admitted) < self.config.max_running:
            seq = min(self._waiting, key=lambda s: s.request.priority)  # the first of the most urgent
            if seq.request.priority > INTERACTIVE and len(self._running) + len(admitted) >= background_room:
                break  # the last slot is kept for a request someone waits for
            self._waiting.remove(seq)
            admitted.append(seq)
        return admitted

    def _start(self, admitted: list[Sequence]) -> None:
        model = self._model
        for seq in admitted:
            try:
                if model is None:
                    raise NoModelLoaded()
                if is_stepped(model):
                    seq.start(model, seq.prompt_for(model))
                    seq.prefix = self._reuse.track(seq.request.loras, seq.image_spans)
                    self._running.append(seq)
                    self._start_from_cache(seq)
                elif is_text_backend(model):  # a remote server samples: its runner relays the stream
                    self._relays.start(seq, model)
            except Exception as exc:
                self._fail([seq], exc)

    def _stepped_model(self) -> SteppedModel:
        """The model the running sequences step (they end when it is swapped, so it is always there)."""
        model = self._model
        if model is None or not is_stepped(model):
            raise NoModelLoaded()
        return model

    def _drop_cancelled(self) -> None:
        t = now()
        for seq in list(self._running):
            if seq.stream_ended:  # the output thread ended it (a stop string): its stream has its final event
                seq.release()
                self._retire([seq])
                continue
            reason = _ended(seq, seq.time_expired(t))
            if reason:
                seq.release()
                self._output.put([seq.output(None, reason)])
                self._retire([seq])

    def _retire(self, seqs: list[Sequence]) -> None:
        """Sequences leave the running set: their cached blocks may be evicted again."""
        for seq in seqs:
            if seq in self._running:
                self._running.remove(seq)
            self._reuse.release(seq.prefix)

    # -- prefix reuse (the strategy keeps the blocks; the engine decides who runs and who waits) -----------------
    def _start_from_cache(self, seq: Sequence) -> None:
        """Start ``seq`` from the longest computed prefix of its prompt, or let it wait while a running
        sequence is prefilling more of that prefix (n > 1, a batch grid): it is computed once, then shared."""
        hit = self._reuse.found(seq.prefix, seq.prompt_ids)
        seq.waiting_for = self._prefill_leader(seq, hit)
        if seq.waiting_for is None:
            seq.resume_from(self._reuse.restore(seq.prefix, seq.cache, seq.prompt_ids, hit))

    def _prefill_leader(self, seq: Sequence, hit: int) -> Sequence | None:
        """A running sequence that is prefilling blocks of ``seq``'s prompt that are not computed yet."""
        for other in self._running:
            if other is not seq and other.prefilling and self._reuse.worth_waiting_for(seq.prefix, hit, other.prefix):
                return other
        return None

    def _plan(self) -> list[tuple[Sequence, list[int]]]:
        """What each sequence feeds this step: every decode, then prompt chunks within the token budget.

        A long prompt is prefilled a chunk per step, so sequences already
        decoding keep getting a token every step instead of waiting for it.
        """
        reading = [s.request.priority for s in self._running if s.prefilling]
        urgent = min(reading) if reading else BACKGROUND  # while an interactive prompt is read, background work waits
        running = [s for s in self._running if s.request.priority <= urgent]
        decoding = [s for s in running if s.prompt_done]
        plan = [(s, s.pending) for s in decoding]
        budget = self.config.max_batch_tokens - len(decoding)
        for seq in running:
            if seq.prompt_done or seq.waiting_for is not None:
                continue
            n = min(len(seq.pending), self.config.prefill_chunk, budget)
            if n <= 0:
                if plan:
                    break
                n = min(len(seq.pending), self.config.prefill_chunk)  # always make progress
            n = seq.chunk_size(n)  # an image read in one step may go over the chunk and the budget
            plan.append((seq, seq.pending[:n]))
            budget -= n
        return plan

    def _step(self) -> None:
        for seq in self._running:
            if seq.waiting_for is not None:  # its leader may have stored the shared blocks, or gone
                self._start_from_cache(seq)
        plan = self._plan()
        if not plan:
            return
        # CFG: a request's negative prompt rides in the same forward (all of it with the request's first chunk,
        # then each sampled token), so its logits are ready whenever the request samples
        guides = [(s.guide, s.guide.pending) for s, _ in plan if s.guide is not None and s.guide.pending]
        feeds = [(s.cache, ids) for s, ids in plan] + [(g.cache, ids) for g, ids in guides]
        logits = self._stepped_model().forward([c for c, _ in feeds], [ids for _, ids in feeds])
        for j, (guide, ids) in enumerate(guides):
            guide.took(ids, logits[len(plan) + j])
        ready: list[tuple[Sequence, int]] = []
        for i, (seq, ids) in enumerate(plan):
            seq.fed(ids)
            self._reuse.keep(seq.prefix, seq.cache, seq.ids, seq.kv_tokens)
            if not seq.pending:  # the whole prompt is in: this sequence samples
                ready.append((seq, i))
        if ready:
            places = [i for _, i in ready]
            rows = logits[:len(places)] if places == list(range(len(places))) else logits[places]
            choices = sample_rows([s.ready_to_sample() for s, _ in ready], [s.ids for s, _ in ready], rows,
                                  [s.request.logprobs for s, _ in ready], self._sampling)
            outputs: list[Output] = []
            for (seq, _), choice in zip(ready, choices):
                try:
                    if isinstance(choice, Exception):
                        raise choice
                    outputs.append(seq.output(choice, seq.step(choice)))
                except Exception as exc:
                    outputs.append(self._failed(seq, exc))
            self._output.put(outputs)
        sampled = len(ready)
        self._retire([s for s in self._running if s.finished])
        with self._cond:
            t = now()
            self._recent.append((t, sampled))
            while self._recent and self._recent[0][0] < t - TPS_WINDOW:
                self._recent.popleft()

    def _fail(self, seqs: list[Sequence], exc: BaseException) -> None:
        seqs = list(seqs)
        self._output.put([self._failed(seq, exc) for seq in seqs if not seq.finished])
        self._retire(seqs)

    def _failed(self, seq: Sequence, exc: BaseException) -> Output:
        """(Scheduler thread.) ``seq`` ends with ``exc``: its caches released (it is retired after), its final
        event."""
        seq.release()
        return seq.output(None, "error", str(exc) or type(exc).__name__, exc)

    def _shutdown(self) -> None:
        with self._cond:
            pending = list(self._waiting) + self._running
            self._waiting.clear()
            for _, done, box in self._calls:
                box[:] = [None, EngineClosed()]
                done.set()
        self._fail(pending, EngineClosed())
        self._running = []


def _ended(seq: Sequence, expired: bool) -> FinishReason | None:
    """Why ``seq`` ends before its next step: cancelled, or past its time limit (``expired``); None: it goes on."""
    return "cancelled" if seq.request.cancel.cancelled else "timeout" if expired else None
