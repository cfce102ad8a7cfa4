"""Scaled dot-product attention in NumPy, forward and backward (Vaswani et al., 2017).

Forward::

    S = scale * Q K^T + bias          (B, H, Tq, Tk)
    P = safe_softmax(S, mask)         rows sum to 1, or are all zero
    O = P V                           (B, H, Tq, Dv)

Backward, given ``dO``::

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dP * P)),
    dQ = scale * dS K,   dK = scale * dS^T Q,   dbias = dS

With grouped-query attention (``Hkv`` divides ``H``) query head ``h`` reads
key/value head ``h // (H / Hkv)``, and ``dK``/``dV`` sum over each group.
Arguments and errors follow :func:`attnkit.attention`.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk lengths, Dh/Dv head widths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnkit._checks import attention_scale
from attnkit.reference import functional as _masks
from attnkit.reference.functional import (
    check_bias,
    check_mask,
    safe_softmax,
    softmax_backward,
)
from attnkit.reference.module import Module, check_dropout

__all__ = ["AttentionCache", "attention_forward", "attention_backward", "check_qkv", "ScaledDotProductAttention"]


def check_qkv(q: object, k: object, v: object) -> None:
    """The torch core's input checks, with the same messages."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray, got {type(t).__name__}")
        if t.ndim != 4:
            legend = "(B, H, Tq, Dh)" if name == "q" else "(B, Hkv, Tk, Dh)"
            raise ValueError(f"{name} must be 4-D {legend}, got shape {t.shape}; split heads first")
        if not np.issubdtype(t.dtype, np.floating):
            raise TypeError(f"{name} must be a floating array, got dtype {t.dtype}")
    assert isinstance(q, np.ndarray) and isinstance(k, np.ndarray) and isinstance(v, np.ndarray)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"q, k and v must share the batch size B, got q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must share heads Hkv and length Tk, got k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k head widths differ: q Dh={q.shape[-1]} {q.shape}, k Dh={k.shape[-1]} {k.shape}")
    h, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or h % hkv != 0:
        raise ValueError(
            f"key/value heads Hkv={hkv} must divide query heads H={h} (grouped-query attention); "
            f"q {q.shape}, k {k.shape}"
        )


