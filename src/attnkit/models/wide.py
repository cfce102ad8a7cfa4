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

**Long documents.** With ``chunk_len > 0`` (the recipe sets it to the run's
``--max-len``) a document longer than ``chunk_len`` tokens is read in
overlapping chunks instead of being cut::

    chunk k     = tokens [k S, k S + L)      L = chunk_len, S = L - round(chunk_overlap L), k < K
    c_k, alpha  = Pool_attn(Embed(chunk k))  (B, K, E)  the token pooling above, within each chunk
    doc, beta   = Pool_attn_chunks(c_1..c_K) (B, E)     attention over the chunk vectors, as the
                                                         hierarchical model pools its sentences

A document has ``1 + ceil((T - L) / S)`` chunks, at most ``max_chunks``; the
data is encoded up to :meth:`WideDeepClassifierConfig.reading_length` tokens,
so the n-gram half reads the whole of that span too. Padding chunks (a short
document beside a long one) are never encoded and get no pooling weight, so a
document's logits do not depend on its batch. ``weights["pooling"]`` is
``beta_k alpha_kt`` summed over the chunks that hold token ``t``: it still sums
to 1 over the document. ``chunk_len = 0`` reads the ids as one sequence (runs
saved before chunking load that way).

Shape legend: B batch, T tokens, E embedding width, C classes, F n-gram features per document (2T - 1),
K chunks, L tokens per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode
from attnkit.core.masks import AttentionMask
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

