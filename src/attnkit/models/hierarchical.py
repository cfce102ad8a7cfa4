"""Hierarchical Attention Network (Yang et al., 2016, "Hierarchical Attention Networks
for Document Classification").

Documents are made of sentences, sentences of words; HAN attends at both levels::

    word level      h_it = BiGRU(x_i1..x_iT)_t        alpha_it = softmax_t(u_w^T tanh(W_w h_it + b_w))
                    s_i  = sum_t alpha_it h_it        one vector per sentence
    sentence level  h_i  = BiGRU(s_1..s_S)_i          beta_i   = softmax_i(u_s^T tanh(W_s h_i + b_s))
                    v    = sum_i beta_i h_i           logits = W_c v + b_c

The importance of token ``t`` of sentence ``i`` for the document is
``beta_i * alpha_it``; these products sum to 1 over the document, and they are
what ``weights["pooling"]`` returns, at each token's position in the original
document, so explanations read the same as for the flat models.

**Input.** The common ``(ids (B, T), lengths (B,))`` batch: the model splits
each document into sentences itself with :func:`split_sentences` -- a sentence
ends after a token in ``config.sentence_end_ids`` (the ids of ``.``, ``!``,
``?``; see :func:`sentence_end_ids`) or after ``config.sentence_len`` tokens.
Already split input ``(B, S, L)`` with per-sentence ``lengths (B, S)`` is
accepted too; its ``"pooling"`` weights are then ``(B, S * L)``, the sentences
laid end to end with their padding.

Deviation from the paper: GRUs run on packed sequences and padded sentences
are skipped, so padding never changes the result.

**The n-gram half.** By default (``ngram_rows > 0``) the network's logits
get the default recipe's n-gram half added to predict
(:class:`~attnkit.models.ngram_half.NgramHalf`: NB-LR over the document's
word 1-2-grams, fitted before training, left out while the network trains,
weighed beside it on the validation part). On IMDB the sum reaches 91.6%
where the network alone reaches 90.1% and the half alone 90.7% (README).
``ngram_rows=0`` is the paper's model alone.

Shape legend: B batch, T tokens, S sentences, L tokens per sentence, E
embedding width, Hw/Hs word/sentence GRU widths, C classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core import masks
from attnkit.layers.pooling import AttentionPooling
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.config import (
    TextClassifierConfig,
    check_fraction,
    check_positive_int,
    check_token_batch,
    valid_positions,
)
from attnkit.models.ngram_half import NgramHalf
from attnkit.models.sentiment import run_packed

__all__ = [
    "HierarchicalAttentionNetworkConfig",
    "HierarchicalAttentionNetwork",
    "split_sentences",
    "sentence_end_ids",
]


def sentence_end_ids(tokenizer: Any, marks: Iterable[str] = (".", "!", "?")) -> tuple[int, ...]:
    """Ids of the sentence-ending ``marks`` in ``tokenizer`` (those it knows), for the config."""
    found = (tokenizer.token_to_id(mark) for mark in marks)
    return tuple(sorted({i for i in found if i is not None}))


def split_sentences(
    ids: Tensor, lengths: Tensor, end_ids: Sequence[int], sentence_len: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Cut each document into sentences: after a token in ``end_ids``, or after ``sentence_len`` tokens.

    Only the first ``lengths[b]`` tokens are read, so padding does not change the split.

    Shape:
        ids ``(B, T)``, lengths ``(B,)``; returns sentence ids ``(B, S, L)``
        (padded with 0), sentence lengths ``(B, S)`` (0 for padding sentences,
        which come last) and ``positions (B, S, L)``: the index in ``ids`` of each
        sentence token, -1 for padding.
    """
    ends = set(end_ids)
    docs: list[list[list[int]]] = []
    for row, length in zip(ids.tolist(), lengths.tolist(), strict=True):
        sentences: list[list[int]] = [[]]
        for position in range(length):
            if len(sentences[-1]) == sentence_len:
                sentences.append([])
            sentences[-1].append(position)
            if row[position] in ends and position < length - 1:
                sentences.append([])
        docs.append(sentences)
    s = max(len(d) for d in docs)
    width = max(len(sent) for d in docs for sent in d)
    positions = torch.full((len(docs), s, width), -1, dtype=torch.long)  # (B, S, L)
    for b, doc in enumerate(docs):
        for i, sent in enumerate(doc):
            positions[b, i, : len(sent)] = torch.tensor(sent, dtype=torch.long)
    positions = positions.to(ids.device)
    real = positions >= 0  # (B, S, L)
    gathered = ids.gather(1, positions.clamp(min=0).flatten(1)).view_as(positions)  # (B, S, L)
    return gathered.masked_fill(~real, 0), real.sum(-1), positions