@dataclass
class AttentionCache:
    """What the backward pass needs from the forward pass."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray  # (B, H, Tq, Tk), before dropout
    keep: np.ndarray | None  # dropout multiplier (B, H, Tq, Tk), or None
    scale: float
    bias_shape: tuple[int, ...] | None


def _grouped(x: np.ndarray, hkv: int) -> np.ndarray:
    b, h, t, d = x.shape
    return x.reshape(b, hkv, h // hkv, t, d)  # (B, Hkv, G, T, D)


def attention_forward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, mask: np.ndarray | None = None,
    bias: np.ndarray | None = None, causal: bool = False, scale: float | None = None,
    dropout: float = 0.0, rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, AttentionCache]:
    """Attention output and the cache for :func:`attention_backward`.

    ``mask`` is boolean (True = may attend) broadcast to ``(B, H, Tq, Tk)``;
    ``bias`` is a float additive bias; ``causal`` is bottom-right aligned;
    ``dropout`` drops weights with ``rng`` (inverted dropout).

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        returns output ``(B, H, Tq, Dv)``; ``cache.weights`` is ``(B, H, Tq, Tk)``.
    """
    check_qkv(q, k, v)
    b, h, tq, dh = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    target = (b, h, tq, tk)
    if mask is not None:
        check_mask(mask, target)
    if bias is not None:
        check_bias(bias, target)
    p_drop = check_dropout(dropout)
    scale_f = attention_scale(scale, dh)
    scores = _grouped(q, hkv) @ k[:, :, None].swapaxes(-1, -2)  # (B, Hkv, G, Tq, Tk)
    scores = scores.reshape(target) * scale_f  # (B, H, Tq, Tk)
    if bias is not None:
        scores = scores + bias
    full = _masks.combine(mask, _masks.causal(tq, tk) if causal else None)
    weights = safe_softmax(scores, full).astype(q.dtype, copy=False)
    keep = None
    used = weights
    if p_drop > 0.0:
        gen = rng if rng is not None else np.random.default_rng()
        keep = (gen.random(target) >= p_drop).astype(q.dtype) / (1.0 - p_drop)
        used = weights * keep
    out = _grouped(used, hkv) @ v[:, :, None]  # (B, Hkv, G, Tq, Dv)
    out = out.reshape(b, h, tq, v.shape[-1])  # (B, H, Tq, Dv)
    cache = AttentionCache(q, k, v, weights, keep, scale_f, None if bias is None else bias.shape)
    return out, cache


def _reduce_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to the shape of the array that was broadcast."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def attention_backward(
    grad: np.ndarray, cache: AttentionCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Gradients ``(dq, dk, dv, dbias)`` of the loss, given ``grad = dL/d output``.

    ``dbias`` has the shape of the bias passed forward (``None`` without one).

    Shape:
        grad ``(B, H, Tq, Dv)``; returns dq ``(B, H, Tq, Dh)``, dk ``(B, Hkv, Tk, Dh)``,
        dv ``(B, Hkv, Tk, Dv)``, the shapes of the forward inputs.
    """
    q, k, v, p = cache.q, cache.k, cache.v, cache.weights
    b, h, tq, _ = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    used = p if cache.keep is None else p * cache.keep
    g = _grouped(grad, hkv)  # (B, Hkv, G, Tq, Dv)
    dv = (_grouped(used, hkv).swapaxes(-1, -2) @ g).sum(axis=2)  # (B, Hkv, Tk, Dv)
    dp = (g @ v[:, :, None].swapaxes(-1, -2)).reshape(b, h, tq, tk)  # (B, H, Tq, Tk)
    if cache.keep is not None:
        dp = dp * cache.keep
    ds = softmax_backward(p, dp)  # (B, H, Tq, Tk)
    dq = (_grouped(ds, hkv) @ k[:, :, None]).reshape(q.shape) * cache.scale  # (B, H, Tq, Dh)
    dk = (_grouped(ds, hkv).swapaxes(-1, -2) @ _grouped(q, hkv)).sum(axis=2) * cache.scale
    dbias = None if cache.bias_shape is None else _reduce_to(ds, cache.bias_shape)
    return dq, dk, dv, dbias


class ScaledDotProductAttention(Module):
    """Attention as a layer: ``forward(q, k, v, ...)``, ``backward(grad) -> (dq, dk, dv)``.

    The bias gradient of the last backward, if a bias was passed, is kept in
    ``bias_grad``.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        output ``(B, H, Tq, Dv)``.
    """

    def __init__(self, dropout: float = 0.0, seed: int | None = None) -> None:
        super().__init__()
        self.dropout = check_dropout(dropout)
        self.rng = np.random.default_rng(seed)
        self.cache: AttentionCache | None = None
        self.bias_grad: np.ndarray | None = None

    def forward(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, mask: np.ndarray | None = None,
        bias: np.ndarray | None = None, causal: bool = False, scale: float | None = None,
    ) -> np.ndarray:
        p = self.dropout if self.training else 0.0
        out, self.cache = attention_forward(
            q, k, v, mask=mask, bias=bias, causal=causal, scale=scale, dropout=p, rng=self.rng
        )
        return out

    @property
    def weights(self) -> np.ndarray:
        """Attention weights of the last forward pass ``(B, H, Tq, Tk)``."""
        if self.cache is None:
            raise RuntimeError("call forward first")
        return self.cache.weights

    def backward(self, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.cache is None:
            raise RuntimeError("backward called before forward")
        dq, dk, dv, self.bias_grad = attention_backward(grad, self.cache)
        return dq, dk, dv
