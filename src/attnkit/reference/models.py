"""Two text classifiers of the NumPy twin, with torch-style parameter names.

* :class:`DocumentClassifier` — the classic attention classifier: embedding,
  one multi-head self-attention layer, attention pooling, linear layer.
* :class:`TransformerClassifier` — embedding plus sinusoidal positions, a
  stack of residual encoder layers, masked mean (or attention) pooling and a
  linear layer: the layout of the torch :class:`attnkit.models.document.DocumentClassifier`
  with ``positional="sinusoidal"``, so weights copy across by name.

Both read ``ids`` ``(B, T)`` with padding id 0 and return logits ``(B, C)``;
``forward(ids)`` builds the key-padding mask from ``ids != pad_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from attnkit._checks import dataclass_kwargs
from attnkit._modes import eval_mode
from attnkit.layer_config import TransformerLayerConfig
from attnkit.reference.encoder import TransformerEncoder
from attnkit.reference.layers import (
    FEED_FORWARD_ACTIVATIONS,
    Dropout,
    Embedding,
    Linear,
    SinusoidalPositionalEncoding,
)
from attnkit.reference.module import Module
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.pooling import AttentionPooling, MeanPooling

__all__ = ["ClassifierConfig", "NUMPY_LAYER", "DocumentClassifier", "TransformerClassifier", "build_model"]

Array = np.ndarray


NUMPY_LAYER = TransformerLayerConfig(d_model=64, num_heads=4, d_ff=128, dropout=0.1)
"""The default ``layer`` of :class:`ClassifierConfig`; a partial ``layer`` dict read from JSON takes the rest
from it."""


@dataclass(frozen=True)
class ClassifierConfig:
    """Configuration shared by both classifiers (saved as JSON beside the weights).

    Attributes:
        kind: ``"transformer"`` or ``"document"``.
        vocab_size, num_classes: sizes of the token vocabulary and the label set.
        layer: every encoder layer, the :class:`~attnkit.layer_config.TransformerLayerConfig` that the torch
            models hold too (``d_model``: also the embedding and document width; ``num_heads``, ``d_ff``;
            ``dropout``: also on the embeddings and before the classifier; ``activation``, ``norm_first``,
            ``layer_norm_eps``). In JSON a nested dict and on the command line
            ``--model-opt layer.d_model=64``. The twin has no grouped-query attention, bias-free
            projections or separate attention and activation dropout rates: ``kv_heads``,
            ``bias``, ``attention_dropout`` and ``activation_dropout`` keep their defaults, and
            ``activation`` is one of :data:`attnkit.reference.layers.FEED_FORWARD_ACTIVATIONS`.
            The ``"document"`` kind reads ``d_model``, ``num_heads`` and ``dropout``.
        num_layers: encoder layers (Transformer classifier).
        pooling: ``"mean"`` or ``"attention"`` (Transformer classifier).
        pad_id: the padding token id.
        seed: seeds the weights and dropout.
    """

    kind: str = "transformer"
    vocab_size: int = 1000
    num_classes: int = 2
    layer: TransformerLayerConfig = field(default_factory=lambda: NUMPY_LAYER)
    num_layers: int = 1
    pooling: str = "mean"
    pad_id: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.layer, TransformerLayerConfig):
            raise TypeError(f"layer must be a TransformerLayerConfig, got {type(self.layer).__name__}")
        plain = TransformerLayerConfig(self.layer.d_model, self.layer.num_heads, self.layer.d_ff)
        for name in ("kv_heads", "bias", "attention_dropout", "activation_dropout"):
            if getattr(self.layer, name) != getattr(plain, name):
                raise ValueError(f"layer.{name} must be {getattr(plain, name)!r} in the NumPy twin, which does "
                                 f"not implement it; got {getattr(self.layer, name)!r}")
        if self.layer.activation not in FEED_FORWARD_ACTIVATIONS:
            raise ValueError(f"layer.activation must be one of {sorted(FEED_FORWARD_ACTIVATIONS)} in the NumPy "
                             f"twin, got {self.layer.activation!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict, ``layer`` nested (:meth:`from_dict` rebuilds it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, what: str | None = None) -> ClassifierConfig:
        """Build and validate a config from a dict read from JSON: unknown or missing keys raise ValueError
        listing the fields (a field of ``layer`` named by its path, ``layer.d_ff``), a value of the wrong type
        TypeError (:func:`attnkit._checks.dataclass_kwargs`); a ``layer`` dict that leaves fields out takes
        them from :data:`NUMPY_LAYER`. ``what`` names the config in messages."""
        return cls(**dataclass_kwargs(cls, data, what=what))


class _Classifier(Module):
    config: ClassifierConfig

    def padding_mask(self, ids: Array) -> Array:
        """``(B, 1, 1, T)`` True on real tokens."""
        if not isinstance(ids, np.ndarray) or ids.ndim != 2:
            raise ValueError(f"ids must be a 2-D integer array (B, T), got {getattr(ids, 'shape', type(ids))}")
        return (ids != self.config.pad_id)[:, None, None, :]  # (B, 1, 1, T)

    def predict(self, ids: Array) -> Array:
        """Class index per example, in eval mode. Shape: ids ``(B, T)``; returns ``(B,)``."""
        with eval_mode(self):
            logits = self.forward(ids)  # type: ignore[attr-defined]
        return np.asarray(logits.argmax(axis=-1))


class DocumentClassifier(_Classifier):
    """``embedding -> self_attn -> pooling -> classifier``.

    Parameters ``embedding.weight``, ``self_attn.{q,k,v,out}_proj.*``,
    ``pooling.score.weight``, ``classifier.{weight,bias}``.

    Shape:
        ids ``(B, T)``; returns logits ``(B, num_classes)``.
    """

    def __init__(self, config: ClassifierConfig, dtype: type = np.float32) -> None:
        super().__init__()
        self.config = config
        rng = np.random.default_rng(config.seed)
        layer = config.layer
        d = layer.d_model
        self.embedding = Embedding(config.vocab_size, d, padding_idx=config.pad_id, rng=rng, dtype=dtype)
        self.embed_dropout = Dropout(layer.dropout, rng=rng)
        self.self_attn = MultiHeadAttention(d, layer.num_heads, dropout=layer.dropout, rng=rng, dtype=dtype)
        self.pooling = AttentionPooling(d, rng=rng, dtype=dtype)
        self.classifier = Linear(d, config.num_classes, rng=rng, dtype=dtype)

    def forward(self, ids: Array) -> Array:
        mask = self.padding_mask(ids)
        x = self.embed_dropout.forward(self.embedding.forward(ids))  # (B, T, D)
        h = self.self_attn.forward(x, mask=mask)  # (B, T, D)
        return self.classifier.forward(self.pooling.forward(h, mask))  # (B, C)

    def backward(self, grad: Array) -> None:
        g = self.pooling.backward(self.classifier.backward(grad))
        dx = self.self_attn.backward(g)
        assert isinstance(dx, np.ndarray)
        self.embedding.backward(self.embed_dropout.backward(dx))

    def attention_weights(self) -> Array:
        """Self-attention weights of the last forward pass ``(B, H, T, T)``."""
        return self.self_attn.weights


class TransformerClassifier(_Classifier):
    """``embedding + positions -> encoder -> pooling -> classifier``::

        x = dropout(E[ids] + PE),   h = Encoder(x, key padding mask),
        doc = MeanPool(h) or AttentionPool(h),   logits = W dropout(doc) + b

    Parameters ``embedding.weight``, ``encoder.layers.{i}.self_attn.{q,k,v,out}_proj.*``,
    ``encoder.layers.{i}.norm1/norm2.*``, ``encoder.layers.{i}.ff.linear1/linear2.*``,
    ``encoder.norm.*`` (pre-norm only), ``pooling.*`` (attention pooling only),
    ``classifier.{weight,bias}``.

    Shape:
        ids ``(B, T)``; returns logits ``(B, num_classes)``.
    """

    def __init__(self, config: ClassifierConfig, dtype: type = np.float32) -> None:
        super().__init__()
        if config.pooling not in ("mean", "attention"):
            raise ValueError(f"config.pooling must be one of ['attention', 'mean'], got {config.pooling!r}")
        self.config = config
        rng = np.random.default_rng(config.seed)
        layer = config.layer
        d = layer.d_model
        self.embedding = Embedding(config.vocab_size, d, padding_idx=config.pad_id, rng=rng, dtype=dtype)
        self.positions = SinusoidalPositionalEncoding(d)
        self.dropout = Dropout(layer.dropout, rng=rng)
        self.encoder = TransformerEncoder(
            config.num_layers, d, layer.num_heads, layer.d_ff, dropout=layer.dropout,
            activation=layer.activation, norm_first=layer.norm_first, eps=layer.layer_norm_eps, rng=rng,
            dtype=dtype,
        )
        self.pooling: AttentionPooling | MeanPooling = (
            AttentionPooling(d, rng=rng, dtype=dtype) if config.pooling == "attention" else MeanPooling()
        )
        self.classifier_dropout = Dropout(layer.dropout, rng=rng)
        self.classifier = Linear(d, config.num_classes, rng=rng, dtype=dtype)

    def forward(self, ids: Array) -> Array:
        mask = self.padding_mask(ids)
        x = self.dropout.forward(self.positions.forward(self.embedding.forward(ids)))  # (B, T, D)
        h = self.encoder.forward(x, mask)  # (B, T, D)
        doc = self.pooling.forward(h, mask)  # (B, D)
        return self.classifier.forward(self.classifier_dropout.forward(doc))  # (B, C)

    def backward(self, grad: Array) -> None:
        g = self.classifier_dropout.backward(self.classifier.backward(grad))
        g = self.encoder.backward(self.pooling.backward(g))
        self.embedding.backward(self.dropout.backward(self.positions.backward(g)))

    def attention_weights(self, layer: int = -1) -> Array:
        """Self-attention weights of one encoder layer in the last forward pass ``(B, H, T, T)``."""
        return self.encoder.layers[layer].self_attn.weights  # type: ignore[attr-defined]


def build_model(config: ClassifierConfig, dtype: type = np.float32) -> DocumentClassifier | TransformerClassifier:
    """The classifier named by ``config.kind`` (``"transformer"`` or ``"document"``)."""
    if config.kind == "transformer":
        return TransformerClassifier(config, dtype)
    if config.kind == "document":
        return DocumentClassifier(config, dtype)
    raise ValueError(f"config.kind must be one of ['document', 'transformer'], got {config.kind!r}")