__all__ = ["WideDeepClassifierConfig", "WideDeepClassifier", "ngram_features", "ENCODERS", "BIGRAMS", "WIDE_C",
           "chunk_counts", "chunked_documents"]

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
        chunk_len: tokens per chunk L of a long document (the run's ``max_len``); 0: no chunks,
            the ids are read as one sequence.
        max_chunks: most chunks read of one document; the tokens past them are not read.
        chunk_overlap: share of a chunk's tokens that the next chunk reads again, in ``[0, 1)``.
    """

    embed_dim: int = 64
    encoder: str = "none"
    hidden_size: int = 128
    attention_dim: int = 64
    dropout: float = 0.5
    ngram_rows: int = 200_000
    word_dropout: float = 0.1
    bigrams: str = "exact"
    chunk_len: int = 0
    max_chunks: int = 8
    chunk_overlap: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embed_dim", "hidden_size", "attention_dim", "ngram_rows", "max_chunks"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("chunk_len", self.chunk_len, allow_zero=True)
        check_fraction("chunk_overlap", self.chunk_overlap)
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("bigrams", self.bigrams, BIGRAMS)
        for name in ("dropout", "word_dropout"):
            check_fraction(name, getattr(self, name))

    @property
    def chunks(self) -> bool:
        """Whether a long document is read in several chunks (``chunk_len > 0`` and ``max_chunks > 1``)."""
        return self.chunk_len > 0 and self.max_chunks > 1

    @property
    def chunk_stride(self) -> int:
        """Tokens S from one chunk's start to the next: ``chunk_len`` less the overlap, at least 1."""
        return max(1, self.chunk_len - round(self.chunk_overlap * self.chunk_len))

    def activation_bytes(self, tokens: int) -> int:
        """Bytes one training step holds for a batch of ``tokens`` padded tokens: what the forward pass
        saves for the backward one, and about as much again for its gradients.

        Measured with ``torch.autograd.graph.saved_tensors_hooks`` on chunked batches: about
        ``9 E + 5 A + 53`` bytes a token saved with the embeddings read directly (965 at the defaults),
        about 120 bytes per unit of ``hidden_size`` more with ``encoder="lstm"``; the estimate rounds
        these up to ``10 E + 6 A + 64`` and ``128 H``, and doubles the sum.
        """
        per_token = 10 * self.embed_dim + 6 * self.attention_dim + 64
        if self.encoder == "lstm":
            per_token += 128 * self.hidden_size
        return 2 * per_token * tokens

    def reading_length(self, max_len: int) -> int:
        """Most tokens of a document the model reads: ``L + (max_chunks - 1) S`` with chunks, else ``max_len``."""
        return self.chunk_len + (self.max_chunks - 1) * self.chunk_stride if self.chunks else max_len


def chunked_documents(model_or_config: object, lengths: Sequence[int]) -> int | None:
    """How many of the documents of ``lengths`` tokens a model reads in more than one chunk (None: no chunks)."""
    config = getattr(model_or_config, "config", model_or_config)
    if not isinstance(config, WideDeepClassifierConfig) or not config.chunks:
        return None
    return sum(int(n > config.chunk_len) for n in lengths)


def chunk_counts(lengths: Tensor, chunk_len: int, stride: int, max_chunks: int) -> Tensor:
    """Chunks of each document: ``1 + ceil((T_b - L) / S)`` (1 when it fits in one), at most ``max_chunks``.

    Shape:
        lengths ``(B,)``; returns ``(B,)`` int64.
    """
    extra = (lengths - chunk_len).clamp(min=0)
    return (1 + torch.div(extra + stride - 1, stride, rounding_mode="floor")).clamp(max=max_chunks)


def _fold(values: Tensor, place: Tensor, shape: torch.Size) -> Tensor:
    """Sum chunk-token values onto their document positions (overlapping chunks add up).

    Shape:
        values ``(N, L, *D)``, place ``(N, L)`` (-1: not a token); returns ``(*shape, *D)``.
    """
    inside = place >= 0
    out = values.new_zeros(shape.numel(), *values.shape[2:])
    out.index_add_(0, place[inside], values[inside])
    return out.view(*shape, *values.shape[2:])


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
        # attention over the chunk vectors of a long document (none when documents are read whole)
        self.chunk_pooling = AttentionPooling(width, hidden_dim=c.attention_dim) if c.chunks else None
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(width, c.num_classes)
        # the wide half: buffers wide, bigram_keys, wide_bias, wide_scale (NgramHalf)
        self._add_ngram_half(c.vocab_size, c.ngram_rows, c.num_classes, exact=c.bigrams == "exact")

    def _encode(self, h: Tensor, lengths: Tensor) -> Tensor:
        """The vectors the pooling reads: the embeddings ``h (N, T, E)``, or the BiLSTM's states over them."""
        return run_packed(self.lstm, h, lengths) if self.lstm is not None else h

    def _read(self, words: Tensor, lengths: Tensor, mask: AttentionMask
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """The pooled document vectors and how each token's state counts in them.

        Returns ``doc (B, width)``, token weights ``(B, T)``, and the states with their weights in the
        layout they were read: ``(B, T, width)`` and ``(B, T)`` for documents read whole (place None);
        for chunked ones the real chunks' ``(N, L, width)``, ``beta_k alpha_kt`` ``(N, L)`` and
        ``place (N, L)``, each chunk token's index in the flattened ``(B * T)`` batch, -1 past its end.
        """
        c = self.config
        embedded = self.dropout(self.embedding(words))  # (B, T, E): once, so the embeddings line up with the tokens
        if not c.chunks or words.shape[1] <= c.chunk_len:
            h = self._encode(embedded, lengths)  # (B, T, width)
            doc, pool_w = self.pooling(h, mask=mask, return_weights=True)  # (B, width), (B, T)
            return doc, pool_w, h, pool_w, None
        stride = c.chunk_stride
        counts = chunk_counts(lengths, c.chunk_len, stride, c.max_chunks)  # (B,)
        k = int(counts.max())
        offsets = torch.arange(k, device=words.device) * stride  # (K,)
        real = torch.arange(k, device=words.device) < counts[:, None]  # (B, K): padding chunks are never read
        doc_of, chunk_of = real.nonzero(as_tuple=True)  # (N,), (N,)
        starts = offsets[chunk_of]  # (N,)
        chunk_lengths = (lengths[doc_of] - starts).clamp(max=c.chunk_len)  # (N,) all >= 1
        positions = starts[:, None] + torch.arange(c.chunk_len, device=words.device)  # (N, L)
        inside = positions < (starts + chunk_lengths)[:, None]  # (N, L)
        gathered = embedded[doc_of[:, None], positions.clamp(max=words.shape[1] - 1)]  # (N, L, E)
        h = self._encode(gathered.masked_fill(~inside[..., None], 0.0), chunk_lengths)  # (N, L, width)
        vectors, alpha = self.pooling(h, mask=inside, return_weights=True)  # (N, width), (N, L)
        grid = vectors.new_zeros(real.shape[0], k, vectors.shape[-1])  # (B, K, width)
        grid[doc_of, chunk_of] = vectors
        assert self.chunk_pooling is not None
        doc, beta = self.chunk_pooling(grid, mask=real, return_weights=True)  # (B, width), (B, K)
        weights = beta[doc_of, chunk_of, None] * alpha  # (N, L): beta_k alpha_kt
        place = (doc_of[:, None] * words.shape[1] + positions).masked_fill(~inside, -1)  # (N, L)
        return doc, _fold(weights, place, words.shape), h, weights, place

    def _deep_logits(self, ids: Tensor, lengths: Tensor, mask: AttentionMask) -> tuple[Tensor, Tensor]:
        """The deep half's logits ``(B, C)`` and pooling weights ``(B, T)``."""
        words = ids
        if self.training and self.config.word_dropout > 0:
            drop = torch.rand(ids.shape, device=ids.device) < self.config.word_dropout
            words = ids.masked_fill(drop & (ids > 0), _UNK)
        doc, pool_w, *_ = self._read(words, lengths, mask)  # (B, width), (B, T)
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
    def weighted_norms(self, ids: Tensor, lengths: Tensor) -> Tensor:
        """``||alpha_t h_t||`` of each token (Kobayashi et al., 2020), summed over the chunks that read it.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns ``(B, T)`` (zero on padding).
        """
        ids, lengths, mask = self.prepare(ids, lengths)
        _, _, h, weights, place = self._read(ids, lengths, mask)
        norms = weights * h.norm(dim=-1)  # (B, T), or (N, L) per chunk
        return norms if place is None else _fold(norms, place, ids.shape)

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
        share is exact over positions, not over the words alone. A document
        read in chunks sums each token's shares over the chunks that read it
        (still exact). The mode is left as it was.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns contributions ``(B, T, C)`` (zero on padding)
            and the bias ``(B, C)``.
        """
        ids, lengths, mask = self.prepare(ids, lengths)
        with eval_mode(self):
            _, _, h, weights, place = self._read(ids, lengths, mask)
            per = linear_head_contributions(weights, h, self.classifier)  # (B, T, C), or (N, L, C) per chunk
            if place is not None:
                per = _fold(per, place, ids.shape)  # (B, T, C)
            bias = self.classifier.bias.expand(ids.shape[0], -1)
            if self.has_ngram_half:
                tokens, wide_bias = self.token_ngram_contributions(ids, mask)
                per, bias = per + tokens.to(per.dtype), bias + wide_bias.to(bias.dtype)
        return per, bias
