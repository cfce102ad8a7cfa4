"""Transformer document classifier: embeddings, an encoder stack, pooling, a linear classifier.

::

    x      = Embed(ids) + PE                       (B, T, D)
    x      = Encoder(x, mask = key padding)        num_layers Transformer layers (Vaswani et al., 2017)
    x      = softmax(x x^T / sqrt(D)) x            parameter_free_layers times (optional)
    doc    = Pool(x)                               attention pooling (Yang et al., 2016) or mean
    logits = W doc + b                             (B, C)

Padding never reaches the answer: padded keys are masked in every attention,
and pooling gives padded positions exactly zero weight, so appending ``[PAD]``
tokens leaves the logits unchanged.

**The smallest attention model.** ``num_layers=0, parameter_free_layers=1,
pooling="mean", positional="none"`` is a single self-attention layer with no
parameters of its own -- queries, keys and values are the word embeddings
themselves -- followed by mean pooling: each word is replaced by an
attention-weighted average of the words similar to it, and the document is the
mean of those. The only weights are the embedding table and the classifier,
which makes it a clear baseline for what attention adds to a bag of embeddings
(``parameter_free_layers=0``).

Shape legend: B batch, T tokens, D model width, H heads, C classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode
from attnkit.blocks import TransformerEncoder, TransformerLayerConfig
from attnkit.core.functional import attention
from attnkit.core.masks import AttentionMask, MaskLike
from attnkit.layers.pooling import AttentionPooling, linear_head_contributions
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.config import (
    TextClassifierConfig,
    check_choice,
    check_positive_int,
)
from attnkit.models.packed import PackedBatch
from attnkit.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

__all__ = ["DocumentClassifierConfig", "DocumentClassifier", "POOLINGS", "POSITIONALS", "DOCUMENT_LAYER"]

POOLINGS = ("attention", "mean")
POSITIONALS = ("sinusoidal", "learned", "none")
DOCUMENT_LAYER = TransformerLayerConfig(128, 4, 256, dropout=0.1, activation="gelu", norm_first=True)
"""The layer of a :class:`DocumentClassifierConfig` that names none (pre-norm, GELU)."""


@dataclass(frozen=True)
class DocumentClassifierConfig(TextClassifierConfig):
    """Configuration of :class:`DocumentClassifier`.

    Attributes:
        vocab_size, num_classes: sizes of the token vocabulary and the label set.
        layer: every encoder layer, a :class:`~attnkit.blocks.TransformerLayerConfig`
            (``d_model``: also the embedding and document width; ``num_heads``, ``d_ff``;
            ``dropout``: also on the embeddings and before the classifier; ``activation``,
            ``norm_first``: pre-norm, stabler for small data, or post-norm). In JSON a nested
            dict and on the command line ``--model-opt layer.d_model=64``; fields it leaves
            out keep the values of :data:`DOCUMENT_LAYER`.
        num_layers: Transformer encoder layers (0 allowed).
        pooling: ``"attention"`` (learned weights) or ``"mean"``.
        pooling_hidden: hidden width of the attention-pooling scorer (None: linear score).
        positional: ``"sinusoidal"``, ``"learned"`` or ``"none"``.
        max_len: the longest input (the learned table's size).
        parameter_free_layers: parameter-free self-attention layers after the encoder.
    """

    layer: TransformerLayerConfig = field(default_factory=lambda: DOCUMENT_LAYER)
    num_layers: int = 2
    pooling: str = "attention"
    pooling_hidden: int | None = None
    positional: str = "sinusoidal"
    max_len: int = 512
    parameter_free_layers: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.layer, TransformerLayerConfig):
            raise TypeError(f"layer must be a TransformerLayerConfig, got {type(self.layer).__name__}")
        check_positive_int("num_layers", self.num_layers, allow_zero=True)
        check_positive_int("max_len", self.max_len)
        check_positive_int("parameter_free_layers", self.parameter_free_layers, allow_zero=True)
        if self.pooling_hidden is not None:
            check_positive_int("pooling_hidden", self.pooling_hidden)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("positional", self.positional, POSITIONALS)


class DocumentClassifier(TextClassifier):
    """Classify token sequences with a Transformer encoder and attention pooling.

    Parameters are named ``embedding.weight``, ``positional.weight`` (learned
    positions only), ``encoder.layers.{i}.*`` (:class:`attnkit.blocks.TransformerEncoder`),
    ``encoder.norm.*`` (pre-norm), ``pooling.*`` (attention pooling) and
    ``classifier.{weight,bias}``.

    Called as every :class:`~attnkit.models.base.TextClassifier`:
    ``return_weights="pooling"`` returns the pooling weights alone and runs
    the encoder without computing its attention maps (what ``predict
    --explain`` asks for); ``return_weights=True`` returns them all.

    Shape:
        ids ``(B, T)``, lengths ``(B,)``; returns logits ``(B, C)`` and, on
        request, weights ``{"pooling": (B, T), "encoder.{i}": (B, H, T, T),
        "parameter_free.{i}": (B, 1, T, T)}``.
    """

    WEIGHTS = ("pooling", "encoder", "parameter_free")
    config: DocumentClassifierConfig

    def __init__(self, config: DocumentClassifierConfig) -> None:
        super().__init__()
        if not isinstance(config, DocumentClassifierConfig):
            raise TypeError(f"config must be a DocumentClassifierConfig, got {type(config).__name__}")
        self.config = c = config
        d = c.layer.d_model
        self.embedding = nn.Embedding(c.vocab_size, d, padding_idx=0)
        self.positional: nn.Module | None = None
        if c.positional == "sinusoidal":
            self.positional = SinusoidalPositionalEncoding(d, c.max_len)
        elif c.positional == "learned":
            self.positional = LearnedPositionalEmbedding(c.max_len, d)
        self.dropout = nn.Dropout(c.layer.dropout)
        self.encoder: TransformerEncoder | None = TransformerEncoder(c.layer, c.num_layers) if c.num_layers else None
        self.pooling: AttentionPooling | None = (
            AttentionPooling(d, hidden_dim=c.pooling_hidden) if c.pooling == "attention" else None
        )
        self.classifier = nn.Linear(d, c.num_classes)

    def classify(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Logits for a prepared batch, and the weights in ``weights``.

        ``mask`` is the batch's one key-padding mask; the encoder, the
        parameter-free layers and the pooling all read this same object.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)`` and a dict
            of weights.
        """
        self._check_length(ids.shape[1])
        x = self.embedding(ids)  # (B, T, D)
        if self.positional is not None:
            x = self.positional(x)
        found: dict[str, Tensor] = {}
        x = self._encode(self.dropout(x), mask, weights, found)
        doc, pool_w = self._pool(x, mask, lengths)
        found["pooling"] = pool_w
        return self.classifier(self.dropout(doc)), found  # (B, C)

    def classify_packed(self, packed: PackedBatch, want_pooling: bool) -> tuple[Tensor, Tensor | None]:
        """Logits of packed documents: one row holds several, attention stays inside each.

        Positions restart at every document (``packed.positions``), every
        attention reads the document mask, and pooling runs per document, so
        each document gets the logits it gets alone.

        Shape:
            packed rows ``(R, T)``; returns ``(N, C)`` and pooling weights ``(R, T)`` or None.
        """
        self._check_length(int(packed.lengths.max()))
        x = self.embedding(packed.ids)  # (R, T, D)
        if self.positional is not None:
            x = self.positional(x, positions=packed.positions)
        x = self._encode(self.dropout(x), packed.mask, None, {})
        doc, pool_w = self._pool(packed.unpack(x), packed.doc_mask, packed.lengths)  # (N, D), (N, L)
        logits = self.classifier(self.dropout(doc))  # (N, C)
        return logits, packed.to_token_positions(pool_w) if want_pooling else None

    def _check_length(self, t: int) -> None:
        if self.config.positional == "learned" and t > self.config.max_len:
            raise ValueError(
                f"ids has T={t} positions but the learned position table holds max_len="
                f"{self.config.max_len}; truncate the documents or raise max_len"
            )

    def _encode(self, x: Tensor, mask: MaskLike, weights: WeightSelection | None,
                found: dict[str, Tensor]) -> Tensor:
        """The encoder and the parameter-free layers, each reading ``mask``; weights into ``found``."""
        if self.encoder is not None:
            if weights is not None and weights.wants_group("encoder"):
                x, per_layer = self.encoder(x, mask=mask, return_weights=True)
                found.update({f"encoder.{i}": w for i, w in enumerate(per_layer)})
            else:
                x = self.encoder(x, mask=mask)
        for i in range(self.config.parameter_free_layers):
            h = x[:, None]  # (B, 1, T, D): one head, queries = keys = values = x
            scale = 1.0 / math.sqrt(self.config.layer.d_model)
            if weights is not None and f"parameter_free.{i}" in weights:
                out, w = attention(h, h, h, mask=mask, scale=scale, return_weights=True)
                found[f"parameter_free.{i}"] = w  # (B, 1, T, T)
            else:
                out = attention(h, h, h, mask=mask, scale=scale)
            x = out[:, 0]  # (B, T, D)
        return x

    def _pool(self, x: Tensor, mask: AttentionMask, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The document vector ``(B, D)`` and the pooling weights ``(B, T)``."""
        if self.pooling is not None:
            return self.pooling(x, mask=mask, return_weights=True)  # (B, D), (B, T)
        pool_w = mask.key_mask().to(x.dtype) / lengths[:, None].to(x.dtype)  # (B, T)
        return (pool_w[:, :, None] * x).sum(dim=1), pool_w  # (B, D)

    @torch.no_grad()
    def token_contributions(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """What each position adds to each class's logit in eval mode, and the bias: exact.

        ``logits = W (sum_t alpha_t x_t) + b = b + sum_t alpha_t (W x_t)``: the
        head is linear after the pooling (dropout is the identity in eval
        mode), so the contributions plus the bias are the logits to float
        rounding, for attention and for mean pooling alike. ``x_t`` is the top
        layer's vector at position ``t``; with encoder layers it carries
        context from the other positions, so the split is exact over
        positions, not over the words alone. The mode is left as it was.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns contributions ``(B, T, C)`` (zero on padding)
            and the bias ``(B, C)``.
        """
        ids, lengths, mask = self.prepare(ids, lengths)
        with eval_mode(self):
            x = self.embedding(ids)  # (B, T, D)
            if self.positional is not None:
                x = self.positional(x)
            x = self._encode(x, mask, None, {})
            _, pool_w = self._pool(x, mask, lengths)  # (B, T)
            per = linear_head_contributions(pool_w, x, self.classifier)  # (B, T, C)
        return per, self.classifier.bias.expand(ids.shape[0], -1)
