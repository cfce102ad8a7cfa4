"""Residual Transformer encoder layer and stack in NumPy (Vaswani et al., 2017).

Post-norm (the paper, torch's default ``norm_first=False``)::

    x = norm1(x + dropout(self_attn(x)));   x = norm2(x + dropout(ff(x)))

Pre-norm (Xiong et al., 2020; ``norm_first=True``), steadier for deep stacks::

    x = x + dropout(self_attn(norm1(x)));   x = x + dropout(ff(norm2(x)))

Attribute names ``self_attn``, ``ff``, ``norm1``, ``norm2`` (and ``layers.{i}``
in the stack) match the torch encoder, so weights copy across by name.

Shape legend: B batch, T length, D model width.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.layers import Dropout, FeedForward, LayerNorm
from attnkit.reference.module import Module, ModuleList
from attnkit.reference.multi_head import MultiHeadAttention

__all__ = ["TransformerEncoderLayer", "TransformerEncoder"]

Array = np.ndarray


class TransformerEncoderLayer(Module):
    """One residual encoder layer: self-attention then feed-forward.

    Shape:
        x ``(B, T, D)``; mask broadcastable to ``(B, H, T, T)``; returns ``(B, T, D)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, *,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 eps: float = 1e-5, rng: np.random.Generator | None = None,
                 dtype: type = np.float32) -> None:
        super().__init__()
        gen = rng if rng is not None else np.random.default_rng()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, rng=gen, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, dropout=dropout,
                              rng=gen, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.dropout1 = Dropout(dropout, rng=gen)
        self.dropout2 = Dropout(dropout, rng=gen)

    def forward(self, x: Array, mask: Array | None = None) -> Array:
        if self.norm_first:
            x = x + self.dropout1.forward(self.self_attn.forward(self.norm1.forward(x), mask=mask))
            return x + self.dropout2.forward(self.ff.forward(self.norm2.forward(x)))
        x = self.norm1.forward(x + self.dropout1.forward(self.self_attn.forward(x, mask=mask)))
        return self.norm2.forward(x + self.dropout2.forward(self.ff.forward(x)))

    def backward(self, grad: Array) -> Array:
        if self.norm_first:
            g = grad + self.norm2.backward(self.ff.backward(self.dropout2.backward(grad)))
            attn = self.self_attn.backward(self.dropout1.backward(g))
            assert isinstance(attn, np.ndarray)
            return g + self.norm1.backward(attn)
        g = self.norm2.backward(grad)
        g = g + self.ff.backward(self.dropout2.backward(g))
        g = self.norm1.backward(g)
        attn = self.self_attn.backward(self.dropout1.backward(g))
        assert isinstance(attn, np.ndarray)
        return g + attn


class TransformerEncoder(Module):
    """A stack of :class:`TransformerEncoderLayer` named ``layers.{i}``, closed by a
    final LayerNorm ``norm`` exactly when the layers are pre-norm (whose residual
    stream is never normalised inside the layers), as :class:`attnkit.blocks.TransformerEncoder`.

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)``.
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, *,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 eps: float = 1e-5, rng: np.random.Generator | None = None, dtype: type = np.float32) -> None:
        super().__init__()
        gen = rng if rng is not None else np.random.default_rng()
        self.layers = ModuleList([
            TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=dropout,
                                    activation=activation, norm_first=norm_first, eps=eps, rng=gen,
                                    dtype=dtype)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model, eps, dtype=dtype) if norm_first else None

    def forward(self, x: Array, mask: Array | None = None) -> Array:
        for layer in self.layers:
            x = layer.forward(x, mask)  # type: ignore[attr-defined]
        return x if self.norm is None else self.norm.forward(x)

    def backward(self, grad: Array) -> Array:
        if self.norm is not None:
            grad = self.norm.backward(grad)
        for layer in reversed(list(self.layers)):
            grad = layer.backward(grad)  # type: ignore[attr-defined]
        return grad
