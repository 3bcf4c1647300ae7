"""Embeddings from a transformers network: inputs padded into batches, hidden states pooled, vectors L2-normalised.

One computation for every model that embeds: an LLM's last hidden states mean-pooled over its tokens
(TransformersModel), or a sentence-embedding model's as its folder says (mean or CLS pooling).
torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal, Sequence

if TYPE_CHECKING:
    import torch

Pooling = Literal["mean", "cls", "last"]
POOLINGS: tuple[Pooling, ...] = ("mean", "cls", "last")
EMBED_BATCH = 16
"""Inputs per forward: enough to batch, few enough that padding stays cheap."""


def pool(hidden: "torch.Tensor", mask: "torch.Tensor", mode: Pooling) -> "torch.Tensor":
    """[batch, tokens, size] hidden states -> [batch, size]: the mean over the tokens the mask keeps, the first
    token's (CLS), or the last kept token's (inputs are right-padded)."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "last":
        last = mask.sum(1).long() - 1
        return hidden[range(hidden.shape[0]), last]
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


def embed_batched(hidden_states: Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"],
                  inputs: Sequence[Sequence[int]], pad_id: int, device: str, mode: Pooling) -> list[list[float]]:
    """One L2-normalised vector per input. ``hidden_states(input_ids, attention_mask)`` runs the network on a
    right-padded batch and gives its last hidden states; inputs of similar length go in one batch (sorted by
    length, so little padding), without gradients."""
    import torch

    if any(not ids for ids in inputs):
        raise ValueError("an input to embed has no tokens")
    order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
    out: list[list[float]] = [[] for _ in inputs]
    with torch.inference_mode():
        for start in range(0, len(order), EMBED_BATCH):
            chosen = order[start:start + EMBED_BATCH]
            width = max(len(inputs[i]) for i in chosen)
            ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chosen), width), dtype=torch.long)
            for row, i in enumerate(chosen):
                ids[row, :len(inputs[i])] = torch.tensor(list(inputs[i]), dtype=torch.long)
                mask[row, :len(inputs[i])] = 1
            ids, mask = ids.to(device), mask.to(device)
            pooled = pool(hidden_states(ids, mask).float(), mask, mode)
            vectors = torch.nn.functional.normalize(pooled, p=2, dim=-1).cpu().tolist()
            for row, i in enumerate(chosen):
                out[i] = vectors[row]
    return out