@dataclass(frozen=True)
class HierarchicalAttentionNetworkConfig(TextClassifierConfig):
    """Configuration of :class:`HierarchicalAttentionNetwork` (defaults from the paper).

    Attributes:
        vocab_size, num_classes: sizes of the token vocabulary and the label set.
        embed_dim: word embedding width (paper: 200).
        word_hidden, sentence_hidden: GRU width per direction (paper: 50).
        attention_dim: width of both attention scorers (paper: 100).
        dropout: on embeddings, sentence vectors and before the classifier.
        sentence_end_ids: token ids that end a sentence (``.``, ``!``, ``?``).
        sentence_len: a sentence longer than this is cut into pieces.
        ngram_rows: bigram rows of the n-gram half (:class:`~attnkit.models.ngram_half.NgramHalf`),
            fitted on the training part and added to the logits to predict; 0: none,
            the paper's model alone.
    """

    embed_dim: int = 200
    word_hidden: int = 50
    sentence_hidden: int = 50
    attention_dim: int = 100
    dropout: float = 0.1
    sentence_end_ids: tuple[int, ...] = ()
    sentence_len: int = 50
    ngram_rows: int = 200_000

    @classmethod
    def tokenizer_defaults(cls, tokenizer: Any) -> dict[str, Any]:
        """The sentence ends: the ids of ``.``, ``!``, ``?`` in the run's tokenizer."""
        return {"sentence_end_ids": sentence_end_ids(tokenizer)}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embed_dim", "word_hidden", "sentence_hidden", "attention_dim", "sentence_len"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("ngram_rows", self.ngram_rows, allow_zero=True)
        check_fraction("dropout", self.dropout)
        ids = self.sentence_end_ids
        if not isinstance(ids, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.vocab_size for i in ids
        ):
            raise ValueError(
                f"sentence_end_ids must be a tuple of token ids in [0, {self.vocab_size}), got {ids!r}"
            )


