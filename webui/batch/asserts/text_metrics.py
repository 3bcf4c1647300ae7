"""Reference metrics for promptfoo's asserts: BLEU, GLEU, ROUGE-N, Levenshtein distance and perplexity.

Each is a port of what promptfoo 0.115 computes, so a threshold passes here
when it passes there:

- :func:`bleu` and :func:`gleu` follow promptfoo's own TypeScript
  (src/assertions/bleu.ts, gleu.ts): lower-cased words split on whitespace,
  n-grams of 1 to 4; BLEU with uniform weights, a brevity penalty against the
  reference closest in length and zero precisions smoothed to 1e-7; GLEU the
  minimum of n-gram precision and recall (words lose trailing dots), the best
  over the references.
- :func:`rouge_n` is js-rouge's ``n()`` as promptfoo calls it (no options:
  unigrams, F1, case-sensitive) on its sentences' Penn Treebank tokens
  (ported in webui.batch.asserts.rouge_tokens).
- :func:`levenshtein` is the plain edit distance (fastest-levenshtein in
  promptfoo, rapidfuzz here: the same number).
- :func:`perplexity` is exp of minus the mean of the chosen tokens' logprobs.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from rapidfuzz.distance import Levenshtein

from webui.batch.asserts.rouge_tokens import sentences, treebank_tokens

BLEU_N = 4
ZERO_PRECISION = 1e-7  # promptfoo's smoothing of a zero n-gram precision in BLEU


def levenshtein(a: str, b: str) -> int:
    """The edit distance between two texts (insertions, deletions and substitutions of characters)."""
    return int(Levenshtein.distance(a, b))


def _ngrams(words: Sequence[str], n: int) -> list[str]:
    """promptfoo's getNGrams: contiguous n-grams as space-joined text, none when n exceeds the words."""
    return [] if n <= 0 or n > len(words) else [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]


def _words(text: str) -> list[str]:
    """JavaScript's ``text.toLowerCase().trim().split(/\\s+/)``: one empty word for an empty text."""
    return re.split(r"\s+", text.lower().strip())


def bleu(candidate: str, references: Sequence[str]) -> float:
    """promptfoo's BLEU of ``candidate`` against the references, in [0, 1]."""
    if not candidate or not references:
        raise ValueError("bleu needs a non-empty output and at least one reference")
    words = _words(candidate)
    ref_words = [_words(ref) for ref in references]
    closest = ref_words[0]
    for ref in ref_words[1:]:
        if abs(len(ref) - len(words)) < abs(len(closest) - len(words)):
            closest = ref
    log_sum = 0.0
    for n in range(1, BLEU_N + 1):
        grams = _ngrams(words, n)
        counts = Counter(grams)
        clipped = max(sum(min(c, Counter(_ngrams(ref, n))[g]) for g, c in counts.items()) for ref in ref_words)
        precision = clipped / len(grams) if grams else 0.0
        log_sum += math.log(precision or ZERO_PRECISION) / BLEU_N
    penalty = 1.0 if len(words) > len(closest) else math.exp(1 - len(words) / len(closest))
    return penalty * math.exp(log_sum)


def gleu(candidate: str, references: Sequence[str], min_n: int = 1, max_n: int = 4) -> float:
    """promptfoo's GLEU (Google-BLEU): min(n-gram precision, recall) over n in [min_n, max_n], the best over
    the references; 0 for an empty output."""
    if not references:
        raise ValueError("gleu needs at least one reference")
    if not candidate.strip():
        return 0.0
    words = [re.sub(r"\.+$", "", w) for w in _words(candidate)]
    scores = []
    for reference in references:
        ref = [re.sub(r"\.+$", "", w) for w in _words(reference)]
        if ref == words:
            scores.append(1.0)
            continue
        matches = total = ref_total = 0
        for n in range(min_n, max_n + 1):
            grams, ref_grams = _ngrams(words, n), _ngrams(ref, n)
            ref_counts = Counter(ref_grams)
            matches += sum(min(c, ref_counts[g]) for g, c in Counter(grams).items())
            total, ref_total = total + len(grams), ref_total + len(ref_grams)
        scores.append(0.0 if not total or not ref_total else min(matches / total, matches / ref_total))
    return max(scores)


# -- ROUGE-N (js-rouge) -------------------------------------------------------------------------------


def rouge_n(candidate: str, reference: str, n: int = 1) -> float:
    """js-rouge's ROUGE-N F1 of ``candidate`` against ``reference`` (case-sensitive), in [0, 1]."""
    if not candidate.strip() or not reference.strip():
        raise ValueError("rouge-n needs a non-empty output and reference")

    def grams(text: str) -> list[tuple[str, ...]]:
        tokens = [t for s in sentences(text) for t in treebank_tokens(s)]
        return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]

    cand, ref = grams(candidate), grams(reference)
    left, matches = Counter(ref), 0
    for gram in cand:
        if left[gram] > 0:
            matches, left[gram] = matches + 1, left[gram] - 1
    if not matches:
        return 0.0
    precision, recall = matches / len(cand), matches / len(ref)
    return precision if precision == recall else 2 * precision * recall / (precision + recall)


def perplexity(logprobs: Sequence[float]) -> float:
    """exp(-mean logprob) of the chosen tokens: 1 for a model sure of every token, larger the less sure."""
    if not logprobs:
        raise ValueError("perplexity needs the output's token logprobs")
    return math.exp(-sum(logprobs) / len(logprobs))
