"""Why the model says what it says: the prompt as the model sees it, and the next-token distribution.

Both go through the engine's scheduler thread (``Engine.call_between_steps``),
so they never race a running batch for the model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from loaders.base import LoadedModel, SteppedModel, is_stepped
from webui.chat import chat_messages, render_chat_prompt
from webui.chat.modes import ChatMode
from webui.chat.templates import ChatTemplate
from webui.engine import Engine, EngineError, SamplingParams
from webui.engine.sampling import Sampler
from webui.engine.sequence import guide_prompt
from webui.engine.types import GenerationRequest, TokenLogprob


class InsightUnavailable(EngineError):
    pass


@dataclass(frozen=True)
class PromptInspection:
    text: str  # exactly what the model reads (after the chat template, if one was applied)
    ids: list[int]
    tokens: list[str]
    context_length: int

    @property
    def used(self) -> float:
        return len(self.ids) / self.context_length if self.context_length else 0.0


@dataclass(frozen=True)
class NextToken:
    token_id: int
    token: str
    probability: float  # under the model's raw distribution
    after: float  # after the sampling processors (0 where they cut the token)
    kept: bool  # whether the current parameters could still pick it
    masked: bool = False  # the output constraint (structured_outputs) does not allow it here


def _local(model: LoadedModel | None) -> SteppedModel:
    """``model``, which must give logits (the next-token views, perplexity)."""
    model = _tokenizing(model)
    if not is_stepped(model):
        raise InsightUnavailable(f"the {model.loader} loader gives no logits; load a local model")
    return model


def _tokenizing(model: LoadedModel | None) -> LoadedModel:
    """``model``, whose tokenizer must work here (a prompt as tokens)."""
    if model is None:
        raise InsightUnavailable("no model is loaded; load one in the Model tab")
    if not model.capabilities.tokenizes:
        raise InsightUnavailable(f"the {model.loader} loader gives no token ids; load a local model")
    return model


def prompt_text(model: LoadedModel, text: str, chat: bool, system_prompt: str = "",
                mode: ChatMode | None = None, template: ChatTemplate | None = None) -> str:
    """``text`` as the model reads it: as it is, or (``chat``) as a user message in ``mode`` (None: instruct) with
    ``template`` (None: the model's own)."""
    if not chat:
        return text
    return render_chat_prompt(model.tokenizer, chat_messages([{"role": "user", "content": text}], system_prompt),
                              template=template, mode=mode)


def inspect_prompt(model: LoadedModel | None, text: str, chat: bool, system_prompt: str = "",
                   mode: ChatMode | None = None, template: ChatTemplate | None = None) -> PromptInspection:
    model = _tokenizing(model)
    return inspect_rendered(model, prompt_text(model, text, chat, system_prompt, mode, template),
                            add_special_tokens=not chat)


def inspect_rendered(model: LoadedModel | None, rendered: str, add_special_tokens: bool) -> PromptInspection:
    """The inspection of text the model reads as it is (a chat already rendered with its template, or raw)."""
    model = _tokenizing(model)
    ids = model.tokenizer.encode(rendered, add_special_tokens=add_special_tokens)
    return PromptInspection(rendered, ids, model.tokenizer.token_strings(ids), model.context_length)


def next_tokens(engine: Engine, text: str, chat: bool, params: SamplingParams, top: int = 20,
                system_prompt: str = "", add_special_tokens: bool | None = None) -> list[NextToken]:
    """The ``top`` most likely next tokens, with what ``params`` would do to each (``add_special_tokens``: for
    text read as it is, e.g. a chat the caller rendered; None: unless ``chat``)."""
    model = _local(engine.model)
    if add_special_tokens is None:
        add_special_tokens = not chat
        inspection = inspect_prompt(model, text, chat, system_prompt)
    else:
        inspection = inspect_rendered(model, text, add_special_tokens)
    if not inspection.ids:
        raise InsightUnavailable("the text is empty; type something to look at what comes next")

    logits = engine.call_between_steps(lambda: model.logits(inspection.ids).float())
    sampler = Sampler(params, sorted(model.tokenizer.eos_token_ids), len(inspection.ids), 0, model.tokenizer)
    if params.guidance_scale != 1.0:  # CFG: the negative prompt's distribution, as a reply would have it
        request = GenerationRequest(text, params, add_special_tokens=add_special_tokens)
        negative = guide_prompt(model, request, inspection.ids)
        sampler.context.guidance = engine.call_between_steps(lambda: model.logits(negative).float())
    processed = sampler.process(inspection.ids, logits)
    raw = logits.softmax(-1)
    after = sampler.distribution(processed).exp()  # the same computation as each generated token's
    constraint = dict(sampler.processors).get("structured_outputs")
    allowed = torch.isfinite(constraint(inspection.ids, logits.clone())) if constraint else None
    values, ids = torch.topk(raw, top)
    strings = model.tokenizer.token_strings(ids.tolist())
    return [NextToken(int(i), s, float(p), float(after[i]), bool(after[i] > 0),
                      allowed is not None and not bool(allowed[i]))
            for i, s, p in zip(ids.tolist(), strings, values.tolist())]


def prompt_logprobs(engine: Engine, ids: list[int], top: int, loras: tuple = ()
                    ) -> list[tuple[str, TokenLogprob | None]]:
    """Each prompt token's text and its log-probability given the tokens before it, with the ``top`` most likely
    there (the first token has none: None). Run between engine steps."""
    model = _local(engine.model)
    strings = model.tokenizer.token_strings(ids)
    if len(ids) < 2:
        return [(t, None) for t in strings]
    logits = engine.call_between_steps(lambda: model.logits(ids[:-1], last_only=False, loras=loras))
    logp = torch.log_softmax(logits.float(), -1)
    chosen = logp.gather(1, torch.tensor(ids[1:], dtype=torch.long, device=logp.device)[:, None])[:, 0].tolist()
    out: list[tuple[str, TokenLogprob | None]] = [(strings[0], None)]
    for i, (token_id, value) in enumerate(zip(ids[1:], chosen)):
        alternatives = []
        if top:
            values, top_ids = torch.topk(logp[i], top)
            alternatives = list(zip(top_ids.tolist(), model.tokenizer.token_strings(top_ids.tolist()),
                                    values.tolist()))
        out.append((strings[i + 1], TokenLogprob(token_id, strings[i + 1], value, alternatives)))
    return out


def reply_logprobs(engine: Engine, prompt_ids: list[int], reply_ids: list[int], params: SamplingParams, top: int,
                   loras: tuple = ()) -> list[TokenLogprob]:
    """Each reply token with its probability under the model and under what ``params`` sampled it from (the
    processors replayed over the reply as generation ran them, each token observed after its step), with the
    ``top`` raw alternatives and theirs after the processors. CFG's negative prompt is not replayed: a request with
    guidance gets its raw probabilities only. Run between engine steps."""
    model = _local(engine.model)
    if not reply_ids:
        return []
    ids = [*prompt_ids, *reply_ids]
    logits = engine.call_between_steps(lambda: model.logits(ids[:-1], last_only=False, loras=loras)).float()
    logits = logits[len(prompt_ids) - 1:]
    sampler = None if params.guidance_scale != 1.0 else \
        Sampler(params, sorted(model.tokenizer.eos_token_ids), len(prompt_ids), params.seed or 0, model.tokenizer)
    strings = model.tokenizer.token_strings(reply_ids)
    out = []
    for i, token in enumerate(reply_ids):
        logp = torch.log_softmax(logits[i], -1)
        values, top_ids = torch.topk(logp, top) if top else (logp[:0], torch.zeros(0, dtype=torch.long))
        after: torch.Tensor | None = None
        if sampler is not None:
            after = sampler.distribution(sampler.process(ids[:len(prompt_ids) + i], logits[i]))
            for observer in sampler.observers:  # mirostat, adaptive-p and grammars move on with the chosen token
                observer.observe(token)
        out.append(TokenLogprob(
            token, strings[i], float(logp[token]),
            list(zip(top_ids.tolist(), model.tokenizer.token_strings(top_ids.tolist()), values.tolist())),
            None if after is None else float(after[token]), [] if after is None else after[top_ids].tolist()))
    return out


@dataclass(frozen=True)
class Perplexity:
    tokens: int  # tokens scored
    nll: float  # mean negative log-likelihood per token
    window: int

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)


