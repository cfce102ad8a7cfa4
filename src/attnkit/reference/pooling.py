"""Sequence pooling: masked mean and attention pooling, forward and backward.

Both take an optional boolean ``mask`` True on real tokens, shaped ``(B, T)``
or as returned by :func:`attnkit.reference.functional.lengths_mask`
``(B, 1, 1, T)``. A sequence with no real token pools to zeros.

Shape legend: B batch, T length, D width.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.functional import safe_softmax, softmax_backward
from attnkit.reference.layers import Linear
from attnkit.reference.module import Module, check_array

__all__ = ["MeanPooling", "AttentionPooling", "token_mask"]

Array = np.ndarray


def token_mask(mask: Array | None, b: int, t: int) -> Array:
    """Normalise a token mask to ``(B, T)`` bool (all True when ``None``)."""
    if mask is None:
        return np.ones((b, t), dtype=bool)
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean numpy.ndarray (True = real token), got {getattr(mask, 'dtype', type(mask))}")
    if mask.size != b * t or mask.shape[0] != b or mask.shape[-1] != t:
        raise ValueError(f"mask must be (B, T) = {(b, t)} or (B, 1, 1, T), got shape {mask.shape}")
    return mask.reshape(b, t)


class MeanPooling(Module):
    """``s = sum_t m_t h_t / max(sum_t m_t, 1)``.

    Shape:
        h ``(B, T, D)``; returns ``(B, D)``.
    """

    def forward(self, h: Array, mask: Array | None = None) -> Array:
        check_array("h", h, 3, "(B, T, D)")
        m = token_mask(mask, h.shape[0], h.shape[1]).astype(h.dtype)  # (B, T)
        self._w = m / np.maximum(m.sum(axis=1, keepdims=True), 1.0)  # (B, T)
        return np.einsum("bt,btd->bd", self._w, h)

    def backward(self, grad: Array) -> Array:
        return self._w[:, :, None] * grad[:, None, :]  # (B, T, D)


class AttentionPooling(Module):
    """Attention pooling with a learned context vector (Yang et al., 2016)::

        u_t = tanh(W h_t + b),   a = softmax_t(u_t . query),   s = sum_t a_t h_t

    Parameters ``proj.weight``, ``proj.bias`` and ``query``. The pooling
    weights of the last call are in ``weights`` ``(B, T)``.

    Shape:
        h ``(B, T, D)``; returns ``(B, D)``.
    """

    def __init__(self, dim: int, *, rng: np.random.Generator | None = None,
                 dtype: type = np.float32) -> None:
        super().__init__()
        gen = rng if rng is not None else np.random.default_rng()
        self.proj = Linear(dim, dim, rng=gen, dtype=dtype)
        self.add_param("query", (gen.standard_normal(dim) / np.sqrt(dim)).astype(dtype))
        self.dim = dim

    def forward(self, h: Array, mask: Array | None = None) -> Array:
        check_array("h", h, 3, f"(B, T, {self.dim})", self.dim)
        m = token_mask(mask, h.shape[0], h.shape[1])
        u = np.tanh(self.proj.forward(h))  # (B, T, D)
        scores = u @ self.params["query"]  # (B, T)
        a = safe_softmax(scores, m).astype(h.dtype, copy=False)  # (B, T)
        self._cache = (h, u, a)
        return np.einsum("bt,btd->bd", a, h)

    @property
    def weights(self) -> Array:
        return self._cache[2]

    def backward(self, grad: Array) -> Array:
        h, u, a = self._cache
        dh = a[:, :, None] * grad[:, None, :]  # (B, T, D), through s = sum a h
        da = np.einsum("bd,btd->bt", grad, h)
        ds = softmax_backward(a, da)  # (B, T)
        self.grads["query"] += np.einsum("bt,btd->d", ds, u)
        du = ds[:, :, None] * self.params["query"]  # (B, T, D)
        return dh + self.proj.backward(du * (1.0 - u * u))
