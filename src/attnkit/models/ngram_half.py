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
  called by :func:`attnkit.train.tasks.classify.pipeline.fit_classifier` with the training
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
:meth:`NgramHalf.wide_logits` reads), into a sparse CSR document x n-gram
count matrix (int32 columns, float32 counts); :func:`naive_bayes_ratios` counts
the classes from it and :func:`fit_nb_regression` fits the logistic regression on
the naive-Bayes-scaled features (NB-LR; Wang and Manning, 2012) whose weights
become the table, its gradient written out and the matrix and its transpose read
in blocks, so the fit holds little beyond the two matrices and L-BFGS's tables
(float32, ten correction pairs: :func:`fit_bytes`), whatever the number of classes. With more than
:data:`CLASS_BLOCK` classes, the regression is fitted a block of classes at a time, swept until its
objective settles (block coordinate descent, :func:`_fit_blocks`): L-BFGS's tables are then one block's,
and the fit's memory barely grows with the classes.
After training, :func:`fit_stacking_weights` weighs the two halves on the
validation part.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode
from attnkit.core.masks import AttentionMask
from attnkit.models.base import WeightSelection

__all__ = ["NgramHalf", "ngram_features", "WIDE_C", "NO_KEY", "frequent_bigrams", "ngram_counts", "naive_bayes_ratios",
           "fit_nb_regression", "fit_stacking_weights", "STACKING_BOUNDS", "LBFGS_HISTORY", "FIT_TABLES", "FIT_DTYPE",
           "fit_bytes"]

WIDE_C = 10.0
"""Inverse L2 strength of the wide half's logistic regression (``C`` of scikit-learn's summed loss)."""
NO_KEY = torch.iinfo(torch.int64).max
"""The free places of the bigram key buffer, sorted last."""
LBFGS_HISTORY = 10
"""Correction pairs the wide half's L-BFGS keeps (scipy's and scikit-learn's ``m = 10``; torch's default of
100 held 200 ``(S, C)`` tables, gigabytes once the classes are many, for no accuracy on the evaluated sets).
Each pair holds two ``(S, C)`` :data:`FIT_DTYPE` tables, so the fit needs up to :data:`FIT_TABLES` such
tables (:func:`fit_bytes`)."""
FIT_DTYPE = torch.float32
"""The dtype of the fit's ``(S, C)`` and ``(N, C)`` tables (the table is float32 in the model anyway); the
loss L-BFGS compares between steps is summed in float64."""
FIT_TABLES = 2 * LBFGS_HISTORY + 11
"""``(S, C)`` :data:`FIT_DTYPE` tables alive at the fit's peak: the history; the ratios, ``U``, its
gradient and L-BFGS's flat copy of it, the previous gradient, the direction, the step's start and the line
search's gradient; the scaled table and its gradient (and the temporary of their product). Measured:
``tests/models/test_ngram_fit.py``."""
CLASS_BLOCK = 20
"""Most classes whose ``(S, C)`` tables one L-BFGS fits at once: with more, the regression is fitted a
block of this many classes at a time (:func:`_fit_blocks`), so its memory stops growing with the classes
but for :data:`BLOCKED_TABLES` tables; with as many or fewer (two-class sentiment, four news topics), all
at once as before (:func:`_fit_joint`)."""
BLOCKED_TABLES = 4
"""``(S, C)`` :data:`FIT_DTYPE` tables held over all classes while the fit runs a block at a time: the
ratios (the caller's and the fitted rows'), ``U`` and the table written out at the end."""
MAX_SWEEPS = 5
"""Most sweeps over the blocks of classes (:func:`_fit_blocks`)."""
LATER_STEPS = 20
"""Most L-BFGS steps a block takes after the first sweep (:func:`_fit_blocks`): the first sweep finds nearly
all of the minimum, the later ones refine it and check that it is found."""
SWEEP_TOLERANCE = 1e-4
"""A sweep that lowers the objective by less than this share of it is the last (:func:`_fit_blocks`)."""
COUNT_BYTES = 8
"""Bytes of one entry of the count matrix (:func:`ngram_counts`): an int32 column and a float32 count."""
BIGRAM_BYTES = 32
"""Bytes per distinct bigram :func:`frequent_bigrams` holds at most: its key and document count, twice
while a chunk's are merged in, and the sort that ranks them."""
DOCUMENT_TABLES = 8
"""``(N, C)`` :data:`FIT_DTYPE` tables alive during the regression's steps (logits, their gradient, the
targets...)."""
FIT_BYTES = 4
"""Bytes of one entry of a :data:`FIT_DTYPE` table."""
CHUNK_TOKENS = 2**20
"""Most padded tokens of the documents the fit pads at once (:func:`frequent_bigrams`, :func:`ngram_counts`)."""
BLOCK_BYTES = 2**26
"""Most bytes one block of the count matrix takes while the fit reads it (:func:`_blocks`)."""
STEP_BYTES = max(BLOCK_BYTES, 160 * CHUNK_TOKENS)
"""Most bytes one step of the fit holds beside what it keeps: a chunk of padded documents, their n-gram
features and the sort that counts them, or a block of the count matrix."""
STACKING_BOUNDS = (1e-3, 1e3)
"""The range of each weight :func:`fit_stacking_weights` may return."""


