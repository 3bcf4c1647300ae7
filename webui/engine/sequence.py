"""One running request inside the engine: its tokens, sampler, text and timings."""

from __future__ import annotations

import contextlib
import secrets
import weakref
from typing import Any

import torch

from loaders.base import ImagePrompt, LoadedModel, SteppedModel, SupportsGuidance, SupportsImages, is_lora_model
from webui.engine.detokenize import IncrementalDetokenizer
from webui.engine.output import Output
from webui.engine.params import InvalidParameter, SamplingParams
from webui.engine.prefix_cache import ImageSpan
from webui.engine.prefix_reuse import PrefixTrack
from webui.engine.sampling import Sampler, TokenChoice
from webui.engine.stopping import StopStringMatcher
from webui.engine.stream import RequestStream
from webui.engine.types import (FinishReason, GenerationEvent, GenerationRequest, PromptTooLong, Timings,
                                TokenLogprob, Usage, now)


def check_loras(model: LoadedModel, request: GenerationRequest) -> None:
    """A request's adapters must be attached to the model, and its loader must do LoRA."""
    if not request.loras:
        return
    if not is_lora_model(model):
        raise InvalidParameter("lora", f"the {model.loader} loader cannot apply LoRA adapters; load the model with "
                                       "a loader that can (transformers)", request.loras)
    attached = model.loras
    missing = [name for name, _ in request.loras if name not in attached]
    if missing:
        raise InvalidParameter("lora", f"LoRA adapter '{missing[0]}' is not attached to {model.name}; attached: "
                                       f"{', '.join(attached) or 'none'}", missing[0])


def token_budget(model: LoadedModel, params: SamplingParams) -> int:
    """How many tokens the prompt and the output may take together: truncation_length (capped at the context)
    or the whole context."""
    return min(params.truncation_length or model.context_length, model.context_length)


def tokenize_prompt(model: SteppedModel, request: GenerationRequest) -> list[int]:
    """A text request's prompt ids, checked (see :func:`encode_prompt` for one with images)."""
    params = request.params
    if params.structured_outputs and not isinstance(model.tokenizer, SupportsGuidance):
        raise InvalidParameter("structured_outputs", f"structured_outputs: the {model.loader} loader's tokenizer "
                                                     "cannot constrain output; use another loader")
    if isinstance(request.prompt, list):
        ids = list(request.prompt)
    else:
        if not params.truncation_length:
            _refuse_surely_too_long(model, request.prompt, params)
        ids = model.tokenizer.encode(request.prompt,
                                     add_special_tokens=request.add_special_tokens and params.add_bos_token)
    if not ids:
        raise ValueError("the prompt is empty; type something to continue from")
    if params.truncation_length:  # keep the newest tokens, with room for max_new_tokens
        keep = max(1, token_budget(model, params) - params.max_new_tokens)
        ids = ids[-keep:]
    return _checked(model, request, ids)


