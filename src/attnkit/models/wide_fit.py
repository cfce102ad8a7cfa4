"""Fitting the n-gram half (:class:`attnkit.models.ngram_half.NgramHalf`) from its training documents.

:func:`frequent_bigrams` chooses the bigrams that get rows of the table;
:func:`ngram_counts` then reads the documents once, through the model's own
padding and n-gram features (so that what is fitted is what
:meth:`NgramHalf.wide_logits` reads), into a sparse document x n-gram
count matrix; :func:`naive_bayes_ratios` counts the classes from it and
:func:`fit_nb_regression` fits the logistic regression on the naive-Bayes-scaled
features (NB-LR; Wang and Manning, 2012) whose weights become the table.
After training, :func:`fit_stacking_weights` weighs the two halves on the
validation part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from attnkit.models.ngram_half import NgramHalf

__all__ = ["WIDE_C", "NO_KEY", "frequent_bigrams", "ngram_counts", "naive_bayes_ratios", "fit_nb_regression",
           "fit_stacking_weights", "STACKING_BOUNDS", "LBFGS_HISTORY", "FIT_TABLES", "fit_bytes"]

WIDE_C = 10.0
"""Inverse L2 strength of the wide half's logistic regression (``C`` of scikit-learn's summed loss)."""
NO_KEY = torch.iinfo(torch.int64).max
"""The free places of the bigram key buffer, sorted last."""
LBFGS_HISTORY = 100
"""Correction pairs the wide half's L-BFGS keeps (torch's default); each pair holds two ``(S, C)`` float64
tables, so the fit needs up to :data:`FIT_TABLES` such tables (:func:`fit_bytes`)."""
FIT_TABLES = 2 * LBFGS_HISTORY + 8
"""``(S, C)`` float64 tables alive at the fit's peak: the history, the ratios, ``U`` and its gradient, the
scaled table and its gradient, L-BFGS's direction and previous gradient."""
STACKING_BOUNDS = (1e-3, 1e3)
"""The range of each weight :func:`fit_stacking_weights` may return."""


def fit_bytes(rows: int, num_classes: int, tokens: int) -> int:
    """Bytes :meth:`NgramHalf.init_from_training_data` allocates at most beside the table, for ``rows``
    table rows (vocabulary plus bigram rows), ``num_classes`` classes and ``tokens`` training tokens.

    The count matrix has at most ``2 * tokens`` entries (a document of ``T`` tokens has ``2T - 1``
    n-grams), each two int64 indices and a float64 value, held twice (the counts and the scaled
    features); the regression holds :data:`FIT_TABLES` ``(rows, C)`` float64 tables.
    """
    return 2 * (2 * tokens) * 24 + FIT_TABLES * rows * num_classes * 8


def frequent_bigrams(model: NgramHalf, documents: Sequence[Sequence[int]], chunk: int) -> Tensor:
    """The sorted keys of the model's ``R`` bigram rows: the bigrams in the most documents, then free places."""
    vocab, rows = model._ngram_vocab, model._ngram_rows
    found = []
    for start in range(0, len(documents), chunk):
        ids, _, mask = model._padded(documents[start : start + chunk])
        pairs = mask[:, 0, 0, :-1] & mask[:, 0, 0, 1:]  # (B, T-1)
        key = ids[:, :-1] * vocab + ids[:, 1:]  # (B, T-1)
        doc = torch.arange(ids.shape[0])[:, None].expand_as(key)
        span = vocab * vocab  # keys lie in [0, V^2): one number per (doc, bigram), made unique
        found.append(torch.unique(doc[pairs] * span + key[pairs]) % span)
    keys, docs = torch.cat(found).unique(return_counts=True) if found else (torch.zeros(0, dtype=torch.long),) * 2
    if keys.numel() > rows:  # most documents first, then the smaller key (stable sort)
        keys = keys[torch.sort(docs, descending=True, stable=True).indices[:rows]].sort().values
    out = torch.full((rows,), NO_KEY, dtype=torch.long)
    out[: keys.numel()] = keys
    return out