def fit_bytes(rows: int, num_classes: int, tokens: int, documents: int | None = None) -> int:
    """Bytes :meth:`NgramHalf.init_from_training_data` allocates at most beside the table, for ``rows``
    table rows (vocabulary plus bigram rows), ``num_classes`` classes, ``tokens`` training tokens and
    ``documents`` training documents (None: as many as tokens, the most there can be when none is empty).

    The count matrix (:func:`ngram_counts`) has at most ``2 * tokens`` entries (a document of ``T``
    tokens has ``2T - 1`` n-grams) of :data:`COUNT_BYTES` each, held one and a half times while it is
    built; :func:`frequent_bigrams` holds :data:`BIGRAM_BYTES` per distinct bigram (at most ``tokens``)
    before; the regression holds the matrix, its transpose and (with rows unseen) a column copy, two and a
    half matrices, :data:`FIT_TABLES` ``(rows, C)`` :data:`FIT_DTYPE` tables and
    :data:`DOCUMENT_TABLES` ``(N, C)`` ones; a step of any of them (a chunk of documents padded, a block of
    the matrix read) takes at most :data:`STEP_BYTES` more. The classes multiply only the tables: with
    float32 and ten correction pairs, 124 bytes a row and class (1,664 before, with 100 pairs in float64)
    up to :data:`CLASS_BLOCK` classes; above, the regression is fitted a block of classes at a time
    (:func:`_fit_blocks`): L-BFGS's tables are one block's, and a further class costs the
    :data:`BLOCKED_TABLES` tables held over all classes, 16 bytes a row.
    """
    matrix = 2 * tokens * COUNT_BYTES
    tables = FIT_TABLES * num_classes if num_classes <= CLASS_BLOCK else \
        FIT_TABLES * CLASS_BLOCK + BLOCKED_TABLES * num_classes
    fit = matrix * 5 // 2 + FIT_BYTES * (tables * rows + DOCUMENT_TABLES * num_classes * (
        tokens if documents is None else documents))
    return max(matrix * 3 // 2, BIGRAM_BYTES * tokens, fit) + STEP_BYTES


def _documents(model: NgramHalf, documents: Sequence[Sequence[int]], chunk: int
               ) -> Iterator[tuple[Tensor, AttentionMask]]:
    """The documents in order, as the model pads them, ``chunk`` at a time or fewer (at most
    :data:`CHUNK_TOKENS` padded tokens, one document at least): ids ``(B, T)`` and mask."""
    start = 0
    while start < len(documents):
        end, longest = start + 1, len(documents[start])
        while end < min(start + chunk, len(documents)):
            longest = max(longest, len(documents[end]))
            if (end + 1 - start) * longest > CHUNK_TOKENS:
                break
            end += 1
        ids, _, mask = model._padded(documents[start:end])
        yield ids, mask
        start = end


def frequent_bigrams(model: NgramHalf, documents: Sequence[Sequence[int]], chunk: int) -> Tensor:
    """The sorted keys of the model's ``R`` bigram rows: the bigrams in the most documents, then free places.

    The document counts of the bigrams seen so far are merged chunk by chunk (:func:`_merged_counts`):
    at most :data:`BIGRAM_BYTES` per distinct bigram.
    """
    vocab, rows = model._ngram_vocab, model._ngram_rows
    keys, docs = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.int32)  # sorted, distinct
    for ids, mask in _documents(model, documents, chunk):
        real = mask.key_mask()  # (B, T)
        pairs = real[:, :-1] & real[:, 1:]  # (B, T-1)
        key = ids[:, :-1] * vocab + ids[:, 1:]  # (B, T-1)
        doc = torch.arange(ids.shape[0])[:, None].expand_as(key)
        span = vocab * vocab  # keys lie in [0, V^2): one number per (doc, bigram), made unique
        found = torch.unique(torch.unique(doc[pairs] * span + key[pairs]) % span, return_counts=True)
        keys, docs = _merged_counts(keys, docs, *found)
    if keys.numel() > rows:  # most documents first, then the smaller key (stable sort)
        keys = keys[torch.sort(docs, descending=True, stable=True).indices[:rows]].sort().values
    out = torch.full((rows,), NO_KEY, dtype=torch.long)
    out[: keys.numel()] = keys
    return out