_LONGEST_TOKEN: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""A cache of :func:`longest_token_bytes` per tokenizer (weak: an unloaded model's goes with it)."""


def longest_token_bytes(tokenizer: Any, vocab_size: int) -> int:
    """The most UTF-8 bytes of text one of the ``vocab_size`` tokens of ``tokenizer`` stands for: a text of B bytes
    is at least B / this many tokens. (A byte that is part of a character decodes alone as U+FFFD, 3 bytes: the
    bound is only ever too high, never too low.)"""
    with contextlib.suppress(TypeError):  # a tokenizer that takes no weak reference is measured each time
        if tokenizer in _LONGEST_TOKEN:
            return _LONGEST_TOKEN[tokenizer]
    longest = max((len(tokenizer.decode([i], skip_special_tokens=False).encode("utf-8", "surrogatepass"))
                   for i in range(vocab_size)), default=0)
    with contextlib.suppress(TypeError):
        _LONGEST_TOKEN[tokenizer] = longest
    return longest


def fewest_tokens(tokenizer: Any, vocab_size: int, text: str, context_length: int) -> int:
    """A lower bound on the tokens ``text`` takes (its UTF-8 bytes over the longest token's), measured only for a
    text long enough that the bound could reach ``context_length`` (0 otherwise): a hostile 10 MB text is refused
    at once instead of costing seconds of tokenizing (#43)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size < context_length:  # a token stands for one byte at least: a shorter text may always fit
        return 0
    longest = longest_token_bytes(tokenizer, vocab_size)
    return size // longest if longest else 0


def _refuse_surely_too_long(model: SteppedModel, prompt: str, params: SamplingParams) -> None:
    """PromptTooLong, before any tokenizing, for a text so long that even its fewest possible tokens fill the
    context."""
    fewest = fewest_tokens(model.tokenizer, model.vocab_size, prompt, model.context_length)
    if fewest >= model.context_length:
        raise PromptTooLong(fewest, params.max_new_tokens, model.context_length, at_least=True)


def encode_prompt(model: SteppedModel, request: GenerationRequest) -> tuple[list[int], ImagePrompt | None]:
    """The prompt's ids, and for a request with images the prompt as the model reads it (its images' token
    spans and pixel inputs); ids count every image token."""
    if not request.images:
        return tokenize_prompt(model, request), None
    if not (model.capabilities.images and isinstance(model, SupportsImages)):
        raise InvalidParameter("images", f"{model.name} takes no images: it is a text-only model; load a "
                                         "vision-language model, or send text only", len(request.images))
    params = request.params
    if params.structured_outputs and not isinstance(model.tokenizer, SupportsGuidance):
        raise InvalidParameter("structured_outputs", f"structured_outputs: the {model.loader} loader's tokenizer "
                                                     "cannot constrain output; use another loader")
    prompt = model.encode_images(str(request.prompt), request.images,
                                 request.add_special_tokens and params.add_bos_token)
    if params.truncation_length and len(prompt.ids) > max(1, token_budget(model, params) - params.max_new_tokens):
        raise PromptTooLong(len(prompt.ids), params.max_new_tokens, min(model.context_length,
                                                                         token_budget(model, params)))
    return _checked(model, request, prompt.ids), prompt


def _checked(model: SteppedModel, request: GenerationRequest, ids: list[int]) -> list[int]:
    """``ids`` if they fit the context and the vocabulary (and the request's token ids do)."""
    params = request.params
    if len(ids) >= model.context_length:
        raise PromptTooLong(len(ids), request.params.max_new_tokens, model.context_length)
    vocab = model.vocab_size
    for field, tokens in (("prompt", ids), ("logit_bias", [t for t, _ in params.logit_bias]),
                          ("custom_token_bans", params.custom_token_bans)):
        bad = [t for t in tokens if t >= vocab]
        if bad:
            raise InvalidParameter(field, f"{field}: token id {bad[0]} is not in the model's vocabulary "
                                          f"(ids 0..{vocab - 1})", bad[0])
    return ids


class Guide:
    """CFG's second sequence: the negative prompt, fed beside its request in the same batched steps and then
    every token the request samples, so its next-token logits are always at the request's position."""

    def __init__(self, prompt_ids: list[int], cache: Any):
        self.pending, self.cache = list(prompt_ids), cache
        self.fed = 0  # tokens it has cost (reported in the reply's usage)
        self.logits: torch.Tensor | None = None

    def took(self, ids: list[int], logits: torch.Tensor) -> None:
        self.pending = self.pending[len(ids):]
        self.fed += len(ids)
        self.logits = logits


def guide_prompt(model: LoadedModel, request: GenerationRequest, prompt_ids: list[int]) -> list[int]:
    """The negative prompt's tokens (with a BOS where the prompt's has one), or the prompt's last token when
    there is none (as transformers does)."""
    params = request.params
    if not params.negative_prompt:
        return prompt_ids[-1:]
    ids = model.tokenizer.encode(params.negative_prompt,
                                 add_special_tokens=request.add_special_tokens and params.add_bos_token)
    return ids[-max(1, model.context_length // 2):]


class Sequence:
    """Engine-side state of one request. The engine thread owns its tokens, caches and sampler; its text (the
    detokenizer, the stop strings) and its events are the output thread's (``emit``, output.py). A request on a
    text-only backend is owned by its relay thread from admission to its final event (the engine only cancels
    it, through its request)."""

    def __init__(self, request: GenerationRequest, stream: RequestStream, submitted: float,
                 tokenized_for: tuple[LoadedModel, list[int], ImagePrompt | None] | None = None):
        self.request, self.stream, self.submitted = request, stream, submitted
        # (model, prompt ids, the prompt with its images) when submitted: encoded again for another model
        self.tokenized_for = tokenized_for
        params = request.params
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.model: SteppedModel | None = None
        self.prompt_ids: list[int] = []
        self.image_spans: tuple[ImageSpan, ...] = ()  # where its prompt's images are (their tokens), in order
        self.whole_images = False  # each image's tokens are fed in one step (they attend to each other both ways)
        self.ids: list[int] = []
        self.pending: list[int] = []
        self.cache: Any = None
        self.completion_tokens = 0
        self.admitted = submitted
        self.first_token: float | None = None
        self.finished = False  # (engine thread) it left the batch: no more steps
        self.stream_ended = False  # (output thread) its final event is out; the engine drops it at the next step
        self.emitted = 0  # (output thread) tokens whose events are out
        self.guide_fed = 0  # (output thread) what its CFG guide had cost at the last output
        self.prompt_done = False  # the whole prompt is in the cache; each step now feeds one token
        self.stops = StopStringMatcher(params.stop)
        self._detok: IncrementalDetokenizer | None = None  # made by the output thread, at the first token
        self.cached_tokens = 0  # prompt tokens whose KV was reused, not prefilled (set by resume_from)
        self.prefix = PrefixTrack("")  # its prefix-reuse state, made and kept by the engine's strategy
        self.waiting_for: "Sequence | None" = None  # a sequence prefilling the prompt's start, which it waits for
        self.guide: Guide | None = None

    def start(self, model: SteppedModel, encoded: tuple[list[int], ImagePrompt | None] | None = None,
              prefix: PrefixTrack | None = None) -> None:
        """Bind to ``model``: encode the prompt (unless given), size the budget, build sampler and cache (with the
        prompt's images); ``prefix``: its state in the engine's prefix-reuse strategy."""
        self.prompt_ids, images = encoded if encoded is not None else encode_prompt(model, self.request)
        self.ids = list(self.prompt_ids)
        self.pending = list(self.prompt_ids)
        params, room = self.request.params, model.context_length - len(self.prompt_ids)
        self.max_new = (max(1, min(room, token_budget(model, params) - len(self.prompt_ids)))
                        if params.auto_max_new_tokens else min(params.max_new_tokens, room))
        tok = model.tokenizer
        self.sampler = Sampler(params, sorted(tok.eos_token_ids), len(self.prompt_ids), self.seed, tok)
        self.cache = self._new_cache(model)
        if images is not None and isinstance(model, SupportsImages):  # (encode_prompt checked that it is)
            model.attach_images(self.cache, images.media)
            self.image_spans = tuple(images.spans)
            self.whole_images = images.whole_images
        if params.guidance_scale != 1.0:
            self.guide = Guide(guide_prompt(model, self.request, self.prompt_ids), self._new_cache(model))
            self.max_new = max(1, min(self.max_new, model.context_length - len(self.guide.pending)))
        self.admitted = now()
        self.model = model
        if prefix is not None:
            self.prefix = prefix

    def start_relayed(self) -> StopStringMatcher:
        """Admitted to run on a text-only backend (which tokenizes and samples): only the stop matcher and the
        clock are ours. Returns the matcher."""
        self.admitted = now()
        return self.stops

    def mark_first_token(self) -> None:
        """Output has come: the first time, that is the time to first token."""
        if self.first_token is None:
            self.first_token = now()

    def prompt_for(self, model: LoadedModel) -> tuple[list[int], ImagePrompt | None] | None:
        """The prompt encoded at submit, if for ``model`` (None: encode again, the model was swapped)."""
        if self.tokenized_for is None or self.tokenized_for[0] is not model:
            return None
        return self.tokenized_for[1], self.tokenized_for[2]

    def resume_from(self, n: int) -> None:
        """The cache starts with the first ``n`` prompt tokens (reused): only the rest is fed."""
        self.pending = self.prompt_ids[n:]
        self.cached_tokens = n

    def chunk_size(self, n: int) -> int:
        """How many pending tokens to feed when ``n`` fit: ``n``, unless that would end inside an image whose
        tokens are read in one step; then up to that image's start, or (at its start) all of it, over ``n``."""
        start = self.kv_tokens
        cut = start + n
        if self.whole_images:
            for first, end, _ in self.image_spans:
                if first < cut < end:
                    return first - start if first > start else end - start
        return n

    def fed(self, ids: list[int]) -> None:
        """This step fed ``ids``, the start of ``pending``."""
        self.pending = self.pending[len(ids):]

    @property
    def prefilling(self) -> bool:
        """Feeding its prompt now (not waiting for another's prefill, not finished)."""
        return not (self.finished or self.prompt_done or self.waiting_for is not None)

    def _new_cache(self, model: SteppedModel) -> Any:
        if self.request.loras and is_lora_model(model):  # check_loras refused adapters a model cannot apply
            return model.new_cache(loras=self.request.loras)
        return model.new_cache()

    @property
    def kv_tokens(self) -> int:
        """Tokens of ``ids`` whose KV is in the cache (everything fed so far)."""
        return len(self.ids) - len(self.pending)

    def queue_expired(self, t: float) -> bool:
        limit = self.request.queue_timeout
        return limit is not None and t - self.submitted > limit

    def time_expired(self, t: float) -> bool:
        limit = self.request.timeout
        return limit is not None and t - self.admitted > limit

    def ready_to_sample(self) -> Sampler:
        """This step's sampler, with CFG's negative-prompt logits for the step set."""
        if self.guide is not None:
            self.sampler.context.guidance = self.guide.logits
        return self.sampler

    def step(self, choice: TokenChoice) -> FinishReason | None:
        """(Engine thread.) Take the token the sampling stage drew for this sequence: "stop" when it is an
        end-of-sequence token, "length" when it was the last one allowed (either way the sequence's caches are
        released), else None. Its text and stop strings are the output thread's (``emit``)."""
        token = choice.token_id
        self.ids.append(token)
        if self.guide is not None:
            self.guide.pending = [token]
        self.pending = [token]
        self.prompt_done = True
        self.completion_tokens += 1
        self.mark_first_token()
        finish: FinishReason | None = None
        if token in self._started().tokenizer.eos_token_ids and (not self.request.params.ban_eos
                                                             or self.sampler.grammar_done):
            finish = "stop"
        elif self.completion_tokens >= self.max_new:
            finish = "length"
        if finish is not None:
            self.release()
        return finish

    def output(self, choice: TokenChoice | None, finish: FinishReason | None, error: str | None = None,
               exc: BaseException | None = None) -> Output:
        """(Engine thread.) What the output thread is handed: this step's token (``choice``, and ``finish`` when
        the sequence ended with it), or the sequence's end (``choice`` None)."""
        return Output(self, choice, finish, self.guide.fed if self.guide else 0, error, exc)

    def release(self) -> None:
        """(Engine thread.) The sequence leaves the batch: its caches go back to the model."""
        self.finished = True
        if self.model is not None:
            for cache in (self.cache, self.guide.cache if self.guide else None):
                if cache is not None:
                    self.model.release(cache)
        self.cache = None
        if self.guide is not None:
            self.guide.cache = None

    def emit(self, out: Output) -> None:
        """(Output thread.) Put ``out``'s event on the stream: a token's text, cut at the first stop string (which
        ends the stream here), or the final event. Nothing once the stream has ended."""
        if self.stream_ended:
            return
        self.guide_fed = out.guide_fed
        choice, finish = out.choice, out.finish
        if choice is None:
            self.stream.put(self.finish(finish or "error", error=out.error), out.exc)
            return
        self.emitted += 1
        text = ""
        if finish != "stop":  # an end-of-sequence token has no text
            text, stopped = self.stops.feed(self.detokenizer().add(choice.token_id))
            if stopped:
                finish = "stop"
        event = GenerationEvent(self.request.request_id, token_ids=[choice.token_id],
                                logprobs=self._logprobs(choice), seed=self.seed)
        if finish is not None:
            self.stream.put(self.finish(finish, event, text))
            return
        event.text = text
        self.stream.put(event)

    def detokenizer(self) -> IncrementalDetokenizer:
        """(Output thread.) The output's detokenizer, made on first use (it decodes the prompt's last tokens)."""
        if self._detok is None:
            skip = self.request.params.skip_special_tokens
            decode = self._started().tokenizer.decode
            self._detok = IncrementalDetokenizer(lambda ids: decode(ids, skip_special_tokens=skip), self.prompt_ids[-8:])
        return self._detok

    def fail_stream(self, exc: BaseException) -> None:
        """(Output thread.) Building an event failed: the request ends with that error."""
        if not self.stream_ended:
            self.stream.put(self.finish("error", error=str(exc) or type(exc).__name__), exc)

    def finish(self, reason: FinishReason, event: GenerationEvent | None = None, text: str = "",
               error: str | None = None, usage: Usage | None = None) -> GenerationEvent:
        """The final event (output or relay thread): flush held-back text (not on errors) and attach usage and
        timings. ``usage``: what a relayed request's backend reported (else counted here)."""
        self.stream_ended = True
        event = event or GenerationEvent(self.request.request_id, seed=self.seed)
        if self.model is not None and error is None and not self.stops.matched:
            tail, stopped = self.stops.feed(self.detokenizer().flush())
            text += tail if stopped else tail + self.stops.flush()
        event.text = text
        event.finish_reason, event.error = reason, error
        event.stop_string = self.stops.matched
        event.usage = usage or Usage(len(self.prompt_ids), self.emitted, self.cached_tokens, self.guide_fed)
        event.timings = self.timings(event.usage.completion_tokens)
        return event

    def _started(self) -> SteppedModel:
        """The model ``start`` bound (only a started sequence steps)."""
        if self.model is None:
            raise RuntimeError("the sequence was not started")
        return self.model

    def timings(self, completion_tokens: int) -> Timings:
        end = now()
        gen_time = end - self.admitted
        return Timings(queue=self.admitted - self.submitted,
                       first_token=None if self.first_token is None else self.first_token - self.submitted,
                       total=end - self.submitted,
                       tokens_per_second=completion_tokens / gen_time if gen_time > 0 else 0.0)

    def _logprobs(self, choice: TokenChoice) -> list[TokenLogprob]:
        if choice.logprob is None:
            return []
        tok = self._started().tokenizer
        top = choice.top or []
        strings = tok.token_strings([choice.token_id] + [i for i, _ in top])
        return [TokenLogprob(choice.token_id, strings[0], choice.logprob,
                             [(i, s, lp) for (i, lp), s in zip(top, strings[1:])], choice.logprob_after,
                             choice.top_after or [])]
