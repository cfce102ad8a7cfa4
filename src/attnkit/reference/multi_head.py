"""Multi-head attention in NumPy, self and cross, forward and backward.

``MultiHead(Q, K, V) = Concat(head_1..head_H) W_O`` with
``head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i)`` (Vaswani et al., 2017).
Parameter names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, each
``.weight``/``.bias``) and the grouped-query option follow
:class:`attnkit.layers.multi_head.MultiHeadAttention`.

Shape legend: B batch, Tq/Tk query/key length, D model width, H heads, Dh head width.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.attention import AttentionCache, attention_backward, attention_forward
from attnkit.reference.functional import merge_heads, split_heads
from attnkit.reference.layers import Linear
from attnkit.reference.module import Module, check_array, check_dropout, check_positive

__all__ = ["MultiHeadAttention", "check_heads"]

Array = np.ndarray
Grads = Array | tuple[Array, Array, Array]


def check_heads(d_model: object, num_heads: object, kv_heads: object | None = None) -> tuple[int, int, int]:
    """Validate ``d_model``, ``num_heads`` and ``kv_heads`` as the torch layer does."""
    d = check_positive("d_model", d_model)
    h = check_positive("num_heads", num_heads)
    if d % h:
        raise ValueError(
            f"d_model={d} must be divisible by num_heads={h} (each head gets d_model / num_heads features)"
        )
    hkv = h if kv_heads is None else check_positive("kv_heads", kv_heads)
    if h % hkv:
        raise ValueError(f"kv_heads={hkv} must divide num_heads={h}")
    return d, h, hkv


class MultiHeadAttention(Module):
    """Multi-head attention with the attnkit mask rule.

    ``forward(query)`` is self-attention and ``backward`` returns ``dquery``;
    ``forward(query, key, value)`` is cross-attention and ``backward`` returns
    ``(dquery, dkey, dvalue)``. The weights of the last call are in ``weights``.

    Shape:
        query ``(B, Tq, D)``, key ``(B, Tk, kdim)``, value ``(B, Tk, vdim)``;
        output ``(B, Tq, D)``; weights ``(B, H, Tq, Tk)``.
    """

    def __init__(self, d_model: int, num_heads: int, *, kv_heads: int | None = None,
                 kdim: int | None = None, vdim: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rng: np.random.Generator | None = None,
                 dtype: type = np.float32) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.kv_heads = check_heads(d_model, num_heads, kv_heads)
        self.head_dim = self.d_model // self.num_heads
        self.kdim = d_model if kdim is None else check_positive("kdim", kdim)
        self.vdim = d_model if vdim is None else check_positive("vdim", vdim)
        self.dropout = check_dropout(dropout)
        gen = rng if rng is not None else np.random.default_rng()
        self.rng = gen
        kv_width = self.kv_heads * self.head_dim
        self.q_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self.k_proj = Linear(self.kdim, kv_width, bias=bias, rng=gen, dtype=dtype)
        self.v_proj = Linear(self.vdim, kv_width, bias=bias, rng=gen, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, rng=gen, dtype=dtype)
        self._cache: AttentionCache | None = None
        self._self_attention = True

    def forward(self, query: Array, key: Array | None = None, value: Array | None = None, *,
                mask: Array | None = None, bias: Array | None = None,
                causal: bool = False) -> Array:
        check_array("query", query, 3, f"(B, T, {self.d_model})", self.d_model)
        if (key is None) != (value is None):
            raise ValueError("pass both key and value for cross-attention, or neither for self-attention")
        self._self_attention = key is None
        if key is None or value is None:
            key, value = query, query
        else:
            check_array("key", key, 3, f"(B, T, {self.kdim})", self.kdim)
            check_array("value", value, 3, f"(B, T, {self.vdim})", self.vdim)
            if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
                raise ValueError(
                    f"key {key.shape} and value {value.shape} must share (B, Tk) "
                    f"with batch B={query.shape[0]} of query"
                )
        q = split_heads(self.q_proj.forward(query), self.num_heads)  # (B, H, Tq, Dh)
        k = split_heads(self.k_proj.forward(key), self.kv_heads)  # (B, Hkv, Tk, Dh)
        v = split_heads(self.v_proj.forward(value), self.kv_heads)  # (B, Hkv, Tk, Dh)
        p = self.dropout if self.training else 0.0
        out, self._cache = attention_forward(
            q, k, v, mask=mask, bias=bias, causal=causal, dropout=p, rng=self.rng
        )
        return self.out_proj.forward(merge_heads(out))  # (B, Tq, D)

    @property
    def weights(self) -> Array:
        """Attention weights of the last forward pass ``(B, H, Tq, Tk)``."""
        if self._cache is None:
            raise RuntimeError("call forward first")
        return self._cache.weights

    def backward(self, grad: Array) -> Grads:
        assert self._cache is not None, "backward called before forward"
        g = split_heads(self.out_proj.backward(grad), self.num_heads)  # (B, H, Tq, Dh)
        dq, dk, dv, _ = attention_backward(g, self._cache)
        d_query = self.q_proj.backward(merge_heads(dq))  # (B, Tq, D)
        d_key = self.k_proj.backward(merge_heads(dk))  # (B, Tk, kdim)
        d_value = self.v_proj.backward(merge_heads(dv))  # (B, Tk, vdim)
        if self._self_attention:
            return d_query + d_key + d_value
        return d_query, d_key, d_value