def perplexity(engine: Engine, text: str, window: int = 512, loras: tuple = (),
               progress: Callable[[float, str], None] | None = None) -> Perplexity:
    """Perplexity of the loaded model (with ``loras``) on ``text``, in non-overlapping windows.

    Each window runs between engine steps, so chats and batches keep going meanwhile.
    """
    ids = _local(engine.model).tokenizer.encode(text, add_special_tokens=True)
    if len(ids) < 2:
        raise InsightUnavailable("the text is too short; perplexity needs at least two tokens")
    return sequences_perplexity(engine, [(ids, ids)], window, loras, progress)


def sequences_perplexity(engine: Engine, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], window: int = 512,
                         loras: tuple = (), progress: Callable[[float, str], None] | None = None) -> Perplexity:
    """Perplexity over several token sequences (each ``(input ids, labels)``; a label below 0 is not scored, as
    training's -100), each read in non-overlapping windows between engine steps."""
    model = _local(engine.model)
    window = max(2, min(window, model.context_length or window))
    spans = [(ids, labels, start) for ids, labels in sequences for start in range(0, len(ids) - 1, window)]
    wanted = sum(1 for _, labels in sequences for label in labels[1:] if label >= 0)
    total, count = 0.0, 0
    for n, (ids, labels, start) in enumerate(spans):
        chunk = list(ids[start:start + window + 1])  # +1: the last token of a window is predicted, too
        logits = engine.call_between_steps(functools.partial(model.logits, chunk[:-1], last_only=False, loras=loras))
        logp = torch.log_softmax(logits.float(), -1)
        targets = torch.tensor(labels[start + 1:start + len(chunk)], dtype=torch.long, device=logp.device)
        scored = targets >= 0
        total -= float(logp[scored].gather(1, targets[scored][:, None]).sum())
        count += int(scored.sum())
        if progress:
            progress((n + 1) / len(spans), f"{count}/{wanted} tokens")
    if not count:
        raise InsightUnavailable("there is nothing to score; perplexity needs at least two tokens")
    return Perplexity(count, total / count, window)
