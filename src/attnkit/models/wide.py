"""Naive Bayes and attention: the default text classifier, a product of two experts.

::

    deep    = W_c Pool_attn(Embed(ids)) + b_c                   (B, C)  attention pooling over word embeddings
    f_b     = {ids_t} ∪ {(ids_t, ids_t+1)}                      the document's word 1- and 2-grams
    wide    = sum_{f in f_b} W[f] / sqrt(|f_b|) + b_w            (B, C)  W = R * U: NB-LR over the n-grams
    logits  = deep            while training                    (B, C)
    logits  = deep + wide     to validate while training        (B, C)
    logits  = a deep + b wide to predict                        (B, C)  a, b fitted on the validation part

The wide half is :class:`~attnkit.models.ngram_half.NgramHalf` (see there:
NB-LR, fitted before the deep half trains, left out while it trains, the two
weighed by stacking on the validation part afterwards); the deep half is
attention pooling over word embeddings, which generalises over words and
their contexts in a way the n-gram counts cannot. Figures: the default recipe
in the README (above the TF-IDF baseline on MR, SMS, AG News, IMDB and five
unseen sets).

* The unigram features are the token ids themselves. Each bigram of the
  training part has a row of its own after the vocabulary (``bigrams="exact"``;
  the ``ngram_rows`` bigrams found in the most training documents when there
  are more): the sorted pair keys ``a * vocab_size + b`` are a buffer, and a
  document's bigrams are found in it by binary search; a bigram never seen in
  training adds nothing. ``bigrams="hashed"`` hashes the pairs into the rows
  instead (``(a * 1000003 + b) mod ngram_rows``); that hash uses fewer
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

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.attention.masks import AttentionMask
from attnkit.layers.pooling import AttentionPooling, linear_head_contributions
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.config import (
    TextClassifierConfig,
    check_choice,
    check_fraction,
    check_positive_int,
)
from attnkit.models.ngram_half import WIDE_C, NgramHalf, ngram_features
from attnkit.models.sentiment import run_packed

__all__ = ["WideDeepClassifierConfig", "WideDeepClassifier", "ngram_features", "ENCODERS", "BIGRAMS", "WIDE_C"]

ENCODERS = ("none", "lstm")
BIGRAMS = ("exact", "hashed")

_UNK = 1  # the tokenizers' [UNK] id ([PAD] is 0)


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
        ngram_rows: rows for word bigrams in the linear half's table (the
            most frequent training bigrams, or hash buckets with ``bigrams="hashed"``).
        bigrams: ``"exact"`` (a row per training bigram) or ``"hashed"`` (pairs hashed into the rows).
        word_dropout: share of a training document's words replaced by ``[UNK]`` in the deep half.
    """

    embed_dim: int = 64
    encoder: str = "none"
    hidden_size: int = 128
    attention_dim: int = 64
    dropout: float = 0.5
    ngram_rows: int = 200_000
    word_dropout: float = 0.1
    bigrams: str = "exact"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embed_dim", "hidden_size", "attention_dim", "ngram_rows"):
            check_positive_int(name, getattr(self, name))
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("bigrams", self.bigrams, BIGRAMS)
        for name in ("dropout", "word_dropout"):
            check_fraction(name, getattr(self, name))


class WideDeepClassifier(NgramHalf, TextClassifier):
    """Attention pooling over word embeddings (optionally a BiLSTM's states) plus naive Bayes over n-grams.

    Parameters are named ``embedding.weight``, ``lstm.*`` (``encoder="lstm"``),
    ``pooling.*`` and ``classifier.{weight,bias}`` (the deep half); the buffer
    ``wide`` ``(vocab_size + ngram_rows, C)`` holds the naive Bayes half.

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
        # the wide half: buffers wide, bigram_keys, wide_bias, wide_scale (NgramHalf)
        self._add_ngram_half(c.vocab_size, c.ngram_rows, c.num_classes, exact=c.bigrams == "exact")

    def _deep_logits(self, ids: Tensor, lengths: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor]:
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

    def classify_own(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The deep half's logits and the pooling weights (the mixin's ``classify`` adds the wide half).

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)`` and
            ``{"pooling": (B, T)}``.
        """
        deep, pool_w = self._deep_logits(ids, lengths, mask)  # the deep half learns on its own
        return deep, {"pooling": pool_w}

    @torch.no_grad()
    def token_contributions(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """What each token adds to each class's logit in eval mode (both halves), and the bias: exact.

        The deep half's ``W (sum_t alpha_t h_t) + b`` splits into
        ``alpha_t (W h_t)`` per token (:func:`~attnkit.layers.pooling.linear_head_contributions`);
        the n-gram half's per-n-gram terms fold onto their tokens
        (:meth:`~attnkit.models.ngram_half.NgramHalf.token_ngram_contributions`).
        The sum of both plus the bias (the deep half's ``b`` and the n-gram
        half's scaled bias) is the model's eval-mode logits to float rounding.
        With ``encoder="lstm"`` the deep half's ``h_t`` carries context, so its
        share is exact over positions, not over the words alone. The mode is
        left as it was.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns contributions ``(B, T, C)`` (zero on padding)
            and the bias ``(B, C)``.
        """
        ids, lengths, mask = self.prepare(ids, lengths)
        was_training = self.training
        self.eval()
        try:
            h = self.embedding(ids)  # (B, T, E)
            if self.lstm is not None:
                h = run_packed(self.lstm, h, lengths)  # (B, T, 2H)
            _, pool_w = self.pooling(h, mask=mask, return_weights=True)  # (B, T)
            per = linear_head_contributions(pool_w, h, self.classifier)  # (B, T, C)
            bias = self.classifier.bias.expand(ids.shape[0], -1)
            if self.has_ngram_half:
                tokens, wide_bias = self.token_ngram_contributions(ids, mask)
                per, bias = per + tokens.to(per.dtype), bias + wide_bias.to(bias.dtype)
        finally:
            self.train(was_training)
        return per, bias
