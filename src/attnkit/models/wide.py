"""Naive Bayes and attention: the default text classifier, a product of two experts.

::

    deep    = W_c Pool_attn(Embed(ids)) + b_c                   (B, C)  attention pooling over word embeddings
    f_b     = {ids_t} ∪ {(ids_t, ids_t+1)}                      the document's word 1- and 2-grams
    wide    = sum_{f in f_b} W[f] / sqrt(|f_b|) + b_w            (B, C)  W = R * U: NB-LR over the n-grams
    logits  = deep            while training                    (B, C)
    logits  = deep + wide     to validate while training        (B, C)
    logits  = a deep + b wide to predict                        (B, C)  a, b fitted on the validation part

A linear model over word n-grams reaches most of the accuracy of neural
sentence classifiers, and a logistic regression over 1-2-grams scaled by
their naive Bayes log-count ratios is among the strongest such models, on
short texts and long reviews alike (Wang and Manning, 2012, "Baselines and
Bigrams": NBSVM); an attention model over word
embeddings generalises over words and their contexts in a way the n-gram
counts cannot. The two err on different examples, so their sum beats each of
them -- the "wide and deep" idea of Cheng et al. (2016), here as a product of
experts: the log-probabilities of the naive Bayes half plus the deep half's logits.

* **The wide half is fitted once, before the deep half trains.**
  :meth:`WideDeepClassifier.init_from_training_data` sets the table ``W``
  (``vocab_size + ngram_buckets`` rows of ``C`` values, a buffer saved with
  the weights) and its bias from the training part: ``R`` holds, for each
  class, the smoothed log-probability of each n-gram seen in training,
  centred over the classes (:meth:`WideDeepClassifier.naive_bayes_table`);
  ``W = R * U`` where ``U`` is the L2-regularised logistic regression on the
  ``R``-scaled features (convex, full batch, L-BFGS). Naive Bayes alone is
  weak on long documents (IMDB: 86.7% against 91.6% for the regression, both
  over the 200,000 commonest 1-2-grams). The wide half is
  left out while the deep half trains: fitted to the very documents it was
  counted on, it is right on nearly all of them (95% of MR's training
  sentences against 78% of held-out ones), and a deep half trained on the sum
  would learn almost nothing from them. Validation -- and so early stopping
  and the choice of the best epoch -- scores the plain sum.
* **The two halves are weighed on the validation part after training.**
  :meth:`WideDeepClassifier.weigh_halves` fits ``a`` and ``b`` by least
  cross-entropy (stacking; :func:`~attnkit.models.wide_fit.fit_stacking_weights`),
  folds ``a`` into the deep half's classifier layer and sets the buffer
  ``wide_scale`` (1 until then) to ``b``. The deep half, trained until it
  fits its own training part, is overconfident on new documents: ``a`` is
  its temperature (0.1-0.5 on MR and customer reviews), and the balance
  between the halves differs between data sets. Over 10 folds this gains
  0.3 points on MR and 0.9 on customer reviews against choosing one weight of
  the wide half by validation accuracy, which is noisy on a few hundred
  documents; and the predicted probabilities are calibrated.
* The unigram features are the token ids themselves. Each bigram of the
  training part has a row of its own after the vocabulary (``bigrams="exact"``;
  the ``ngram_buckets`` bigrams found in the most training documents when there
  are more): the sorted pair keys ``a * vocab_size + b`` are a buffer, and a
  document's bigrams are found in it by binary search; a bigram never seen in
  training adds nothing. Runs saved before this rule hashed the pairs into the
  rows (``bigrams="hashed"``, ``(a * 1000003 + b) mod ngram_buckets``), and keep
  doing so (:attr:`WideDeepClassifierConfig.SAVED_BEFORE`); that hash used fewer
  than half the rows, and naive Bayes over it lost 2 points on MR and SMS.
  Dividing the sum by the square root of the feature count is the L2
  normalisation of a binary vector: long and short documents get wide logits
  of a like scale.
* ``word_dropout`` replaces words of the deep half's input by ``[UNK]`` (id 1)
  while training (Iyyer et al., 2015); ``dropout`` acts on the embeddings and
  the pooled vector. ``encoder="lstm"`` puts a bidirectional LSTM below the
  pooling (the :class:`~attnkit.models.SentimentClassifier`'s design), at
  several times the cost.

The attention pooling weights are the deep half's (``weights["pooling"]``,
``(B, T)``), so ``predict --explain`` and the reports read them as for the
other classifiers.

Shape legend: B batch, T tokens, E embedding width, C classes, F n-gram features per document (2T - 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnkit.layers.pooling import AttentionPooling
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.config import (
    TextClassifierConfig,
    check_choice,
    check_fraction,
    check_positive_int,
)
from attnkit.models.sentiment import run_packed
from attnkit.models.wide_fit import (
    NO_KEY,
    WIDE_C,
    fit_nb_regression,
    fit_stacking_weights,
    frequent_bigrams,
    naive_bayes_ratios,
    ngram_counts,
)

__all__ = ["WideDeepClassifierConfig", "WideDeepClassifier", "ngram_features", "ENCODERS", "BIGRAMS", "WIDE_C"]

ENCODERS = ("none", "lstm")
BIGRAMS = ("exact", "hashed")

_UNK = 1  # the tokenizers' [UNK] id ([PAD] is 0)
_HASH = 1_000_003  # the hashed (saved-before) bigram rows


@dataclass(frozen=True)
class WideDeepClassifierConfig(TextClassifierConfig):
    """Configuration of :class:`WideDeepClassifier`.

    Attributes:
        vocab_size, num_classes: sizes of the token vocabulary and the label set.
        embed_dim: word embedding width E.
        encoder: ``"none"`` (attention pooling straight over the embeddings) or
            ``"lstm"`` (a bidirectional LSTM of ``hidden_size`` per direction below it).
        hidden_size: LSTM hidden width per direction (``encoder="lstm"``).
        attention_dim: width of the additive scoring layer of the pooling.
        dropout: on the embeddings and before the deep half's classifier.
        ngram_buckets: rows for word bigrams in the linear half's table (the
            most frequent training bigrams, or hash buckets with ``bigrams="hashed"``).
        bigrams: ``"exact"`` (a row per training bigram) or ``"hashed"`` (runs saved before it).
        word_dropout: share of a training document's words replaced by ``[UNK]`` in the deep half.
    """

    embed_dim: int = 64
    encoder: str = "none"
    hidden_size: int = 128
    attention_dim: int = 64
    dropout: float = 0.5
    ngram_buckets: int = 200_000
    word_dropout: float = 0.1
    bigrams: str = "exact"

    SAVED_BEFORE: ClassVar[dict[str, Any]] = {"bigrams": "hashed"}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embed_dim", "hidden_size", "attention_dim", "ngram_buckets"):
            check_positive_int(name, getattr(self, name))
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("bigrams", self.bigrams, BIGRAMS)
        for name in ("dropout", "word_dropout"):
            check_fraction(name, getattr(self, name))


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


class WideDeepClassifier(TextClassifier):
    """Attention pooling over word embeddings (optionally a BiLSTM's states) plus naive Bayes over n-grams.

    Parameters are named ``embedding.weight``, ``lstm.*`` (``encoder="lstm"``),
    ``pooling.*`` and ``classifier.{weight,bias}`` (the deep half); the buffer
    ``wide`` ``(vocab_size + ngram_buckets, C)`` holds the naive Bayes half.

    Shape:
        ids ``(B, T)``, lengths ``(B,)``; returns logits ``(B, C)`` and, on
        request, ``{"pooling": (B, T)}``.
    """

    config: WideDeepClassifierConfig

    def __init__(self, config: WideDeepClassifierConfig) -> None:
        super().__init__()
        if not isinstance(config, WideDeepClassifierConfig):
            raise TypeError(f"config must be a WideDeepClassifierConfig, got {type(config).__name__}")
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim, padding_idx=0)
        # Unit-length word vectors at the start (nn.Embedding's N(0, 1) gives length sqrt(E)),
        # so that the first epochs move them by a useful share of their size.
        nn.init.normal_(self.embedding.weight, std=c.embed_dim ** -0.5)
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        width = c.embed_dim
        self.lstm: nn.LSTM | None = None
        if c.encoder == "lstm":
            self.lstm = nn.LSTM(c.embed_dim, c.hidden_size, batch_first=True, bidirectional=True)
            width = 2 * c.hidden_size
        self.pooling = AttentionPooling(width, hidden_dim=c.attention_dim)
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(width, c.num_classes)
        # The wide half is fitted from the training data before the deep half trains: a buffer, saved with the weights.
        self.register_buffer("wide", torch.zeros(c.vocab_size + c.ngram_buckets, c.num_classes))
        self.wide: Tensor
        # the sorted keys of the bigrams that have rows, set from the training part (none: hashed rows)
        keys = torch.full((c.ngram_buckets,), NO_KEY, dtype=torch.long) if c.bigrams == "exact" else None
        self.register_buffer("bigram_keys", keys)
        self.bigram_keys: Tensor | None
        # the wide half's class bias, fitted with its table (none: hashed rows, a naive Bayes table alone)
        self.register_buffer("wide_bias", torch.zeros(c.num_classes) if c.bigrams == "exact" else None)
        self.wide_bias: Tensor | None
        # How much the naive Bayes half counts beside the deep half; chosen on the validation part.
        self.register_buffer("wide_scale", torch.ones(()))
        self.wide_scale: Tensor

    def _padded(self, documents: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, Tensor]:
        """Token-id lists as a checked, padded batch: ``ids (B, T)``, ``lengths (B,)``, ``mask (B, 1, 1, T)``."""
        docs = [list(d) or [0] for d in documents]
        ids = torch.zeros(len(docs), max(len(d) for d in docs), dtype=torch.long)
        for i, d in enumerate(docs):
            ids[i, : len(d)] = torch.as_tensor(d)
        device = self.wide.device
        return self.prepare(ids.to(device), torch.tensor([len(d) for d in docs], device=device))

    def weigh_halves(self, documents: Sequence[Sequence[int]], labels: Sequence[int], *,
                     chunk: int = 256) -> tuple[float, float]:
        """Weigh the two halves on held-out documents: ``logits = a * deep + b * wide`` from then on.

        ``a`` and ``b`` are :func:`~attnkit.models.wide_fit.fit_stacking_weights`'s
        (least cross-entropy on the documents); ``a`` is folded into the deep
        half's classifier layer (its weight and bias times ``a``) and ``b``
        becomes :attr:`wide_scale`, so the saved weights predict with both and
        a run saved before this rule loads unchanged. Called by
        :func:`attnkit.train.pipeline.fit_classifier` after training, with the
        validation part; returns ``(a, b)``. The training mode is left as it was.

        Shape:
            documents: token-id lists; labels: class indices, one per document.
        """
        if len(documents) != len(labels) or not documents:
            raise ValueError(f"need the same, non-zero number of documents and labels, got {len(documents)} "
                             f"and {len(labels)}")
        was_training = self.training
        self.eval()
        deep, wide = [], []
        with torch.no_grad():
            for start in range(0, len(documents), chunk):
                ids, lengths, mask = self._padded(documents[start : start + chunk])
                deep.append(self._deep_logits(ids, lengths, mask)[0])
                wide.append(self.wide_logits(ids, mask))
        self.train(was_training)
        a, b = fit_stacking_weights(torch.cat(deep).cpu(), torch.cat(wide).cpu(), labels)
        with torch.no_grad():
            self.classifier.weight.mul_(a)
            self.classifier.bias.mul_(a)
            self.wide_scale.fill_(b)
        return a, b

    @torch.no_grad()
    def init_from_training_data(self, documents: Sequence[Sequence[int]], labels: Sequence[int], *,
                                alpha: float = 1.0, chunk: int = 1024) -> None:
        """Set the wide half from the training documents: bigram rows, naive Bayes ratios, then the regression.

        With ``bigrams="exact"`` the bigram rows go first to the bigrams of the
        documents, the ``ngram_buckets`` found in the most documents when there
        are more (ties: the smaller key); the table is then the logistic
        regression :func:`~attnkit.models.wide_fit.fit_nb_regression` fits on the features scaled by
        :meth:`naive_bayes_table` (NB-LR; Wang and Manning, 2012). With hashed
        rows (runs saved before) it is the naive Bayes table itself. Called by
        :func:`attnkit.train.pipeline.fit_classifier` on a new model, with the
        training part only.

        Shape:
            documents: token-id lists (one per document, ids in ``[0, vocab_size)``);
            labels: class indices in ``[0, C)``, one per document.
        """
        if len(documents) != len(labels):
            raise ValueError(f"documents and labels must have the same length, got {len(documents)} "
                             f"and {len(labels)}")
        if self.bigram_keys is not None:
            self.bigram_keys.copy_(frequent_bigrams(self, documents, chunk))
        counts = ngram_counts(self, documents, chunk)  # (N, V + buckets), sparse
        ratios = naive_bayes_ratios(counts, labels, self.config.num_classes, alpha)  # (V + buckets, C)
        if self.wide_bias is None:  # hashed rows: the naive Bayes table itself
            self.wide.copy_(ratios.to(self.wide.dtype))
            return
        table, bias = fit_nb_regression(counts, labels, ratios)
        self.wide.copy_(table.to(self.wide.dtype))
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
            returns ``(vocab_size + ngram_buckets, C)`` float64.
        """
        return naive_bayes_ratios(ngram_counts(self, documents, chunk), labels, self.config.num_classes, alpha)

    def _features(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """:func:`ngram_features` of a padded batch with this model's bigram rows; mask ``(B, 1, 1, T)``."""
        c = self.config
        return ngram_features(ids, mask[:, 0, 0], c.vocab_size, c.ngram_buckets, self.bigram_keys)

    def wide_logits(self, ids: Tensor, mask: Tensor) -> Tensor:
        """The wide half's logits: its table summed over the document's n-grams, over their count's root, plus its bias.

        Shape:
            ids ``(B, T)``, mask ``(B, 1, 1, T)``; returns ``(B, C)``.
        """
        feats, real = self._features(ids, mask)  # (B, F)
        keep = real.to(self.wide.dtype)  # (B, F)
        total = (self.wide[feats] * keep[..., None]).sum(1)  # (B, C)
        logits = total / keep.sum(1, keepdim=True).clamp_min(1.0).sqrt()
        return logits if self.wide_bias is None else logits + self.wide_bias

    def _deep_logits(self, ids: Tensor, lengths: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The deep half's logits ``(B, C)`` and pooling weights ``(B, T)``."""
        words = ids
        if self.training and self.config.word_dropout > 0:
            drop = torch.rand(ids.shape, device=ids.device) < self.config.word_dropout
            words = ids.masked_fill(drop & (ids > 0), _UNK)
        h = self.dropout(self.embedding(words))  # (B, T, E)
        if self.lstm is not None:
            h = run_packed(self.lstm, h, lengths)  # (B, T, 2H)
        doc, pool_w = self.pooling(h, mask=mask, return_weights=True)  # (B, width), (B, T)
        return self.classifier(self.dropout(doc)), pool_w  # (B, C), (B, T)

    def classify(
        self, ids: Tensor, lengths: Tensor, mask: Tensor, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The deep half's logits (training) or deep plus scaled naive Bayes logits, and the pooling weights.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask ``(B, 1, 1, T)``; returns ``(B, C)`` and
            ``{"pooling": (B, T)}``.
        """
        deep, pool_w = self._deep_logits(ids, lengths, mask)
        if self.training:  # the deep half learns on its own; the two are summed to predict
            return deep, {"pooling": pool_w}
        return deep + self.wide_scale * self.wide_logits(ids, mask), {"pooling": pool_w}
