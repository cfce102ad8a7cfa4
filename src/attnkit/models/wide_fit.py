"""Fitting the wide half of :class:`attnkit.models.wide.WideDeepClassifier` from its training documents.

:func:`frequent_bigrams` chooses the bigrams that get rows of the table;
:func:`fit_nb_regression` fits the logistic regression on the naive-Bayes-scaled
n-gram features (NB-LR; Wang and Manning, 2012) whose weights become the table.
Both read documents through the model's own padding and n-gram features, so
that what is fitted is what :meth:`WideDeepClassifier.wide_logits` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from attnkit.models.wide import WideDeepClassifier

__all__ = ["WIDE_C", "NO_KEY", "frequent_bigrams", "fit_nb_regression"]

WIDE_C = 10.0
"""Inverse L2 strength of the wide half's logistic regression (``C`` of scikit-learn's summed loss)."""
NO_KEY = torch.iinfo(torch.int64).max
"""The free places of the bigram key buffer, sorted last."""


def frequent_bigrams(model: WideDeepClassifier, documents: Sequence[Sequence[int]], chunk: int) -> Tensor:
    """The sorted keys of the ``ngram_buckets`` bigrams in the most documents, padded with free places."""
    c = model.config
    found = []
    for start in range(0, len(documents), chunk):
        ids, _, mask = model._padded(documents[start : start + chunk])
        pairs = mask[:, 0, 0, :-1] & mask[:, 0, 0, 1:]  # (B, T-1)
        key = ids[:, :-1] * c.vocab_size + ids[:, 1:]  # (B, T-1)
        doc = torch.arange(ids.shape[0])[:, None].expand_as(key)
        per_doc = torch.stack([doc[pairs], key[pairs]]).unique(dim=1)  # (2, pairs): one per (doc, bigram)
        found.append(per_doc[1])
    keys, docs = torch.cat(found).unique(return_counts=True) if found else (torch.zeros(0, dtype=torch.long),) * 2
    if keys.numel() > c.ngram_buckets:  # most documents first, then the smaller key (stable sort)
        keys = keys[torch.sort(docs, descending=True, stable=True).indices[: c.ngram_buckets]].sort().values
    out = torch.full((c.ngram_buckets,), NO_KEY, dtype=torch.long)
    out[: keys.numel()] = keys
    return out


def fit_nb_regression(model: WideDeepClassifier, documents: Sequence[Sequence[int]], labels: Sequence[int],
                      ratios: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """Logistic regression on the naive-Bayes-scaled n-gram features: the table ``ratios * U`` and a bias.

    ``x`` holds each document's n-gram counts over the square root of its
    feature count (what :meth:`WideDeepClassifier.wide_logits` reads); ``U`` and the bias
    minimise ``mean CE(x (ratios * U) + bias) + |U|^2 / (2 WIDE_C N)``
    (full batch, L-BFGS), so an n-gram never seen keeps weight zero.
    ``ratios`` ``(V + buckets, C)``; returns the table and the bias ``(C,)``.
    """
    rows, cols, vals = [], [], []
    for start in range(0, len(documents), chunk):
        ids, _, mask = model._padded(documents[start : start + chunk])
        feats, real = model._features(ids, mask)  # (B, F)
        norm = real.sum(1, keepdim=True).clamp_min(1).double().rsqrt().expand(feats.shape)  # (B, F)
        doc = torch.arange(start, start + ids.shape[0])[:, None].expand(feats.shape)  # (B, F)
        rows.append(doc[real])
        cols.append(feats[real])
        vals.append(norm[real])
    x = torch.sparse_coo_tensor(torch.stack([torch.cat(rows), torch.cat(cols)]), torch.cat(vals),
                                (len(documents), ratios.shape[0]), check_invariants=False)
    x = x.coalesce()  # (N, V + buckets): duplicates of an n-gram in a document add up
    target = torch.as_tensor(list(labels), dtype=torch.long)
    ratios = ratios.contiguous()
    u = torch.zeros(ratios.shape, dtype=ratios.dtype, requires_grad=True)  # (V + buckets, C)
    bias = torch.zeros(ratios.shape[1], dtype=ratios.dtype, requires_grad=True)
    penalty = 1.0 / (2 * WIDE_C * len(documents))
    opt = torch.optim.LBFGS([u, bias], max_iter=300, tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def loss() -> Tensor:
        opt.zero_grad()
        value = nn.functional.cross_entropy(torch.sparse.mm(x, ratios * u) + bias, target)
        value = value + penalty * (u * u).sum()
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)  # type: ignore[arg-type]
    return (ratios * u).detach(), bias.detach()
