"""The n-gram half: a logistic regression over word 1- and 2-grams, added to a classifier's own logits.

::

    f_b     = {ids_t} ∪ {(ids_t, ids_t+1)}                      the document's word 1- and 2-grams
    wide    = sum_{f in f_b} W[f] / sqrt(|f_b|) + b_w            (B, C)  W = R * U: NB-LR over the n-grams
    logits  = deep                 while training               (B, C)  the model's own logits alone
    logits  = deep + wide          to validate while training   (B, C)
    logits  = a deep + b wide      to predict                   (B, C)  a, b fitted on the validation part

A linear model over word n-grams reaches most of the accuracy of neural text
classifiers, and a logistic regression over 1-2-grams scaled by their naive
Bayes log-count ratios is among the strongest (Wang and Manning, 2012,
"Baselines and Bigrams": NBSVM). A neural classifier generalises over words
and their contexts in a way the counts cannot; the two err on different
documents, so their sum beats each -- the "wide and deep" idea of Cheng et
al. (2016), as a product of experts. :class:`NgramHalf` gives any
:class:`~attnkit.models.base.TextClassifier` with a final ``classifier``
layer such a half: :class:`~attnkit.models.wide.WideDeepClassifier` (the
default recipe) and :class:`~attnkit.models.bert_classifier.BertClassifier`
(the pretrained recipe) use it.

* **Fitted once, before training** (:meth:`NgramHalf.init_from_training_data`,
  called by :func:`attnkit.train.pipeline.fit_classifier` with the training
  part only), into buffers saved with the weights: each training bigram gets
  a row after the vocabulary (the ``rows`` found in the most documents when
  there are more); ``R`` holds the centred, smoothed naive Bayes
  log-probabilities of each n-gram (:meth:`NgramHalf.naive_bayes_table`) and
  ``U`` is the L2-regularised logistic regression on the ``R``-scaled
  features (:mod:`attnkit.models.ngram_half`).
* **Left out while the model trains**: fitted to the very documents it was
  counted on, it is right on nearly all of them (95% of MR's training
  sentences against 78% of held-out ones), and a model trained on the sum
  would learn almost nothing from them. Validation -- early stopping, the
  choice of the best epoch -- scores the plain sum.
* **Weighed on the validation part after training**
  (:meth:`NgramHalf.weigh_halves`): ``a`` and ``b`` by least cross-entropy
  (stacking, :func:`~attnkit.models.ngram_half.fit_stacking_weights`); ``a`` is
  folded into the ``classifier`` layer and ``b`` is the buffer
  ``wide_scale``. A network trained until it fits its own training part is
  overconfident on new documents: ``a`` is its temperature (0.1-0.5 for the
  default recipe on MR and customer reviews).
* Dividing the sum by the square root of the feature count is the L2
  normalisation of a binary vector: long and short documents get logits of a
  like scale. A bigram never seen in training adds nothing.

Shape legend: B batch, T tokens, C classes, F n-gram features per document (2T - 1), V vocabulary, R bigram rows.

Fitting. :func:`frequent_bigrams` chooses the bigrams that get rows of the table;
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
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode
from attnkit.attention.masks import AttentionMask
from attnkit.models.base import WeightSelection

__all__ = ["NgramHalf", "ngram_features", "WIDE_C", "NO_KEY", "frequent_bigrams", "ngram_counts", "naive_bayes_ratios",
           "fit_nb_regression", "fit_stacking_weights", "STACKING_BOUNDS", "LBFGS_HISTORY", "FIT_TABLES", "fit_bytes"]

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
        real = mask.key_mask()  # (B, T)
        pairs = real[:, :-1] & real[:, 1:]  # (B, T-1)
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
        value = (nn.functional.cross_entropy(a * d + b * w, target, weight=weight)
                 + (log_w * log_w).sum() / (2 * len(target)))
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)  # type: ignore[arg-type]
    a, b = log_w.detach().clamp(lo, hi).exp().tolist()
    return float(a), float(b)


_HASH = 1_000_003  # the hashed (saved-before) bigram rows of the wide model


def ngram_features(ids: Tensor, mask: Tensor, vocab_size: int, buckets: int, keys: Tensor | None = None
                   ) -> tuple[Tensor, Tensor]:
    """Feature ids of each document's word 1- and 2-grams and which of them are real.

    Unigram ``t`` is ``ids[:, t]``. With ``keys`` (the sorted bigram keys
    ``a * vocab_size + b`` of the table, ``(buckets,)``), bigram ``(t, t+1)`` is
    ``vocab_size + i`` where ``keys[i]`` is its key, and is not real when its key
    is not there; without, it is hashed: ``vocab_size + (ids[:, t] * 1000003 +
    ids[:, t+1]) mod buckets``. Features over padding are marked False.

    Shape:
        ids ``(B, T)``, mask ``(B, T)`` bool (True on real tokens); returns
        features ``(B, F)`` int64 and real ``(B, F)`` bool with F = 2T - 1.
    """
    pairs = mask[:, :-1] & mask[:, 1:]  # (B, T-1)
    if keys is None:
        bigrams = vocab_size + (ids[:, :-1] * _HASH + ids[:, 1:]) % buckets  # (B, T-1)
    else:
        key = ids[:, :-1] * vocab_size + ids[:, 1:]  # (B, T-1)
        row = torch.searchsorted(keys, key.contiguous()).clamp_max(keys.numel() - 1)  # (B, T-1)
        pairs = pairs & (keys[row] == key)
        bigrams = vocab_size + row
    feats = torch.cat([ids, bigrams], dim=1)  # (B, F)
    real = torch.cat([mask, pairs], dim=1)  # (B, F)
    return feats, real


class NgramHalf:
    """Mixin: the n-gram half of a :class:`~attnkit.models.base.TextClassifier` (see the module docstring).

    The class comes before :class:`~attnkit.models.base.TextClassifier` among
    the bases, calls :meth:`_add_ngram_half` in its ``__init__`` (with no
    rows the model has no half, :attr:`has_ngram_half` is False and its logits
    are its own), has a final ``nn.Linear`` named ``classifier`` and
    implements :meth:`classify_own`, its logits without the half; the
    mixin's :meth:`classify` adds the half.

    Buffers (saved with the weights): ``wide`` ``(V + R, C)`` the table,
    ``bigram_keys`` ``(R,)`` the sorted keys ``a * V + b`` of the bigrams with
    rows (None: hashed rows), ``wide_bias`` ``(C,)`` (None: hashed rows, a
    naive Bayes table alone) and ``wide_scale`` ``()``, the weight ``b``.
    """

    classifier: nn.Linear
    wide: Tensor | None
    bigram_keys: Tensor | None
    wide_bias: Tensor | None
    wide_scale: Tensor | None
    training: bool
    _ngram_vocab: int
    _ngram_rows: int

    def _add_ngram_half(self, vocab_size: int, rows: int, num_classes: int, *, exact: bool = True) -> None:
        """Register the half's buffers: ``vocab_size`` unigram and ``rows`` bigram rows (``rows=0``: no half)."""
        module: Any = self
        self._ngram_vocab, self._ngram_rows = vocab_size, rows
        if not rows:
            for name in ("wide", "bigram_keys", "wide_bias", "wide_scale"):
                module.register_buffer(name, None)
            return
        module.register_buffer("wide", torch.zeros(vocab_size + rows, num_classes))
        module.register_buffer("bigram_keys", torch.full((rows,), NO_KEY, dtype=torch.long) if exact else None)
        module.register_buffer("wide_bias", torch.zeros(num_classes) if exact else None)
        module.register_buffer("wide_scale", torch.ones(()))  # b; set on the validation part

    @property
    def has_ngram_half(self) -> bool:
        """Whether the model has an n-gram half (``rows > 0``)."""
        return self.wide is not None

    def classify_own(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The model's own logits (without the half) and weights for a prepared batch; the class implements it.

        Shape:
            as :meth:`~attnkit.models.base.TextClassifier.classify`.
        """
        raise NotImplementedError

    def classify(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`classify_own`'s logits, plus the half's (scaled by ``wide_scale``) in eval mode.

        Shape:
            as :meth:`~attnkit.models.base.TextClassifier.classify`.
        """
        logits, found = self.classify_own(ids, lengths, mask, weights)
        return self.with_ngram_half(logits, *self.ngram_input(ids, mask)), found

    def own_logits(self, ids: Tensor, lengths: Tensor, mask: AttentionMask) -> Tensor:
        """The model's logits without the half, for a prepared batch.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)``.
        """
        return self.classify_own(ids, lengths, mask, None)[0]

    def ngram_input(self, ids: Tensor, mask: AttentionMask) -> tuple[Tensor, AttentionMask]:
        """The token ids ``(B, T)`` and mask (allowed ``(B, 1, 1, T)``) the half reads from a prepared batch
        (itself here)."""
        return ids, mask

    def with_ngram_half(self, logits: Tensor, ids: Tensor, mask: AttentionMask) -> Tensor:
        """``logits`` while training or without a half; ``logits + wide_scale * wide_logits`` otherwise.

        Shape:
            logits ``(B, C)``, ids ``(B, T)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)``.
        """
        if self.training or self.wide_scale is None:
            return logits
        return logits + self.wide_scale * self.wide_logits(ids, mask)

    def _table(self) -> Tensor:
        if self.wide is None:
            raise ValueError(f"this {type(self).__name__} has no n-gram half (its config gives it no bigram rows)")
        return self.wide

    def _padded(self, documents: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, AttentionMask]:
        """Token-id lists as a checked, padded batch: ``ids (B, T)``, ``lengths (B,)`` and its mask."""
        docs = [np.asarray(d, dtype=np.int64).reshape(-1) for d in documents]
        docs = [d if d.size else np.zeros(1, dtype=np.int64) for d in docs]
        ids = torch.zeros(len(docs), max(len(d) for d in docs), dtype=torch.long)
        for i, d in enumerate(docs):
            ids[i, : len(d)] = torch.from_numpy(d)
        device = self._table().device
        module: Any = self
        return module.prepare(ids.to(device), torch.tensor([len(d) for d in docs], device=device))

    def weigh_halves(self, documents: Sequence[Sequence[int]], labels: Sequence[int], *,
                     chunk: int = 256, class_weights: Sequence[float] | None = None) -> tuple[float, float]:
        """Weigh the model's own logits and the half on held-out documents: ``a * own + b * wide`` from then on.

        ``a`` and ``b`` are :func:`~attnkit.models.ngram_half.fit_stacking_weights`'s
        (least cross-entropy on the documents, weighed by ``class_weights`` when
        given: :func:`attnkit.train.objective.stacking_weights`); ``a`` is folded into the
        ``classifier`` layer (its weight and bias times ``a``) and ``b``
        becomes ``wide_scale``, so the saved weights predict with both and runs
        saved before this rule load unchanged. Called by
        :func:`attnkit.train.pipeline.fit_classifier` after training, with the
        validation part; returns ``(a, b)``. The training mode is left as it was.

        Shape:
            documents: token-id lists; labels: class indices, one per document.
        """
        self._table()
        assert self.wide_scale is not None
        if len(documents) != len(labels) or not documents:
            raise ValueError(f"need the same, non-zero number of documents and labels, got {len(documents)} "
                             f"and {len(labels)}")
        own, wide = self.each_half(documents, chunk=chunk)
        a, b = fit_stacking_weights(own, wide, labels, class_weights)
        with torch.no_grad():
            self.classifier.weight.mul_(a)
            self.classifier.bias.mul_(a)
            self.wide_scale.fill_(b)
        return a, b

    @torch.no_grad()
    def each_half(self, documents: Sequence[Sequence[int]], *, chunk: int = 256) -> tuple[Tensor, Tensor]:
        """The model's own logits and the half's, each alone, in eval mode (the mode is left as it was).

        Shape:
            documents: token-id lists; returns two ``(N, C)`` float32 CPU tensors.
        """
        self._table()
        own, wide = [], []
        with eval_mode(cast(Any, self)):
            for start in range(0, len(documents), chunk):
                ids, lengths, mask = self._padded(documents[start : start + chunk])
                own.append(self.own_logits(ids, lengths, mask).float().cpu())
                wide.append(self.wide_logits(ids, mask).float().cpu())
        return torch.cat(own), torch.cat(wide)

    @torch.no_grad()
    def init_from_training_data(self, documents: Sequence[Sequence[int]], labels: Sequence[int], *,
                                alpha: float = 1.0, chunk: int = 1024,
                                class_weights: Sequence[float] | None = None) -> None:
        """Set the half from the training documents: bigram rows, naive Bayes ratios, then the regression.

        With exact rows the bigram rows go first to the bigrams of the
        documents, the ``R`` found in the most documents when there are more
        (ties: the smaller key); the table is then the logistic regression
        :func:`~attnkit.models.ngram_half.fit_nb_regression` fits on the features
        scaled by :meth:`naive_bayes_table` (NB-LR; Wang and Manning, 2012).
        With hashed rows (wide-model runs saved before) it is the naive Bayes
        table itself. Called by :func:`attnkit.train.pipeline.fit_classifier`
        on a new model, with the training part only. ``class_weights`` (one
        per class) weigh the regression's cross-entropy (``--class-weight balanced``).

        Shape:
            documents: token-id lists (one per document, ids in ``[0, V)``);
            labels: class indices in ``[0, C)``, one per document.
        """
        table = self._table()
        if len(documents) != len(labels):
            raise ValueError(f"documents and labels must have the same length, got {len(documents)} "
                             f"and {len(labels)}")
        if self.bigram_keys is not None:
            self.bigram_keys.copy_(frequent_bigrams(self, documents, chunk))
        counts = ngram_counts(self, documents, chunk)  # (N, V + R), sparse
        ratios = naive_bayes_ratios(counts, labels, table.shape[1], alpha)  # (V + R, C)
        if self.wide_bias is None:  # hashed rows: the naive Bayes table itself
            table.copy_(ratios.to(table.dtype))
            return
        weights, bias = fit_nb_regression(counts, labels, ratios, class_weights)
        table.copy_(weights.to(table.dtype))
        self.wide_bias.copy_(bias.to(self.wide_bias.dtype))

    @torch.no_grad()
    def naive_bayes_table(self, documents: Sequence[Sequence[int]], labels: Sequence[int], *,
                          alpha: float = 1.0, chunk: int = 1024) -> Tensor:
        """Naive Bayes log-count ratios of the documents over this model's n-gram rows.

        For class ``c`` and n-gram ``f``, ``p_c(f) = (n_c(f) + alpha) / sum_f' (n_c(f') + alpha)``
        over the n-grams ``f'`` seen in the documents, where ``n_c(f)`` counts the
        class-``c`` documents holding ``f`` (binarised counts, as NB-SVM's); the
        weight is ``log p_c(f)`` minus its mean over the classes, and zero for an
        n-gram never seen. With two classes this is half of Wang and Manning's
        (2012) log-count ratio ``r`` for each class, with opposite signs.

        Shape:
            returns ``(V + R, C)`` float64.
        """
        return naive_bayes_ratios(ngram_counts(self, documents, chunk), labels, self._table().shape[1], alpha)

    @torch.no_grad()
    def ngram_contributions(self, ids: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor, Tensor]:
        """What each n-gram of each document adds to each class's logit in eval mode (``wide_scale`` included).

        The half's logits are the sum of these over the real features plus
        ``wide_scale * wide_bias``; :func:`attnkit.train.inference.predict_texts`
        ranks them to explain a prediction.

        Shape:
            ids ``(B, T)``, mask allowed ``(B, 1, 1, T)``; returns features ``(B, F)``, real ``(B, F)``
            and contributions ``(B, F, C)`` (zero where not real).
        """
        table = self._table()
        assert self.wide_scale is not None
        feats, real = self._features(ids, mask)  # (B, F)
        keep = real.to(table.dtype)  # (B, F)
        per = table[feats] * keep[..., None] / keep.sum(1).clamp_min(1.0).sqrt()[:, None, None]  # (B, F, C)
        return feats, real, self.wide_scale * per

    @torch.no_grad()
    def token_ngram_contributions(self, ids: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor]:
        """:meth:`ngram_contributions` folded onto the tokens, and the half's bias ``wide_scale * wide_bias``.

        A unigram's share goes to its token, a bigram's half to each of its two
        tokens; the tokens' shares plus the bias are the half's logits in eval mode.

        Shape:
            ids ``(B, T)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, T, C)`` and ``(C,)``.
        """
        _, _, per = self.ngram_contributions(ids, mask)  # (B, 2T - 1, C)
        t = ids.shape[1]
        tokens = per[:, :t].clone()  # unigrams: one per position
        pairs = per[:, t:] / 2  # (B, T - 1, C): bigram (t, t + 1)
        tokens[:, :-1] += pairs
        tokens[:, 1:] += pairs
        assert self.wide_scale is not None
        bias = torch.zeros(per.shape[-1], dtype=per.dtype, device=per.device)
        if self.wide_bias is not None:
            bias = self.wide_scale * self.wide_bias
        return tokens, bias

    @torch.no_grad()
    def top_ngrams(self, k: int) -> list[list[tuple[tuple[int, ...], float]]]:
        """Per class, the ``k`` n-grams weighed most toward it: token ids and ``wide_scale * (W[f, c] - mean_c W[f])``.

        Global weights of the half (before a document's ``1 / sqrt(n)``); hashed bigram rows are left out.
        """
        table = self._table().float()
        assert self.wide_scale is not None
        lift = float(self.wide_scale) * (table - table.mean(1, keepdim=True))  # (V + R, C)
        out = []
        for c in range(table.shape[1]):
            rows: list[tuple[tuple[int, ...], float]] = []
            for f in torch.argsort(lift[:, c], descending=True, stable=True).tolist():
                ids = self.ngram_tokens(f)
                if ids is not None:
                    rows.append((ids, float(lift[f, c])))
                if len(rows) == k:
                    break
            out.append(rows)
        return out

    def ngram_tokens(self, feature: int) -> tuple[int, ...] | None:
        """The token ids of n-gram row ``feature``: ``(a,)`` or ``(a, b)``; None for a hashed bigram row."""
        if feature < self._ngram_vocab:
            return (feature,)
        if self.bigram_keys is None:
            return None
        key = int(self.bigram_keys[feature - self._ngram_vocab])
        return (key // self._ngram_vocab, key % self._ngram_vocab)

    def _features(self, ids: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor]:
        """:func:`ngram_features` of a padded batch with this model's bigram rows; mask allowed ``(B, 1, 1, T)``."""
        return ngram_features(ids, mask.key_mask(), self._ngram_vocab, self._ngram_rows, self.bigram_keys)

    def wide_logits(self, ids: Tensor, mask: AttentionMask) -> Tensor:
        """The half's logits: its table summed over the document's n-grams, over their count's root, plus its bias.

        Shape:
            ids ``(B, T)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)``.
        """
        table = self._table()
        feats, real = self._features(ids, mask)  # (B, F)
        keep = real.to(table.dtype)  # (B, F)
        total = (table[feats] * keep[..., None]).sum(1)  # (B, C)
        logits = total / keep.sum(1, keepdim=True).clamp_min(1.0).sqrt()
        return logits if self.wide_bias is None else logits + self.wide_bias