def _merged_counts(keys: Tensor, counts: Tensor, new: Tensor, added: Tensor) -> tuple[Tensor, Tensor]:
    """The sorted distinct ``keys`` with their ``counts``, and the sorted distinct ``new`` ones with theirs
    (``added``), merged: the counts of a key in both add up."""
    at = torch.searchsorted(keys, new)  # (K',)
    old = at < keys.numel()
    old[old.clone()] = keys[at[old]] == new[old]
    counts.index_add_(0, at[old], added[old].to(counts.dtype))
    new, added, at = new[~old], added[~old], at[~old]  # at: how many old keys come before each new one
    if not new.numel():
        return keys, counts
    size = keys.numel() + new.numel()
    place = torch.arange(new.numel()) + at  # each new key's place in the merged order
    rest = torch.ones(size, dtype=torch.bool)
    rest[place] = False  # the old keys keep their order in the other places
    merged = torch.empty(size, dtype=keys.dtype)
    merged[place], merged[rest] = new, keys
    del keys
    total = torch.empty(size, dtype=counts.dtype)
    total[place], total[rest] = added.to(counts.dtype), counts
    return merged, total


def ngram_counts(model: NgramHalf, documents: Sequence[Sequence[int]], chunk: int) -> Tensor:
    """How often each of the model's n-gram rows occurs in each document: the one pass both fits read.

    Shape:
        returns a sparse CSR ``(N, V + R)`` float32 tensor (int32 indices when its size allows); a row sums
        to the document's n-gram count, the count :meth:`NgramHalf.wide_logits` divides by.
    """
    size = (len(documents), model._ngram_vocab + model._ngram_rows)
    index = torch.int32 if size[1] < 2**31 else torch.long
    columns, values, entries = [], [], [torch.zeros(1, dtype=torch.long)]
    for ids, mask in _documents(model, documents, chunk):  # each chunk's repeats added up at once
        feats, real = model._features(ids, mask)  # (B, F)
        flat = (torch.arange(ids.shape[0])[:, None] * size[1] + feats)[real]
        keys, counts = torch.unique(flat, return_counts=True)  # sorted: by document, then n-gram
        del flat
        entries.append(torch.bincount(keys // size[1], minlength=ids.shape[0]))
        columns.append((keys % size[1]).to(index))
        values.append(counts.to(torch.float32))
    crow = torch.cat(entries).cumsum(0)
    if crow[-1] >= 2**31:
        index = torch.long
    col = _joined(columns, index)
    return _csr_tensor(crow.to(index), col, _joined(values, torch.float32), size)


def _csr_tensor(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """``torch.sparse_csr_tensor`` without torch's one-time notice that its sparse CSR support is in beta."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _joined(parts: list[Tensor], dtype: torch.dtype) -> Tensor:
    """``torch.cat(parts)`` as ``dtype``, emptying ``parts`` on the way: the parts and the whole are held once."""
    out = torch.empty(sum(p.numel() for p in parts), dtype=dtype)
    at = 0
    while parts:
        part = parts.pop(0)
        out[at : at + part.numel()] = part
        at += part.numel()
    return out


def _csr(counts: Tensor) -> Tensor:
    """``counts`` as a sparse CSR matrix (a sparse COO one is converted)."""
    return counts if counts.layout == torch.sparse_csr else counts.coalesce().to_sparse_csr()


def _blocks(counts: Tensor, width: int, dtype: torch.dtype = torch.float64
            ) -> Iterator[tuple[int, int, Tensor, Tensor, Tensor]]:
    """The CSR ``counts`` in blocks of whole rows with at most :data:`BLOCK_BYTES` of ``(entries, width)``
    float64 (one row at least): first and end row, and each entry's row (from the first), column (int64)
    and value (``dtype``)."""
    crow = counts.crow_indices().long()
    col, values = counts.col_indices(), counts.values()
    limit = max(1, BLOCK_BYTES // (8 * (width + 4)))
    first = 0
    while first < counts.shape[0]:
        end = int(torch.searchsorted(crow, crow[first] + limit, right=True)) - 1
        end = min(max(end, first + 1), counts.shape[0])
        lo, hi = int(crow[first]), int(crow[end])
        rows = torch.repeat_interleave(torch.arange(end - first), crow[first + 1 : end + 1] - crow[first:end])
        yield first, end, rows, col[lo:hi].long(), values[lo:hi].to(dtype)
        first = end


def naive_bayes_ratios(counts: Tensor, labels: Sequence[int], num_classes: int, alpha: float) -> Tensor:
    """Centred naive Bayes log-probabilities of each n-gram row from binarised ``counts`` (see
    :meth:`NgramHalf.naive_bayes_table`).

    The class counts are added up in place, a block of the matrix at a time, into one ``(C, S)`` table
    that then becomes the ratios: about two such tables at most.

    Shape:
        counts: sparse ``(N, S)`` from :func:`ngram_counts`; returns ``(S, C)`` :data:`FIT_DTYPE`.
    """
    counts = _csr(counts)
    target = torch.as_tensor(list(labels), dtype=torch.long)
    size = counts.shape[1]
    per_class = torch.zeros(num_classes * size, dtype=FIT_DTYPE)
    for first, _, rows, col, _ in _blocks(counts, 1):  # one entry per (document, n-gram): binarised
        per_class.index_add_(0, target[first + rows] * size + col, torch.ones(col.numel(), dtype=FIT_DTYPE))
    logp = per_class.view(num_classes, size)  # (C, S)
    seen = (logp.sum(0) > 0).to(FIT_DTYPE)  # (S,)
    totals = logp.sum(1, keepdim=True) + alpha * seen.sum()  # (C, 1)
    logp.add_(alpha).div_(totals).log_()
    logp.sub_(logp.mean(0, keepdim=True)).mul_(seen)
    return logp.T.contiguous()  # (S, C)


def fit_nb_regression(counts: Tensor, labels: Sequence[int], ratios: Tensor,
                      class_weights: Sequence[float] | None = None) -> tuple[Tensor, Tensor]:
    """Logistic regression on the naive-Bayes-scaled n-gram features: the table ``ratios * U`` and a bias.

    ``x`` holds each document's n-gram counts over the square root of its
    n-gram count (what :meth:`NgramHalf.wide_logits` reads); ``U`` and
    the bias minimise ``mean CE(x (ratios * U) + bias) + |U|^2 / (2 WIDE_C N)``
    (full batch, L-BFGS), so an n-gram never seen keeps weight zero. With
    ``class_weights`` (one per class) the cross-entropy is their weighted mean
    (:func:`attnkit.train.tasks.classify.objective.class_weights`). The gradient is written
    out (``x^T`` times the logits' gradient: the count matrix and its transpose,
    :func:`_transposed`, each read in blocks, :func:`_blocks`), so nothing beside
    the two matrices grows with the entries; the tables are :data:`FIT_DTYPE`. Only the rows with a ratio
    are fitted (:func:`_rows_with_ratios`): the others keep weight zero whatever ``U`` is, and a table sized
    for more bigrams than the documents hold costs nothing.

    Shape:
        counts sparse ``(N, S)`` (:func:`ngram_counts`), ratios ``(S, C)``; returns ``(S, C)`` and ``(C,)``.
    """
    counts = _csr(counts)
    scale = _row_sums(counts).clamp_min(1).rsqrt()[:, None].to(FIT_DTYPE)  # (N, 1): unit rows for binary counts
    target = torch.as_tensor(list(labels), dtype=torch.long)
    size = ratios.shape[0]
    counts, ratios, used = _rows_with_ratios(counts, ratios.to(FIT_DTYPE))
    transposed = _transposed(counts)  # (S, N): the gradient's product, read as fast as the logits' one
    num_classes = ratios.shape[1]
    penalty = 1.0 / (2 * WIDE_C * counts.shape[0])
    weight = _class_weights(class_weights, num_classes, torch.float64)
    per_doc = torch.ones(len(target), dtype=torch.float64) if weight is None else weight[target]  # (N,)
    per_doc = (per_doc / per_doc.sum())[:, None].to(FIT_DTYPE)  # (N, 1): the weighted mean's share of each
    onehot = nn.functional.one_hot(target, num_classes).to(FIT_DTYPE)  # (N, C)
    problem = _Problem(counts, transposed, scale, target, weight, per_doc, onehot, penalty)
    if num_classes <= CLASS_BLOCK:
        u, bias = _fit_joint(problem, ratios)
    else:
        u, bias = _fit_blocks(problem, ratios)
    table = ratios * u  # (S', C)
    del u
    if used is None:
        return table, bias
    out = torch.zeros(size, num_classes, dtype=FIT_DTYPE)
    out[used] = table[:-1]
    return out, bias


class _Problem:
    """What every step of the regression reads: the count matrix ``(N, S)`` and its transpose, each
    document's scale ``(N, 1)``, the targets ``(N,)``, the class weights, each document's share of the mean
    ``(N, 1)``, the one-hot targets ``(N, C)`` and the L2 penalty."""

    def __init__(self, counts: Tensor, transposed: Tensor, scale: Tensor, target: Tensor,
                 weight: Tensor | None, per_doc: Tensor, onehot: Tensor, penalty: float) -> None:
        self.counts, self.transposed, self.scale, self.target = counts, transposed, scale, target
        self.weight, self.per_doc, self.onehot, self.penalty = weight, per_doc, onehot, penalty

    def logits(self, ratios: Tensor, u: Tensor, bias: Tensor) -> Tensor:
        """``x (ratios * u) + bias`` over the classes of ``ratios``: ``(N, C')``."""
        return _times(self.counts, ratios * u) * self.scale + bias

    def value(self, logits: Tensor, u_squared: Tensor) -> Tensor:
        """The objective (float64) at ``logits`` ``(N, C)`` of all classes, ``u_squared`` the sum of ``u * u``."""
        return (nn.functional.cross_entropy(logits.double(), self.target, weight=self.weight)
                + self.penalty * u_squared)

    def gradients(self, logits: Tensor, ratios: Tensor, u: Tensor, classes: slice) -> tuple[Tensor, Tensor]:
        """The objective's gradient in ``u`` ``(S, C')`` and the bias ``(C',)`` of the ``classes`` whose
        ``ratios`` and ``u`` are given, at ``logits`` ``(N, C)`` of all classes."""
        step = logits.softmax(1)[:, classes].sub_(self.onehot[:, classes]).mul_(self.per_doc)  # (N, C')
        grad = _times(self.transposed, step * self.scale).mul_(ratios).add_(u, alpha=2 * self.penalty)
        return grad, step.sum(0)


def _lbfgs(params: list[Tensor], max_iter: int = 300) -> torch.optim.LBFGS:
    return torch.optim.LBFGS(params, max_iter=max_iter, tolerance_grad=1e-6, history_size=LBFGS_HISTORY,
                             line_search_fn="strong_wolfe")


def _fit_joint(problem: _Problem, ratios: Tensor) -> tuple[Tensor, Tensor]:
    """``U`` ``(S, C)`` and the bias ``(C,)``, fitted together by one L-BFGS (:data:`CLASS_BLOCK` classes or
    fewer): :func:`_fit_block` with every class in the block."""
    logits = torch.zeros(problem.counts.shape[0], ratios.shape[1], dtype=FIT_DTYPE)  # (N, C): written by the fit
    zeros = torch.zeros(ratios.shape, dtype=FIT_DTYPE)
    return _fit_block(problem, ratios, zeros, zeros[0], logits, slice(None), 0.0, 300)


def _fit_blocks(problem: _Problem, ratios: Tensor) -> tuple[Tensor, Tensor]:
    """``U`` ``(S, C)`` and the bias ``(C,)`` of the same objective as :func:`_fit_joint`'s, by block
    coordinate descent: sweeps over blocks of :data:`CLASS_BLOCK` classes, each block's ``U`` and bias
    fitted by its own L-BFGS with the other classes' logits held (at most :data:`LATER_STEPS` steps after the
    first sweep), until a sweep lowers the objective by less than :data:`SWEEP_TOLERANCE` of it (at most
    :data:`MAX_SWEEPS`; on 100 topics the second sweep lowered it by 5e-5 of it). The objective is convex, so
    the sweeps reach the joint fit's minimum; L-BFGS's tables are one block's, ``(S, CLASS_BLOCK)`` each,
    whatever the number of classes (:func:`fit_bytes`)."""
    num_classes = ratios.shape[1]
    u = torch.zeros(ratios.shape, dtype=FIT_DTYPE)  # (S, C)
    bias = torch.zeros(num_classes, dtype=FIT_DTYPE)
    logits = torch.zeros(problem.counts.shape[0], num_classes, dtype=FIT_DTYPE)  # (N, C): all classes, held
    squares = torch.zeros(num_classes, dtype=torch.float64)  # (C,): each class's sum of u * u
    before = float(problem.value(logits, squares.sum()))
    for sweep in range(MAX_SWEEPS):
        for first in range(0, num_classes, CLASS_BLOCK):
            classes = slice(first, min(num_classes, first + CLASS_BLOCK))
            part = ratios[:, classes].contiguous()  # (S, C')
            rest = float(squares.sum() - squares[classes].sum())
            ub, bb = _fit_block(problem, part, u[:, classes], bias[classes], logits, classes, rest,
                                300 if sweep == 0 else LATER_STEPS)
            u[:, classes], bias[classes] = ub, bb
            logits[:, classes] = problem.logits(part, ub, bb)  # the line search's last try may not be the step
            squares[classes] = (ub.double() * ub.double()).sum(0)
            del part, ub, bb
        after = float(problem.value(logits, squares.sum()))
        if before - after <= SWEEP_TOLERANCE * abs(after):
            break
        before = after
    return u, bias


@torch.no_grad()
def _fit_block(problem: _Problem, ratios: Tensor, u: Tensor, bias: Tensor, logits: Tensor, classes: slice,
               rest: float, max_iter: int) -> tuple[Tensor, Tensor]:
    """``U`` ``(S, C')`` and the bias ``(C',)`` of the ``classes`` whose ``ratios`` are given, fitted by
    L-BFGS from ``u`` and ``bias`` with the other classes' columns of ``logits`` ``(N, C)`` held (the
    block's columns are written over); ``rest`` is the other classes' sum of ``u * u``."""
    ub = u.clone().requires_grad_(True)
    bb = bias.clone().requires_grad_(True)
    opt = _lbfgs([ub, bb], max_iter)

    def loss() -> Tensor:
        logits[:, classes] = problem.logits(ratios, ub.detach(), bb.detach())
        value = problem.value(logits, rest + (ub.detach() * ub.detach()).sum(dtype=torch.float64))
        ub.grad, bb.grad = problem.gradients(logits, ratios, ub.detach(), classes)
        return value

    opt.step(loss)  # type: ignore[arg-type]
    return ub.detach(), bb.detach()


def _rows_with_ratios(counts: Tensor, ratios: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """The CSR ``counts`` and ``ratios`` over the rows with a ratio (S' of them) and one zero row after them,
    where the columns of the others go; and which rows those are (None: all of them, nothing changed).

    Shape:
        counts ``(N, S)``, ratios ``(S, C)``; returns ``(N, S' + 1)``, ``(S' + 1, C)`` and ``(S,)`` bool.
    """
    used = (ratios != 0).any(1)  # (S,)
    if bool(used.all()):
        return counts, ratios.contiguous(), None
    kept = int(used.sum())
    where = torch.full((ratios.shape[0],), kept, dtype=counts.col_indices().dtype)
    where[used] = torch.arange(kept, dtype=where.dtype)
    compact = torch.zeros(kept + 1, ratios.shape[1], dtype=ratios.dtype)
    compact[:kept] = ratios[used]
    columns = where[counts.col_indices().long()] if where.dtype != torch.long else where[counts.col_indices()]
    matrix = _csr_tensor(counts.crow_indices(), columns, counts.values(), (counts.shape[0], kept + 1))
    return matrix, compact, used


def _row_sums(counts: Tensor) -> Tensor:
    """Each row's sum of the CSR ``counts``: ``(N,)`` float64."""
    out = torch.zeros(counts.shape[0], dtype=torch.float64)
    for first, end, rows, _, values in _blocks(counts, 1):
        out[first:end].index_add_(0, rows, values)
    return out


def _times(counts: Tensor, table: Tensor) -> Tensor:
    """``counts @ table`` for the CSR ``counts`` ``(N, S)`` and ``table`` ``(S, C)``: ``(N, C)``, a CSR block of
    rows at a time in ``table``'s dtype (:func:`_blocks`)."""
    out = torch.empty(counts.shape[0], table.shape[1], dtype=table.dtype)
    crow, col = counts.crow_indices(), counts.col_indices()
    for first, end, _, _, values in _blocks(counts, table.shape[1], table.dtype):
        block = _csr_tensor(crow[first : end + 1] - crow[first], col[crow[first] : crow[end]], values,
                            (end - first, counts.shape[1]))
        out[first:end] = block @ table
    return out


def _transposed(counts: Tensor) -> Tensor:
    """The CSR ``counts`` ``(N, S)`` transposed, as a CSR ``(S, N)`` matrix of the same dtypes, built a block of
    rows at a time (:func:`_blocks`): each entry goes after the entries of its column from earlier rows, so
    nothing beside the two matrices grows with the entries. ``transposed @ step`` is ``counts.T @ step``
    about twenty times as fast as adding each entry's row of ``step`` in (``index_add_``)."""
    size, col = counts.shape[1], counts.col_indices()
    index = col.dtype if counts.shape[0] < 2**31 else torch.long
    starts = torch.zeros(size + 1, dtype=torch.long)
    filled = torch.zeros(size, dtype=torch.long)  # entries placed so far, per column
    for _, _, _, c, _ in _blocks(counts, 1):
        filled += torch.bincount(c, minlength=size)
    starts[1:] = filled.cumsum(0)
    filled.copy_(starts[:-1])
    rows_of = torch.empty(col.numel(), dtype=index)
    values = torch.empty(col.numel(), dtype=counts.values().dtype)
    for first, _, rows, c, v in _blocks(counts, 1, counts.values().dtype):
        order = torch.argsort(c, stable=True)  # by column, then row
        c = c[order]
        rank = torch.arange(c.numel()) - torch.searchsorted(c, c)  # its place among its column's in the block
        place = filled[c] + rank
        rows_of[place] = (rows[order] + first).to(index)
        values[place] = v[order]
        filled += torch.bincount(c, minlength=size)
    return _csr_tensor(starts.to(index), rows_of, values, (size, counts.shape[0]))


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
    mean (:func:`attnkit.train.tasks.classify.objective.stacking_weights`).

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

    def halves(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The model's own logits and the half's, each alone, for a padded batch (in the mode the model is in);
        in eval mode ``own + wide_scale * wide`` is :meth:`classify`'s logits, the same operations.

        Shape:
            ids ``(B, T)`` (or as the model's ``prepare`` takes them), lengths ``(B,)``; returns two ``(B, C)``.
        """
        module: Any = self
        ids, lengths, mask = module.prepare(ids, lengths)
        return self.own_logits(ids, lengths, mask), self.wide_logits(*self.ngram_input(ids, mask))

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
                     chunk: int = 256, class_weights: Sequence[float] | None = None,
                     batches: Sequence[Sequence[int]] | None = None) -> tuple[float, float]:
        """Weigh the model's own logits and the half on held-out documents: ``a * own + b * wide`` from then on.

        ``a`` and ``b`` are :func:`~attnkit.models.ngram_half.fit_stacking_weights`'s
        (least cross-entropy on the documents, weighed by ``class_weights`` when
        given: :func:`attnkit.train.tasks.classify.objective.stacking_weights`); ``a`` is folded into the
        ``classifier`` layer (its weight and bias times ``a``) and ``b``
        becomes ``wide_scale``, so the saved weights predict with both and runs
        saved before this rule load unchanged. After training
        :func:`attnkit.train.tasks.classify.pipeline.fit_classifier` weighs them on the validation part
        (:meth:`weigh_logits`, with the halves its last validation pass kept); returns ``(a, b)``. The training
        mode is left as it was. ``batches``: as :meth:`each_half` reads the documents.

        Shape:
            documents: token-id lists; labels: class indices, one per document.
        """
        if len(documents) != len(labels) or not documents:
            raise ValueError(f"need the same, non-zero number of documents and labels, got {len(documents)} "
                             f"and {len(labels)}")
        return self.weigh_logits(*self.each_half(documents, chunk=chunk, batches=batches), labels,
                                 class_weights=class_weights)

    def weigh_logits(self, own: Tensor, wide: Tensor, labels: Sequence[int], *,
                     class_weights: Sequence[float] | None = None) -> tuple[float, float]:
        """:meth:`weigh_halves` from each half's logits on the held-out documents, already computed (by
        :meth:`each_half`, or kept from the validation pass that scored the same weights:
        :meth:`attnkit.train.tasks.classify.task.ClassificationTask.predict`); returns ``(a, b)``.

        Shape:
            own, wide ``(N, C)``; labels: ``N`` class indices.
        """
        self._table()
        assert self.wide_scale is not None
        if own.shape != wide.shape or own.shape[0] != len(labels) or not len(labels):
            raise ValueError(f"need the same, non-zero number of rows of each half's logits and of labels, got "
                             f"{tuple(own.shape)}, {tuple(wide.shape)} and {len(labels)} labels")
        a, b = fit_stacking_weights(own, wide, labels, class_weights)
        with torch.no_grad():
            self.classifier.weight.mul_(a)
            self.classifier.bias.mul_(a)
            self.wide_scale.fill_(b)
        return a, b

    @torch.no_grad()
    def each_half(self, documents: Sequence[Sequence[int]], *, chunk: int = 256,
                  batches: Sequence[Sequence[int]] | None = None) -> tuple[Tensor, Tensor]:
        """The model's own logits and the half's, each alone, in eval mode (the mode is left as it was).

        The documents are read ``chunk`` at a time, or in ``batches``: index lists that cover each document once
        (:func:`attnkit.train.loop.task.sorted_batches`: like lengths together, capped in tokens as training's
        batches are); the rows come back in the documents' order.

        Shape:
            documents: token-id lists; returns two ``(N, C)`` float32 CPU tensors.
        """
        self._table()
        spans = batches if batches is not None else [range(i, min(len(documents), i + chunk))
                                                     for i in range(0, len(documents), chunk)]
        if sorted(i for span in spans for i in span) != list(range(len(documents))):  # refused before any work
            raise ValueError(f"batches cover {sum(len(span) for span in spans)} indices, not each of the "
                             f"{len(documents)} documents once")
        own, wide = [], []
        with eval_mode(cast(Any, self)):
            for span in spans:
                ids, lengths, mask = self._padded([documents[i] for i in span])
                own.append(self.own_logits(ids, lengths, mask).float().cpu())
                wide.append(self.wide_logits(ids, mask).float().cpu())
        back = torch.tensor([i for span in spans for i in span], dtype=torch.long).argsort()  # rows in order
        return torch.cat(own)[back], torch.cat(wide)[back]

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
        table itself. Called by :func:`attnkit.train.tasks.classify.pipeline.fit_classifier`
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
            returns ``(V + R, C)`` float32 (:data:`FIT_DTYPE`).
        """
        return naive_bayes_ratios(ngram_counts(self, documents, chunk), labels, self._table().shape[1], alpha)

    @torch.no_grad()
    def ngram_contributions(self, ids: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor, Tensor]:
        """What each n-gram of each document adds to each class's logit in eval mode (``wide_scale`` included).

        The half's logits are the sum of these over the real features plus
        ``wide_scale * wide_bias``; :func:`attnkit.train.tasks.classify.inference.predict_texts`
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
