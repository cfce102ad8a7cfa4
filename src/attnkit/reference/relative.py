"""Relative-position self-attention of Shaw, Uszkoreit and Vaswani (2018), forward and backward.

With clipped distance buckets ``b(i, j) = clip(j - i - (Tk - Tq), -k, k) + k``
(bottom-right aligned, as :class:`attnkit.layers.relative.RelativePositionAttention`)
and tables ``rel_k``, ``rel_v`` of ``2k + 1`` vectors shared by the heads::

    e_ij = q_i . (k_j + rel_k[b(i,j)]) / sqrt(Dh),   a = softmax_j(e),
    z_i  = sum_j a_ij (v_j + rel_v[b(i,j)])

Backward, with ``bucket(X)_ib = sum_{j: b(i,j)=b} X_ij`` and ``gather`` its adjoint::

    dV = a^T dZ,   d rel_v = sum bucket(a)^T dZ,
    da = dZ V^T + gather(dZ rel_v^T),   dE = softmax_backward(a, da),
    dQ = (dE K + bucket(dE) rel_k) / sqrt(Dh),   dK = dE^T Q / sqrt(Dh),
    d rel_k = sum bucket(dE)^T Q / sqrt(Dh)

Parameter names: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, ``rel_k``, ``rel_v``.

``bucket`` and ``gather`` are written as products with a one-hot
``(Tq, Tk, 2k + 1)`` table: readable and exact, with memory
``O(Tq Tk (2k + 1))`` -- this twin is for checking, the torch layer for long inputs.

Shape legend: B batch, H heads, Tq/Tk lengths, D model width, Dh head width, K2 = 2k + 1.
"""

from __future__ import annotations

import math

import numpy as np

from attnkit.reference import functional as _masks
from attnkit.reference.functional import (
    check_mask,
    merge_heads,
    safe_softmax,
    softmax_backward,
    split_heads,
)
from attnkit.reference.layers import Linear
from attnkit.reference.module import Module, check_array, check_positive
from attnkit.reference.multi_head import check_heads

__all__ = ["clipped_relative_index", "RelativePositionAttention"]

Array = np.ndarray


def clipped_relative_index(tq: int, tk: int, max_distance: int) -> Array:
    """Bucket ``clip(j - i - (Tk - Tq), -k, k) + k`` in ``0 .. 2k``.

    Shape:
        returns ``(Tq, Tk)`` int.
    """
    i = np.arange(tq)[:, None] + (tk - tq)  # (Tq, 1)
    j = np.arange(tk)[None, :]  # (1, Tk)
    return np.clip(j - i, -max_distance, max_distance) + max_distance  # (Tq, Tk)


class RelativePositionAttention(Module):
    """Multi-head self- (or cross-) attention with Shaw et al. clipped relative positions.

    ``backward`` returns ``dx`` for self-attention, ``(dx, dkey, dvalue)`` for cross.

    Shape:
        x ``(B, Tq, D)``; key/value ``(B, Tk, D)``; returns ``(B, Tq, D)``.
    """

    def __init__(self, d_model: int, num_heads: int, max_relative_position: int, *,
                 bias: bool = True, rng: np.random.Generator | None = None,
                 dtype: type = np.float32) -> None:
        super().__init__()
        self.d_model, self.num_heads, _ = check_heads(d_model, num_heads)
        self.max_relative_position = check_positive("max_relative_position", max_relative_position)
        self.head_dim = d_model // num_heads
        gen = rng if rng is not None else np.random.default_rng()
        self.q_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        k2 = 2 * max_relative_position + 1
        bound = math.sqrt(6.0 / (k2 + self.head_dim))  # xavier uniform, as the torch layer
        self.add_param("rel_k", gen.uniform(-bound, bound, (k2, self.head_dim)).astype(dtype))
        self.add_param("rel_v", gen.uniform(-bound, bound, (k2, self.head_dim)).astype(dtype))

    def forward(self, x: Array, key: Array | None = None, value: Array | None = None, *,
                mask: Array | None = None, causal: bool = False) -> Array:
        check_array("x", x, 3, f"(B, T, {self.d_model})", self.d_model)
        if (key is None) != (value is None):
            raise ValueError("pass both key and value for cross-attention, or neither for self-attention")
        self._self_attention = key is None
        if key is None or value is None:
            key = value = x
        else:
            check_array("key", key, 3, f"(B, T, {self.d_model})", self.d_model)
            check_array("value", value, 3, f"(B, T, {self.d_model})", self.d_model)
        q = split_heads(self.q_proj.forward(x), self.num_heads)  # (B, H, Tq, Dh)
        k = split_heads(self.k_proj.forward(key), self.num_heads)  # (B, H, Tk, Dh)
        v = split_heads(self.v_proj.forward(value), self.num_heads)  # (B, H, Tk, Dh)
        b, h, tq, dh = q.shape
        tk = k.shape[2]
        if mask is not None:
            check_mask(mask, (b, h, tq, tk))
        full = _masks.combine(mask, _masks.causal(tq, tk) if causal else None)
        idx = clipped_relative_index(tq, tk, self.max_relative_position)  # (Tq, Tk)
        k2 = 2 * self.max_relative_position + 1
        onehot = (idx[..., None] == np.arange(k2)).astype(x.dtype)  # (Tq, Tk, K2)
        scale = 1.0 / math.sqrt(dh)
        rel_logits = q @ self.params["rel_k"].T  # (B, H, Tq, K2)
        scores = (q @ k.swapaxes(-1, -2) + np.einsum("bhik,ijk->bhij", rel_logits, onehot)) * scale
        a = safe_softmax(scores, full).astype(x.dtype, copy=False)  # (B, H, Tq, Tk)
        buckets = np.einsum("bhij,ijk->bhik", a, onehot)  # (B, H, Tq, K2)
        z = a @ v + buckets @ self.params["rel_v"]  # (B, H, Tq, Dh)
        self._cache = (q, k, v, a, buckets, onehot, scale)
        return self.out_proj.forward(merge_heads(z))  # (B, Tq, D)

    @property
    def weights(self) -> Array:
        return self._cache[3]

    def backward(self, grad: Array) -> Array | tuple[Array, Array, Array]:
        q, k, v, a, buckets, onehot, scale = self._cache
        dz = split_heads(self.out_proj.backward(grad), self.num_heads)  # (B, H, Tq, Dh)
        dv = a.swapaxes(-1, -2) @ dz  # (B, H, Tk, Dh)
        self.grads["rel_v"] += np.einsum("bhik,bhid->kd", buckets, dz)
        da = dz @ v.swapaxes(-1, -2) + np.einsum("bhik,ijk->bhij", dz @ self.params["rel_v"].T, onehot)
        de = softmax_backward(a, da)  # (B, H, Tq, Tk)
        de_buckets = np.einsum("bhij,ijk->bhik", de, onehot)  # (B, H, Tq, K2)
        dq = (de @ k + de_buckets @ self.params["rel_k"]) * scale
        dk = de.swapaxes(-1, -2) @ q * scale
        self.grads["rel_k"] += np.einsum("bhik,bhid->kd", de_buckets, q) * scale
        dx = self.q_proj.backward(merge_heads(dq))
        dkey = self.k_proj.backward(merge_heads(dk))
        dvalue = self.v_proj.backward(merge_heads(dv))
        if self._self_attention:
            return dx + dkey + dvalue
        return dx, dkey, dvalue