def ngram_counts(model: NgramHalf, documents: Sequence[Sequence[int]], chunk: int) -> Tensor:
    """How often each of the model's n-gram rows occurs in each document: the one pass both fits read.

    Shape:
        returns a coalesced sparse ``(N, V + R)`` float64 tensor; a row sums
        to the document's n-gram count, the count :meth:`NgramHalf.wide_logits` divides by.
    """
    size = (len(documents), model._ngram_vocab + model._ngram_rows)
    index, values = [torch.zeros(2, 0, dtype=torch.long)], [torch.zeros(0, dtype=torch.float64)]
    for start in range(0, len(documents), chunk):  # each chunk's repeats added up at once: its documents only
        ids, _, mask = model._padded(documents[start : start + chunk])
        feats, real = model._features(ids, mask)  # (B, F)
        flat = (torch.arange(start, start + ids.shape[0])[:, None] * size[1] + feats)[real]
        keys, counts = torch.unique(flat, return_counts=True)  # sorted: by document, then n-gram
        index.append(torch.stack([keys // size[1], keys % size[1]]))
        values.append(counts.to(torch.float64))
    out = torch.sparse_coo_tensor(torch.cat(index, 1), torch.cat(values), size, check_invariants=False)
    return out._coalesced_(True)  # chunks hold disjoint, ascending documents


def naive_bayes_ratios(counts: Tensor, labels: Sequence[int], num_classes: int, alpha: float) -> Tensor:
    """Centred naive Bayes log-probabilities of each n-gram row from binarised ``counts`` (see
    :meth:`NgramHalf.naive_bayes_table`).

    Shape:
        counts: sparse ``(N, S)`` from :func:`ngram_counts`; returns ``(S, C)`` float64.
    """
    doc, row = counts.indices()  # one entry per (document, n-gram): binarised
    classes = torch.as_tensor(list(labels), dtype=torch.long)[doc]
    size = counts.shape[1]
    per_class = torch.zeros(num_classes * size, dtype=torch.float64)
    per_class.index_add_(0, classes * size + row, torch.ones(row.numel(), dtype=torch.float64))
    per_class = per_class.view(num_classes, size)  # (C, S)
    seen = per_class.sum(0) > 0  # (S,)
    logp = ((per_class + alpha) / (per_class + alpha * seen).sum(1, keepdim=True)).log()
    return ((logp - logp.mean(0, keepdim=True)) * seen).T  # (S, C)


def fit_nb_regression(counts: Tensor, labels: Sequence[int], ratios: Tensor,
                      class_weights: Sequence[float] | None = None) -> tuple[Tensor, Tensor]:
    """Logistic regression on the naive-Bayes-scaled n-gram features: the table ``ratios * U`` and a bias.

    ``x`` holds each document's n-gram counts over the square root of its
    n-gram count (what :meth:`NgramHalf.wide_logits` reads); ``U`` and
    the bias minimise ``mean CE(x (ratios * U) + bias) + |U|^2 / (2 WIDE_C N)``
    (full batch, L-BFGS), so an n-gram never seen keeps weight zero. With
    ``class_weights`` (one per class) the cross-entropy is their weighted mean
    (:func:`attnkit.train.objective.class_weights`).

    Shape:
        counts sparse ``(N, S)`` (:func:`ngram_counts`), ratios ``(S, C)``; returns ``(S, C)`` and ``(C,)``.
    """
    doc, _ = counts.indices()
    norm = torch.zeros(counts.shape[0], dtype=torch.float64).index_add_(0, doc, counts.values())
    x = torch.sparse_coo_tensor(counts.indices(), counts.values() * norm.clamp_min(1).rsqrt()[doc], counts.shape,
                                check_invariants=False)  # (N, S), rows of unit length for binary counts
    target = torch.as_tensor(list(labels), dtype=torch.long)
    ratios = ratios.contiguous()
    u = torch.zeros(ratios.shape, dtype=ratios.dtype, requires_grad=True)  # (S, C)
    bias = torch.zeros(ratios.shape[1], dtype=ratios.dtype, requires_grad=True)
    penalty = 1.0 / (2 * WIDE_C * counts.shape[0])
    weight = _class_weights(class_weights, ratios.shape[1], ratios.dtype)
    opt = torch.optim.LBFGS([u, bias], max_iter=300, tolerance_grad=1e-6, history_size=LBFGS_HISTORY,
                            line_search_fn="strong_wolfe")

    def loss() -> Tensor:
        opt.zero_grad()
        value = nn.functional.cross_entropy(torch.sparse.mm(x, ratios * u) + bias, target, weight=weight)
        value = value + penalty * (u * u).sum()
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)  # type: ignore[arg-type]
    return (ratios * u).detach(), bias.detach()


def _class_weights(weights: Sequence[float] | None, num_classes: int, dtype: torch.dtype) -> Tensor | None:
    if weights is None:
        return None
    if len(weights) != num_classes:
        raise ValueError(f"class_weights must hold one weight per class ({num_classes}), got {len(weights)}")
    return torch.as_tensor(list(weights), dtype=dtype)


def fit_stacking_weights(deep: Tensor, wide: Tensor, labels: Sequence[int],
                         class_weights: Sequence[float] | None = None) -> tuple[float, float]:
    """Weights ``a, b > 0`` of the sum ``a * deep + b * wide`` with the least cross-entropy on held-out documents.

    Stacking with two weights (Wolpert, 1992): ``a`` is the deep half's
    temperature -- trained to fit its own training part, its logits are
    overconfident on new documents -- and ``b`` the wide half's, so the sum
    gives calibrated probabilities as well as a data-chosen balance. Fitted by
    L-BFGS over ``log a`` and ``log b`` with a unit normal prior on each (as
    one document's worth of evidence: it keeps them finite when the held-out
    documents are separable), each then held within :data:`STACKING_BOUNDS`.
    With ``class_weights`` (one per class) the cross-entropy is their weighted
    mean (:func:`attnkit.train.objective.stacking_weights`).

    Shape:
        deep, wide ``(N, C)`` logits of the two halves; labels ``N`` class indices; returns ``(a, b)``.
    """
    if deep.shape != wide.shape or deep.dim() != 2 or deep.shape[0] != len(labels) or not len(labels):
        raise ValueError(f"need (N, C) logits of both halves for N > 0 labelled documents, got {tuple(deep.shape)}, "
                         f"{tuple(wide.shape)} and {len(labels)} labels")
    d, w = deep.detach().double(), wide.detach().double()
    target = torch.as_tensor(list(labels), dtype=torch.long)
    lo, hi = (math.log(x) for x in STACKING_BOUNDS)
    log_w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    weight = _class_weights(class_weights, d.shape[1], d.dtype)
    opt = torch.optim.LBFGS([log_w], max_iter=200, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def loss() -> Tensor:
        opt.zero_grad()
        a, b = log_w.exp()
        value = nn.functional.cross_entropy(a * d + b * w, target, weight=weight) + (log_w * log_w).sum() / (2 * len(target))
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)  # type: ignore[arg-type]
    a, b = log_w.detach().clamp(lo, hi).exp().tolist()
    return float(a), float(b)
