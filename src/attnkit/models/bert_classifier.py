"""A BERT encoder with a classification head, for fine-tuning pretrained checkpoints.

Devlin et al. (2019), section 4.1: the final hidden state of the ``[CLS]``
token, ``h_[CLS]``, is the document vector; one linear layer maps it to the
class logits, and every weight (encoder and head) is trained::

    s      = [CLS] w_1 ... w_n [SEP]                 the tokens of one document
    H      = BERT(s)                                 (B, T + 2, D)
    doc    = H[:, 0]          (pooling="cls")        (B, D)
           | mean_t H[:, t]   (pooling="mean", real tokens only)
    logits = W dropout(doc) + b                      (B, C)

The head reads ``h_[CLS]`` directly, not BERT's tanh pooler (the
next-sentence head): many distilled checkpoints such as MiniLM never trained
that pooler.

**Token ids.** The model follows attnkit's text-classifier convention: it
takes ``ids (B, T)`` *without* special tokens and ``lengths (B,)``, exactly as
:class:`attnkit.data.batching.TextClassificationDataset` produces them with a
WordPiece tokenizer, and inserts ``[CLS]`` in front and ``[SEP]`` after the
last real token itself (their ids are config fields). So the training
pipeline, ``attnkit evaluate`` and ``attnkit predict`` need nothing special
for BERT, and ``T`` can be at most ``max_position_embeddings - 2``.

**What ``weights["pooling"]`` means.** BERT has no pooling attention; the
closest reading of "which words the answer looked at" is the ``[CLS]`` query
row of the last layer's attention, averaged over heads. Its mass on ``[CLS]``
and ``[SEP]`` themselves (often most of it: Clark et al., 2019, "What does
BERT look at?") is dropped and the rest renormalised over the real tokens, so
``weights["pooling"]`` is a ``(B, T)`` distribution over the input tokens that
sums to 1 per document and is zero on padding -- what ``predict --explain``
ranks. It is a reading aid, not an explanation of the whole network.
``weights["layers"]`` holds every layer's full maps, special tokens included.

Shape legend: B batch, T tokens (without specials), S = T + 2, D hidden size,
H heads, L layers, C classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.masks import AttentionMask
from attnkit.layers.multi_head import Dropout
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.bert import BertConfig, BertModel
from attnkit.models.config import (
    ModelConfig,
    check_choice,
    check_fraction,
    check_positive_int,
    valid_positions,
)
from attnkit.models.ngram_half import NgramHalf
from attnkit.models.packed import PackedBatch, packed_batch

__all__ = ["BertClassifierConfig", "BertClassifier", "BERT_POOLINGS"]

BERT_POOLINGS = ("cls", "mean")
_BERT_FIELDS = tuple(f.name for f in dataclasses.fields(BertConfig))


@dataclass(frozen=True, kw_only=True)
class BertClassifierConfig(BertConfig, ModelConfig):
    """Configuration of :class:`BertClassifier`: the BERT architecture plus the head.

    It *is* a :class:`attnkit.models.bert.BertConfig` (it inherits the
    architecture fields ``vocab_size`` ... ``pad_token_id``, their defaults and
    their checks) with the head's fields added, so a saved run rebuilds the
    network without the original pretrained folder. The fields stay flat: the
    dict of :meth:`to_dict` (what a run's ``config.json`` stores), the keys of
    ``--model-opt`` and the dicts saved by earlier versions are all the same
    one-level mapping, read by the strict :meth:`from_dict`. The head's fields
    are keyword-only.

    Attributes:
        num_classes: size of the label set.
        pooling: ``"cls"`` (the ``[CLS]`` hidden state, as in the paper) or
            ``"mean"`` (mean of the real tokens' hidden states).
        classifier_dropout: dropout on the document vector before the head.
        cls_token_id, sep_token_id: ids of ``[CLS]`` and ``[SEP]`` in the vocabulary.
        max_len: the longest input ``T`` (without specials) the run feeds;
            ``max_len + 2`` must fit ``max_position_embeddings``.
        ngram_rows: bigram rows of the n-gram half (:class:`~attnkit.models.ngram_half.NgramHalf`,
            over the WordPiece ids), fitted on the training part and added to the
            head's logits to predict; 0: no n-gram half.
        ngram_len: tokens of each document the n-gram half reads when it reads more than the encoder:
            the encoder reads ``max_len`` of them (``tail_share``), the half (a sum over n-grams, whose cost
            hardly grows with the length) all of them, so a long document is not judged by its first
            ``max_len`` tokens alone; 0 (or no half): both read the first ``max_len``.
        frozen_layers: how many of the encoder's bottom layers keep the weights they start with
            (the pretrained ones), the embeddings with them when any do; 0: every weight trains.
            Nothing below the lowest trained layer needs a backward pass: with 2 of MiniLM's 6 layers
            frozen a step costs about two thirds of a full one (``--preset balanced``).
        tail_share: of the ``max_len`` tokens the encoder reads of a document its n-gram half reads
            further (``ngram_len``), the share that are the document's last ones: ``k = round(max_len *
            tail_share)``, and the encoder reads its first ``max_len - k`` tokens and its last ``k`` (head
            and tail, Sun et al., 2019: a review's verdict often ends it); 0: its first ``max_len``. A
            document of at most ``max_len`` tokens is read whole either way.
        frozen_word_embeddings: the WordPiece table (MiniLM: 11.7 of its 22.7 million weights) keeps its
            pretrained rows while every layer trains: a step then skips that table's dense gradient and
            its optimizer update (about 9% of a step of 32 sentences of 32 tokens on a CPU).
    """

    num_classes: int
    cls_token_id: int = 101
    sep_token_id: int = 102
    pooling: str = "cls"
    classifier_dropout: float = 0.1
    max_len: int = 128
    ngram_rows: int = 200_000
    ngram_len: int = 0
    frozen_layers: int = 0
    tail_share: float = 0.0
    frozen_word_embeddings: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()  # BertConfig checks the architecture fields
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {self.num_classes!r}")
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("max_len", self.max_len)
        check_positive_int("ngram_rows", self.ngram_rows, allow_zero=True)
        check_positive_int("ngram_len", self.ngram_len, allow_zero=True)
        check_positive_int("frozen_layers", self.frozen_layers, allow_zero=True)
        if self.frozen_layers > self.num_hidden_layers:
            raise ValueError(f"frozen_layers must be at most num_hidden_layers={self.num_hidden_layers}, "
                             f"got {self.frozen_layers}")
        check_fraction("tail_share", self.tail_share)
        if self.tail_share and not (self.ngram_rows and self.ngram_len > self.max_len):
            raise ValueError(f"tail_share={self.tail_share} reads the end of a document longer than max_len="
                             f"{self.max_len}, which this model is not given: its n-gram half must read past it "
                             f"(ngram_len above max_len, ngram_rows above 0)")
        check_choice("pooling", self.pooling, BERT_POOLINGS)
        check_fraction("classifier_dropout", self.classifier_dropout)
        for name in ("pad_token_id", "cls_token_id", "sep_token_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} must be an int in [0, vocab_size={self.vocab_size}), got {value!r}")
        if self.max_len + 2 > self.max_position_embeddings:
            raise ValueError(
                f"max_len={self.max_len} plus [CLS] and [SEP] must fit max_position_embeddings="
                f"{self.max_position_embeddings}; use max_len <= {self.max_position_embeddings - 2}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BertClassifierConfig:
        """Build and validate a config from its flat dict (every field at the top level).

        Strict, as for every model config (unlike :meth:`BertConfig.from_dict`,
        which reads a Hugging Face ``config.json`` and skips unknown keys):
        an unknown or missing key raises ValueError listing the fields.
        """
        return super(BertConfig, cls).from_dict(data)

    def reading_length(self, max_len: int) -> int:
        """Tokens of each document the model reads: ``ngram_len`` when its n-gram half reads past
        ``max_len``, else ``max_len``."""
        return max(max_len, self.ngram_len) if self.ngram_rows else max_len

    def bert_config(self) -> BertConfig:
        """The encoder's architecture alone, as a plain :class:`BertConfig`."""
        return BertConfig(**{name: getattr(self, name) for name in _BERT_FIELDS})

    @classmethod
    def from_bert(cls, bert: BertConfig, *, num_classes: int, **head: Any) -> BertClassifierConfig:
        """A config with ``bert``'s architecture and the given head fields."""
        return cls(num_classes=num_classes, **dataclasses.asdict(bert), **head)


class BertClassifier(NgramHalf, TextClassifier):
    """Sequence classification with a (pretrained) BERT encoder.

    Parameters: ``bert.*`` (Hugging Face names, see
    :class:`attnkit.models.bert.BertModel`) and ``classifier.*``; with
    ``ngram_rows > 0`` the buffers of the n-gram half (``wide``, ``bigram_keys``,
    ``wide_bias``, ``wide_scale``), added to the logits in eval mode.

    Args:
        config: a :class:`BertClassifierConfig`.

    Shape:
        ids ``(B, T)`` token ids without ``[CLS]``/``[SEP]``, lengths ``(B,)``;
        returns logits ``(B, C)`` and, on request, ``{"pooling": (B, T),
        "layers": (B, L, H, S, S)}`` with ``S = T + 2`` (see the module docstring).
        ``return_weights="pooling"`` computes the last layer's weights only.
    """

    WEIGHTS = ("pooling", "layers")
    config: BertClassifierConfig

    def __init__(self, config: BertClassifierConfig) -> None:
        super().__init__()
        if not isinstance(config, BertClassifierConfig):
            raise TypeError(f"config must be a BertClassifierConfig, got {type(config).__name__}")
        self.config = config
        self.bert = BertModel(config.bert_config())
        self.dropout = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_classes)
        nn.init.normal_(self.classifier.weight, std=0.02)  # BERT's initializer_range
        nn.init.zeros_(self.classifier.bias)
        self._add_ngram_half(config.vocab_size, config.ngram_rows, config.num_classes)
        if config.frozen_layers:
            for part in (self.bert.embeddings, *self.bert.encoder.layer[:config.frozen_layers]):
                part.requires_grad_(False)
        if config.frozen_word_embeddings:
            self.bert.embeddings.word_embeddings.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, num_classes: int, **head: Any) -> BertClassifier:
        """A classifier whose encoder holds the weights of a local BERT folder; the head is new.

        ``head`` takes the non-BERT fields of :class:`BertClassifierConfig`
        (``pooling``, ``classifier_dropout``, ``max_len``, ...).
        """
        encoder = BertModel.from_pretrained(directory)
        model = cls(BertClassifierConfig.from_bert(encoder.config, num_classes=num_classes, **head))
        model.bert.load_state_dict(encoder.state_dict())
        return model

    def add_special_tokens(self, ids: Tensor, lengths: Tensor) -> Tensor:
        """``[CLS] ids[:length] [SEP] [PAD]...``: the BERT input of each document.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns ``(B, T + 2)``.
        """
        return self._with_specials(ids, lengths, valid_positions(lengths, ids.shape[1]))

    def _with_specials(self, ids: Tensor, lengths: Tensor, real: Tensor) -> Tensor:
        b = ids.shape[0]
        c = self.config
        body = ids.masked_fill(~real, c.pad_token_id)  # (B, T)
        tokens = torch.cat([ids.new_full((b, 1), c.cls_token_id), body, ids.new_full((b, 1), c.pad_token_id)], 1)
        return tokens.scatter(1, (lengths + 1)[:, None], c.sep_token_id)  # (B, S)

    def classify_own(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The head's logits for a prepared batch (without the n-gram half), and the weights in ``weights``.

        ``mask`` (allowed ``(B, 1, 1, T)``) marks the real tokens; BERT's key mask over
        ``[CLS] tokens [SEP]``, one :class:`~attnkit.core.masks.AttentionMask` that
        every layer reads, is that same mask with two True columns in front
        (key ``j + 2`` is valid exactly when token ``j`` is real: the shift by
        two moves ``[SEP]``, at ``lengths + 1``, into place). ``"pooling"``
        alone needs only the last layer's weights; the others run without.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)`` and a dict
            of weights.
        """
        read, doc_lengths = ids.shape[1], lengths
        ids, lengths, mask = self._encoder_part(ids, lengths, mask)
        t = ids.shape[1]
        if t > self.config.max_position_embeddings - 2:
            raise ValueError(
                f"ids has T={t} tokens; with [CLS] and [SEP] this model takes at most "
                f"{self.config.max_position_embeddings - 2}"
            )
        real = mask.key_mask()  # (B, T)
        keys = AttentionMask(torch.cat([real.new_ones(real.shape[0], 2), real], -1)[:, None, None])  # (B, 1, 1, S)
        tokens = self._with_specials(ids, lengths, real)  # (B, S)
        layers: bool | list[int] = False
        if weights is not None:
            layers = True if "layers" in weights else [-1]
        out = self.bert(tokens, mask=keys, return_weights=layers)
        hidden = out.last_hidden_state  # (B, S, D)
        if self.config.pooling == "cls":
            doc = hidden[:, 0]  # (B, D)
        else:
            doc = (hidden[:, 1 : t + 1] * real[..., None]).sum(1) / lengths[:, None].to(hidden.dtype)
        logits = self.classifier(self.dropout(doc))  # (B, C)
        if weights is None:
            return logits, {}
        assert out.attentions is not None
        cls_row = out.attentions[-1][:, :, 0, 1 : t + 1].mean(1)  # (B, T): [CLS] -> real tokens, mean of heads
        cls_row = cls_row * real
        total = cls_row.sum(-1, keepdim=True).clamp_min(torch.finfo(cls_row.dtype).tiny)
        places = self.encoder_places(doc_lengths, read)  # (B, t): the document's token at each position read
        found = {"pooling": cls_row.new_zeros(cls_row.shape[0], read).scatter(1, places, cls_row / total)}  # (B, T)
        if "layers" in weights:
            found["layers"] = torch.stack(out.attentions, 1)  # (B, L, H, S, S)
        return logits, found

    def _encoder_cut(self) -> int | None:
        """``max_len`` when the n-gram half reads past it (``ngram_len``) and the encoder reads no more,
        else None."""
        c = self.config
        return c.max_len if c.ngram_len and c.ngram_rows else None

    def encoder_places(self, lengths: Tensor, width: int) -> Tensor:
        """The token positions the encoder reads of each document of a batch ``width`` tokens wide, in
        order: ``(B, n)``, ``n`` the smaller of ``width`` and ``max_len`` when the n-gram half reads past
        ``max_len``, else ``width``. A longer document gives its first ``n - k`` and its last ``k``
        (``tail_share``); the places past a shorter one's end are its padding, as in the batch."""
        cut = self._encoder_cut()
        n = width if cut is None else min(width, cut)
        places = torch.arange(n, device=lengths.device).expand(lengths.shape[0], n)
        tail = round(n * self.config.tail_share) if n == cut else 0
        if tail:
            skipped = (lengths - n).clamp_min(0)[:, None]  # (B, 1): the middle a long document's reading skips
            places = torch.where(places < n - tail, places, places + skipped)
        return places

    def _encoder_part(self, ids: Tensor, lengths: Tensor, mask: AttentionMask
                      ) -> tuple[Tensor, Tensor, AttentionMask]:
        """The batch as the encoder reads it (:meth:`encoder_places`) when the n-gram half reads past
        ``max_len`` (``ngram_len``), else the batch itself."""
        cut = self._encoder_cut()
        if cut is None or ids.shape[1] <= cut:
            return ids, lengths, mask
        places = self.encoder_places(lengths, ids.shape[1])
        return (ids.gather(1, places), lengths.clamp(max=cut),
                AttentionMask(mask.key_mask().gather(1, places)[:, None, None]))

    def classify_packed(self, packed: PackedBatch, want_pooling: bool) -> tuple[Tensor, Tensor | None]:
        """Logits of packed documents: ``[CLS] doc [SEP]`` for each, several to a row.

        Each document gets its own ``[CLS]`` and ``[SEP]`` in the row, positions
        that restart at 0 and attention within itself only, so its logits equal
        those it gets alone. The pooling weights (``want_pooling``), and documents longer than
        the encoder reads (``ngram_len``), take the per-document path.

        Shape:
            packed rows ``(R, T)``; returns ``(N, C)`` and ``(R, T)`` or None.
        """
        cut = self._encoder_cut()
        if want_pooling or (cut is not None and int(packed.lengths.max()) > cut):
            return super().classify_packed(packed, want_pooling)
        if int(packed.lengths.max()) > self.config.max_position_embeddings - 2:
            raise ValueError(
                f"a packed document has {int(packed.lengths.max())} tokens; with [CLS] and [SEP] this "
                f"model takes at most {self.config.max_position_embeddings - 2}"
            )
        rows = self._with_specials_packed(packed)
        out = self.bert(rows.ids, mask=rows.mask, position_ids=rows.positions)
        hidden = rows.unpack(out.last_hidden_state)  # (N, L + 2, D)
        if self.config.pooling == "cls":
            doc = hidden[:, 0]  # (N, D)
        else:
            real = packed.doc_mask.key_mask()  # (N, L)
            doc = (hidden[:, 1 : real.shape[1] + 1] * real[..., None]).sum(1) / packed.lengths[:, None].to(hidden.dtype)
        logits = self.classifier(self.dropout(doc))  # (N, C)
        return self.with_ngram_half(logits, packed.unpack(packed.ids), packed.doc_mask), None

    def _with_specials_packed(self, packed: PackedBatch) -> PackedBatch:
        """The packed rows with ``[CLS]`` before and ``[SEP]`` after every document."""
        c = self.config
        r, t = packed.ids.shape
        first = packed.gather[:, 0]  # (N,) flat position of each document's first token
        row, col = first // t, first % t
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        row_sorted = row[order]
        starts = torch.ones_like(row_sorted, dtype=torch.bool)
        starts[1:] = row_sorted[1:] != row_sorted[:-1]
        index = torch.arange(len(order), device=first.device)
        rank[order] = index - torch.where(starts, index, torch.zeros_like(index)).cummax(0).values
        new_first = col + 2 * rank  # where each document's [CLS] goes
        n = packed.num_documents
        width = int((new_first + packed.lengths + 2).max())
        ids = packed.ids.new_full((r, width), c.pad_token_id)
        seg = packed.ids.new_full((r, width), -1)
        span = torch.arange(int(packed.lengths.max()) + 2, device=first.device)  # (L + 2,)
        inside = span[None, :] < (packed.lengths + 2)[:, None]  # (N, L + 2)
        cols = (new_first[:, None] + span[None, :])[inside]
        rows = row[:, None].expand(n, span.shape[0])[inside]
        body = packed.unpack(packed.ids)  # (N, L)
        tokens = torch.cat([body.new_full((n, 1), c.cls_token_id), body, body.new_full((n, 1), c.pad_token_id)], 1)
        tokens = tokens.scatter(1, (packed.lengths + 1)[:, None], c.sep_token_id)  # (N, L + 2)
        ids[rows, cols] = tokens[inside]
        seg[rows, cols] = torch.arange(n, device=first.device)[:, None].expand_as(inside)[inside]
        return packed_batch(ids, seg, None, c.vocab_size)
