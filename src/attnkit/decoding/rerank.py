"""Consensus re-ranking: choose among a search's n-best the hypothesis that agrees most with references.

A beam search ranks hypotheses by the model's probability alone. Consensus
re-ranking (Devlin et al., 2015, "Exploring Nearest Neighbor Approaches for
Image Captioning"; minimum Bayes risk decoding when the references are the
model's own samples) ranks each candidate ``h`` of the n-best list by::

    score(h) = consensus(h) + weight · log P(h | x)
    consensus(h) = mean over the references r of BLEU(h, r)

where ``BLEU(h, r)`` is the smoothed sentence BLEU of ``h`` against the one
reference ``r`` (:func:`sentence_bleu`: n-grams up to 4, add-one smoothing of
the 2..4-gram precisions, the brevity penalty against ``r``). A captioner's
references are the training captions of the images nearest to the input
(:class:`~attnkit.models.captioning.neighbours.NeighbourIndex`): a candidate
that says what people said of similar images wins over one that adds a
detail nobody mentions. ``weight`` keeps the model's say; with ``weight``
large the beam's order returns.

Everything here works on token ids (or any hashable tokens), never on text.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

__all__ = ["ngram_counts", "sentence_bleu", "consensus_scores", "consensus_pick", "check_weight"]

MAX_ORDER = 4
"""The longest n-gram :func:`sentence_bleu` counts."""


def ngram_counts(tokens: Sequence[Hashable], max_order: int = MAX_ORDER) -> list[Counter[tuple[Hashable, ...]]]:
    """The n-gram counts of ``tokens`` for n = 1 ... ``max_order`` (element ``n - 1`` holds the n-grams)."""
    tokens = tuple(tokens)
    return [Counter(tokens[i:i + n] for i in range(len(tokens) - n + 1)) for n in range(1, max_order + 1)]


def sentence_bleu(hyp: Sequence[Hashable], ref: Sequence[Hashable] | list[Counter[tuple[Hashable, ...]]], *,
                  ref_len: int | None = None, max_order: int = MAX_ORDER) -> float:
    """Smoothed sentence BLEU of ``hyp`` against one reference, in ``[0, 1]``.

    The clipped n-gram precisions up to ``max_order``, with one added to the
    matches and to the total of every order above 1 (sacreBLEU's ``add-k``
    smoothing with ``k = 1``), their geometric mean, times the brevity penalty
    ``exp(1 - |r| / |h|)`` when ``|h| < |r|``. An empty hypothesis scores 0.

    ``ref`` is the reference's tokens, or its :func:`ngram_counts` with
    ``ref_len`` (counting a reference once when it is compared with many hypotheses).
    """
    if not hyp:
        return 0.0
    ref_counts: list[Counter[tuple[Hashable, ...]]]
    if ref and isinstance(ref[0], Counter):
        if ref_len is None:
            raise ValueError("sentence_bleu needs ref_len when ref is given as n-gram counts")
        ref_counts, r = list(ref), ref_len  # type: ignore[arg-type]
    else:
        ref_counts, r = ngram_counts(ref, max_order), len(ref)  # type: ignore[arg-type]
    log_precision = 0.0
    for n, (hyp_grams, ref_grams) in enumerate(zip(ngram_counts(hyp, max_order), ref_counts, strict=True), start=1):
        total = sum(hyp_grams.values())
        matches = sum(min(count, ref_grams.get(gram, 0)) for gram, count in hyp_grams.items())
        if n > 1:
            matches, total = matches + 1, total + 1
        if matches == 0:
            return 0.0
        log_precision += math.log(matches / total)
    brevity = 1.0 if len(hyp) >= r else math.exp(1.0 - r / len(hyp))
    return brevity * math.exp(log_precision / max_order)


def consensus_scores(candidates: Sequence[Sequence[Hashable]], references: Sequence[Sequence[Hashable]]) -> list[float]:
    """``consensus(h)`` of each candidate: its mean :func:`sentence_bleu` against each reference.

    An empty ``references`` gives zeros (no evidence either way).
    """
    if not references:
        return [0.0] * len(candidates)
    counted = [(ngram_counts(ref), len(ref)) for ref in references]
    return [sum(sentence_bleu(hyp, counts, ref_len=r) for counts, r in counted) / len(counted)
            for hyp in candidates]


def check_weight(weight: object) -> float:
    """``weight`` of the log-probability beside the consensus: a finite number >= 0, else a ValueError."""
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight < math.inf:
        raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")
    return float(weight)


def consensus_pick(candidates: Sequence[Sequence[Hashable]], log_probs: Sequence[float],
                   references: Sequence[Sequence[Hashable]], *, weight: float) -> int:
    """The index of the candidate with the best ``consensus(h) + weight · log P(h)`` (the first on ties).

    ``log_probs`` are the candidates' summed log-probabilities; ``weight >= 0``.
    """
    if not candidates:
        raise ValueError("consensus_pick needs at least one candidate, got none")
    if len(log_probs) != len(candidates):
        raise ValueError(f"got {len(candidates)} candidates but {len(log_probs)} log-probabilities")
    check_weight(weight)
    scores = [c + weight * lp for c, lp in zip(consensus_scores(candidates, references), log_probs, strict=True)]
    return max(range(len(scores)), key=scores.__getitem__)
