"""Sequence pooling: masked mean and attention pooling, forward and backward.

Both take an optional boolean ``mask`` True on real tokens, shaped ``(B, T)``
or as returned by :func:`attnkit.reference.functional.from_lengths`
``(B, 1, 1, T)``. A sequence with no real token pools to zeros.

Shape legend: B batch, T length, D width.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.functional import safe_softmax, softmax_backward
from attnkit.reference.layers import Linear
from attnkit.reference.module import Module, check_array, check_positive

__all__ = ["MeanPooling", "AttentionPooling", "token_mask"]

Array = np.ndarray


def token_mask(mask: Array | None, b: int, t: int) -> Array:
    """Normalise a token mask to ``(B, T)`` bool (all True when ``None``)."""
    if mask is None:
        return np.ones((b, t), dtype=bool)
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError("mask must be a boolean numpy.ndarray (True = real token), "
                        f"got {getattr(mask, 'dtype', type(mask))}")
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
    """Attention pooling (Yang et al., 2016), as :class:`attnkit.layers.pooling.AttentionPooling`::

        u_t = tanh(W h_t + b)  (or u_t = h_t without ``hidden_dim``),
        a = softmax_t(score . u_t),   s = sum_t a_t h_t

    Parameters ``proj.weight``, ``proj.bias`` (with ``hidden_dim``) and
    ``score.weight`` ``(1, A)``. The pooling weights of the last call are in
    ``weights`` ``(B, T)``.

    Shape:
        h ``(B, T, D)``; returns ``(B, D)``.
    """

    def __init__(self, dim: int, *, hidden_dim: int | None = None,
                 rng: np.random.Generator | None = None, dtype: type = np.float32) -> None:
        super().__init__()
        gen = rng if rng is not None else np.random.default_rng()
        self.dim = check_positive("dim", dim)
        self.proj = None if hidden_dim is None else Linear(dim, hidden_dim, rng=gen, dtype=dtype)
        self.score = Linear(dim if hidden_dim is None else hidden_dim, 1, bias=False, rng=gen, dtype=dtype)

    def forward(self, h: Array, mask: Array | None = None) -> Array:
        check_array("h", h, 3, f"(B, T, {self.dim})", self.dim)
        m = token_mask(mask, h.shape[0], h.shape[1])
        u = h if self.proj is None else np.tanh(self.proj.forward(h))  # (B, T, A)
        scores = self.score.forward(u)[..., 0]  # (B, T)
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
        du = self.score.backward(ds[..., None])  # (B, T, A)
        if self.proj is None:
            return dh + du
        return dh + self.proj.backward(du * (1.0 - u * u))
