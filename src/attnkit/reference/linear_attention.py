"""Efficient (linear) attention of Shen et al. (2021), forward and backward.

Queries are normalised over their features and keys over positions, so the
product re-associates and costs ``O(T Dh Dv)`` instead of ``O(T^2)``::

    Qf = softmax_D(Q),   Kf = softmax_T(K)   (masked keys dropped),
    C  = Kf^T V   (Dh, Dv),   O = Qf C

Backward::

    dQf = dO C^T,  dC = Qf^T dO,  dKf = V dC^T,  dV = Kf dC,
    dQ = softmax_backward_D(Qf, dQf),   dK = softmax_backward_T(Kf, dKf)

Causal form (as the torch layer): each query normalises the keys over its own
prefix, ``E = exp(K - max)``, ``Z_i = sum_{j<=i} E_j`` (per feature), and::

    A = Qf / Z,   W = tril(A E^T),   O = W V

Backward: ``dW = tril(dO V^T)``, ``dA = dW E``, ``dE = dW^T A``, and through
``Z``: ``dZ = -dA * Qf / Z^2``, ``dE += reverse_cumsum(dZ)``; ``dQf = dA / Z``,
``dK = dE * E``. This twin writes ``W`` out (``O(T^2)`` memory, for checking);
the torch layer scans in chunks.

Same formulation and parameter names (``q_proj``, ``k_proj``, ``v_proj``,
``out_proj``) as :class:`attnkit.layers.linear.LinearAttention`; only key masks
``(B, Tk)`` or ``(B, 1, 1, Tk)`` apply. A query with no key left gets zeros.

Shape legend: B batch, H heads, T lengths, D model width, Dh/Dv head widths.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.functional import merge_heads, safe_softmax, softmax_backward, split_heads
from attnkit.reference.layers import Linear
from attnkit.reference.module import Module, check_array
from attnkit.reference.multi_head import check_heads

__all__ = [
    "key_mask",
    "linear_attention_forward",
    "linear_attention_backward",
    "causal_linear_attention_forward",
    "causal_linear_attention_backward",
    "LinearAttention",
]

Array = np.ndarray


def key_mask(mask: object, b: int, tk: int) -> Array | None:
    """Normalise a key mask to ``(B, 1, 1, Tk)`` bool (True = may attend)."""
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError("key_mask must be a boolean array (True = may attend), "
                        f"got {getattr(mask, 'dtype', type(mask))}")
    m = mask[:, 0, 0] if mask.ndim == 4 and mask.shape[1:3] == (1, 1) else mask
    if m.ndim != 2 or m.shape[-1] != tk or m.shape[0] not in (1, b):
        raise ValueError(
            f"key_mask must be a key-padding mask (B, Tk) or (B, 1, 1, Tk) with B={b}, Tk={tk}; "
            f"got shape {mask.shape} (linear attention cannot apply per-query masks)"
        )
    return np.broadcast_to(m, (b, tk))[:, None, None, :]  # (B, 1, 1, Tk)


def linear_attention_forward(q: Array, k: Array, v: Array, key_mask_: Array | None = None
                             ) -> tuple[Array, tuple[Array, Array, Array, Array]]:
    """Output and cache. ``key_mask_`` is ``(B, 1, 1, Tk)`` from :func:`key_mask`.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)``, v ``(B, H, Tk, Dv)``; returns ``(B, H, Tq, Dv)``.
    """
    qf = safe_softmax(q)  # (B, H, Tq, Dh)
    kt_mask = None if key_mask_ is None else key_mask_  # broadcasts over (B, H, Dh, Tk)
    kf = safe_softmax(k.swapaxes(-1, -2), kt_mask).swapaxes(-1, -2)  # (B, H, Tk, Dh), softmax over T
    context = kf.swapaxes(-1, -2) @ v  # (B, H, Dh, Dv)
    return qf @ context, (qf, kf, v, context)


def causal_linear_attention_forward(q: Array, k: Array, v: Array, key_mask_: Array | None = None
                                    ) -> tuple[Array, tuple[Array, ...]]:
    """Prefix-normalised causal form; output and cache for :func:`causal_linear_attention_backward`.

    Shape:
        q, k ``(B, H, T, Dh)``, v ``(B, H, T, Dv)``; returns ``(B, H, T, Dv)``.
    """
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"causal linear attention needs Tq == Tk, got q {q.shape}, k {k.shape}")
    qf = safe_softmax(q)  # (B, H, T, Dh)
    keep = None if key_mask_ is None else key_mask_[:, :, 0, :, None]  # (B, 1, T, 1)
    kk = k if keep is None else np.where(keep, k, -np.inf)
    shift = kk.max(axis=2, keepdims=True)  # (B, H, 1, Dh); the shift cancels in A E^T
    shift = np.where(np.isfinite(shift), shift, 0.0)
    e = np.exp(kk - shift)  # (B, H, T, Dh), 0 on masked keys
    z = np.cumsum(e, axis=2)  # (B, H, T, Dh)
    a = np.where(z > 0, qf / np.where(z > 0, z, 1.0), 0.0)  # (B, H, T, Dh)
    t = q.shape[2]
    tril = np.tril(np.ones((t, t), dtype=bool))
    w = np.where(tril, a @ e.swapaxes(-1, -2), 0.0)  # (B, H, T, T)
    return w @ v, (qf, e, z, a, w, v, tril)


def causal_linear_attention_backward(grad: Array, cache: tuple[Array, ...]) -> tuple[Array, Array, Array]:
    qf, e, z, a, w, v, tril = cache
    dv = w.swapaxes(-1, -2) @ grad  # (B, H, T, Dv)
    dw = np.where(tril, grad @ v.swapaxes(-1, -2), 0.0)  # (B, H, T, T)
    da = dw @ e  # (B, H, T, Dh)
    de = dw.swapaxes(-1, -2) @ a  # (B, H, T, Dh)
    safe_z = np.where(z > 0, z, 1.0)
    dz = np.where(z > 0, -da * qf / safe_z**2, 0.0)
    de += np.flip(np.cumsum(np.flip(dz, axis=2), axis=2), axis=2)  # dZ_i reaches every j <= i
    dqf = np.where(z > 0, da / safe_z, 0.0)
    return softmax_backward(qf, dqf), de * e, dv


def linear_attention_backward(grad: Array, cache: tuple[Array, Array, Array, Array]
                              ) -> tuple[Array, Array, Array]:
    qf, kf, v, context = cache
    dqf = grad @ context.swapaxes(-1, -2)  # (B, H, Tq, Dh)
    dcontext = qf.swapaxes(-1, -2) @ grad  # (B, H, Dh, Dv)
    dkf = v @ dcontext.swapaxes(-1, -2)  # (B, H, Tk, Dh)
    dv = kf @ dcontext  # (B, H, Tk, Dv)
    dq = softmax_backward(qf, dqf)
    dk = softmax_backward(kf.swapaxes(-1, -2), dkf.swapaxes(-1, -2)).swapaxes(-1, -2)
    return dq, dk, dv


class LinearAttention(Module):
    """Multi-head efficient attention with projections; ``causal`` picks the prefix form.

    Shape:
        x ``(B, T, D)``; mask ``(B, T)`` or ``(B, 1, 1, T)``; returns ``(B, T, D)``.
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool = False, *, bias: bool = True,
                 rng: np.random.Generator | None = None, dtype: type = np.float32) -> None:
        super().__init__()
        self.d_model, self.num_heads, _ = check_heads(d_model, num_heads)
        self.causal = causal
        self._cache: tuple[Array, ...] = ()
        gen = rng if rng is not None else np.random.default_rng()
        self.q_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)

    def forward(self, x: Array, *, mask: Array | None = None) -> Array:
        check_array("x", x, 3, f"(B, T, {self.d_model})", self.d_model)
        q = split_heads(self.q_proj.forward(x), self.num_heads)  # (B, H, T, Dh)
        k = split_heads(self.k_proj.forward(x), self.num_heads)  # (B, H, T, Dh)
        v = split_heads(self.v_proj.forward(x), self.num_heads)  # (B, H, T, Dh)
        keys = key_mask(mask, x.shape[0], x.shape[1])
        if self.causal:
            out, self._cache = causal_linear_attention_forward(q, k, v, keys)
        else:
            out, self._cache = linear_attention_forward(q, k, v, keys)
        return self.out_proj.forward(merge_heads(out))  # (B, T, D)

    def backward(self, grad: Array) -> Array:
        g = split_heads(self.out_proj.backward(grad), self.num_heads)  # (B, H, T, Dh)
        if self.causal:
            dq, dk, dv = causal_linear_attention_backward(g, self._cache)
        else:
            dq, dk, dv = linear_attention_backward(g, self._cache)  # type: ignore[arg-type]
        return (self.q_proj.backward(merge_heads(dq)) + self.k_proj.backward(merge_heads(dk))
                + self.v_proj.backward(merge_heads(dv)))