class HierarchicalAttentionNetwork(NgramHalf, TextClassifier):
    """Word-level and sentence-level BiGRU encoders, each with attention pooling.

    Parameters are named ``embedding.weight``, ``word_rnn.*``, ``word_pooling.*``,
    ``sentence_rnn.*``, ``pooling.*`` (the sentence-level attention, which
    produces the document vector) and ``classifier.{weight,bias}``; with
    ``ngram_rows > 0`` the n-gram half's buffers, added to the logits in eval mode.

    Shape:
        ids ``(B, T)`` with lengths ``(B,)``, or ``(B, S, L)`` with lengths ``(B, S)``;
        returns logits ``(B, C)`` and, on request, ``{"pooling": (B, T),
        "words": (B, S, L), "sentences": (B, S)}``.
    """

    WEIGHTS = ("pooling", "words", "sentences")
    config: HierarchicalAttentionNetworkConfig

    def __init__(self, config: HierarchicalAttentionNetworkConfig) -> None:
        super().__init__()
        if not isinstance(config, HierarchicalAttentionNetworkConfig):
            raise TypeError(
                f"config must be a HierarchicalAttentionNetworkConfig, got {type(config).__name__}"
            )
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim, padding_idx=0)
        self.word_rnn = nn.GRU(c.embed_dim, c.word_hidden, batch_first=True, bidirectional=True)
        self.word_pooling = AttentionPooling(2 * c.word_hidden, hidden_dim=c.attention_dim)
        self.sentence_rnn = nn.GRU(
            2 * c.word_hidden, c.sentence_hidden, batch_first=True, bidirectional=True
        )
        self.pooling = AttentionPooling(2 * c.sentence_hidden, hidden_dim=c.attention_dim)
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(2 * c.sentence_hidden, c.num_classes)
        self._add_ngram_half(c.vocab_size, c.ngram_rows, c.num_classes)

    def prepare(self, ids: object, lengths: object) -> tuple[Tensor, Tensor, masks.AttentionMask]:
        """Validate the batch and build its mask once.

        A ``(B, T)`` batch is checked as for every text classifier (its mask
        allowed ``(B, 1, 1, T)``). A split ``(B, S, L)`` batch returns its
        word-level mask, allowed ``(B * S, 1, 1, L)``. The word pooling reads
        the mask of the real sentences and the sentence pooling that of the
        real sentences of each document, each made once where that level's
        batch is formed (:meth:`_classify`).
        """
        if isinstance(ids, Tensor) and ids.dim() == 3:
            ids, lengths = self._check_split(ids, lengths)
            return ids, lengths, masks.AttentionMask.from_lengths(lengths.flatten(), ids.shape[2])
        return super().prepare(ids, lengths)

    def ngram_input(self, ids: Tensor, mask: masks.AttentionMask) -> tuple[Tensor, masks.AttentionMask]:
        """A split batch's sentences end to end for the n-gram half (bigrams across sentences are lost)."""
        if ids.dim() == 3:
            return ids.flatten(1), masks.AttentionMask(mask.key_mask().reshape(ids.shape[0], 1, 1, -1))
        return ids, mask

    def classify_own(
        self, ids: Tensor, lengths: Tensor, mask: masks.AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The network's logits for a prepared batch (and word, sentence and token weights when asked).

        Shape:
            ids ``(B, T)`` + lengths ``(B,)`` + mask allowed ``(B, 1, 1, T)``, or ``(B, S, L)`` +
            ``(B, S)`` + word mask allowed ``(B * S, 1, 1, L)``; returns ``(B, C)`` and the weights dict.
        """
        if ids.dim() == 3:
            sent_ids, sent_lens = ids, lengths
            b, s, width = ids.shape
            positions = torch.arange(s * width, device=ids.device).view(s, width)
            positions = positions.expand_as(ids).masked_fill(~mask.key_mask().view(b, s, width), -1)  # (B, S, L)
            t = s * width
        else:
            sent_ids, sent_lens, positions = split_sentences(
                ids, lengths, self.config.sentence_end_ids, self.config.sentence_len
            )
            t = ids.shape[1]
        logits, word_w, sent_w = self._classify(sent_ids, sent_lens)
        if weights is None:
            return logits, {}
        token_w = (sent_w[:, :, None] * word_w).flatten(1)  # (B, S * L)
        flat_pos = positions.flatten(1)  # (B, S * L)
        pooling = token_w.new_zeros(token_w.shape[0], t + 1)  # (B, T + 1): column T takes padding
        pooling.scatter_(1, flat_pos.masked_fill(flat_pos < 0, t), token_w)
        return logits, {"pooling": pooling[:, :t], "words": word_w, "sentences": sent_w}

    def _check_split(self, ids: Tensor, lengths: object) -> tuple[Tensor, Tensor]:
        if not isinstance(lengths, Tensor) or lengths.shape != ids.shape[:2]:
            shape = tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__
            raise ValueError(
                f"with ids (B, S, L) = {tuple(ids.shape)}, lengths must be (B, S) = "
                f"{tuple(ids.shape[:2])} sentence lengths, got {shape}"
            )
        counts = (lengths > 0).sum(-1)  # (B,)
        trailing = valid_positions(counts, ids.shape[1])
        if bool((lengths < 0).any() | (lengths > ids.shape[2]).any()) or not bool(
            torch.equal(trailing, lengths > 0)
        ) or int(counts.min()) < 1:
            raise ValueError(
                f"sentence lengths must lie in [0, L={ids.shape[2]}], with every document holding "
                "at least one sentence and empty sentences only at the end"
            )
        flat, _ = check_token_batch(
            ids.flatten(1), (ids.shape[1] * ids.shape[2]) * torch.ones_like(counts),
            self.config.vocab_size,
        )
        return flat.view_as(ids), lengths.long()

    def _classify(self, sent_ids: Tensor, sent_lens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, s, width = sent_ids.shape
        flat_ids, flat_lens = sent_ids.view(b * s, width), sent_lens.view(b * s)  # (B*S, L), (B*S,)
        real = flat_lens > 0  # padding sentences are skipped entirely
        x = self.dropout(self.embedding(flat_ids[real]))  # (N, L, E)
        h = run_packed(self.word_rnn, x, flat_lens[real])  # (N, L, 2Hw)
        word_mask = masks.AttentionMask.from_lengths(flat_lens[real], width)  # the real sentences' words
        vec, w = self.word_pooling(h, mask=word_mask, return_weights=True)  # (N, 2Hw), (N, L)
        sent_vec = vec.new_zeros(b * s, vec.shape[-1]).index_put((real,), vec)  # (B*S, 2Hw)
        word_w = w.new_zeros(b * s, width).index_put((real,), w).view(b, s, width)  # (B, S, L)
        counts = real.view(b, s).sum(-1)  # (B,)
        hs = run_packed(self.sentence_rnn, self.dropout(sent_vec.view(b, s, -1)), counts)  # (B, S, 2Hs)
        sentence_mask = masks.AttentionMask.from_lengths(counts, s)  # allowed (B, 1, 1, S): the real sentences
        doc, sent_w = self.pooling(hs, mask=sentence_mask, return_weights=True)
        return self.classifier(self.dropout(doc)), word_w, sent_w  # (B, C), (B, S, L), (B, S)
