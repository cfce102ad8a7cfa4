"""Multi-head attention: self, cross and grouped-query (Vaswani et al., 2017; Ainslie et al., 2023).

``MultiHead(Q, K, V) = Concat(head_1..head_H) W_O`` with
``head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i)``. With ``kv_heads < num_heads``
groups of query heads share one key/value head (GQA; ``kv_heads=1`` is
multi-query attention), which shrinks the KV cache by ``num_heads / kv_heads``.

Shape legend: B batch, Tq/Tk query/key length, D model width, H heads, Dh head width.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnkit._checks import positive_int, probability
from attnkit.core.functional import attention, merge_heads, split_heads
from attnkit.core.kernels.dense import apply_dropout
from attnkit.core.masks import (
    AttentionMask,
    BlockMask,
    MaskLike,
    allowed_pairs,
    as_attention_mask,
    query_has_key,
    read_mask,
)
from attnkit.layers.kv_cache import KVCache

__all__ = ["MultiHeadAttention"]


def check_dropout(value: object) -> float:
    """Validate a dropout probability (shared by every layer)."""
    return probability("dropout", value)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the masks of the attention kernels (:func:`attnkit.core.kernels.dense.apply_dropout`:
    the same output distribution, drawn about 3x faster on a CPU); the BERT models' dropout."""

    def forward(self, input: Tensor) -> Tensor:
        return apply_dropout(input, self.p) if self.training else input


def refuse_block_mask(layer: str, mask: object, why: str) -> None:
    """Raise ``TypeError`` naming ``layer`` when ``mask`` is (or holds) a BlockMask, which that layer cannot use."""
    if isinstance(mask, BlockMask) or (isinstance(mask, AttentionMask) and mask.is_block):
        raise TypeError(
            f"{layer} does not support a BlockMask as mask ({why}); pass a boolean tensor mask, "
            "or use MultiHeadAttention or attnkit.attention for block-sparse attention"
        )


def zero_rows_without_key(y: Tensor, mask: MaskLike, tk: int, *, causal: bool = False) -> Tensor:
    """``y`` with the rows of the queries that have no key set to zero, after a biased projection.

    The rows come from :func:`attnkit.masks.query_has_key`: an
    :class:`~attnkit.core.masks.AttentionMask` hands over the rows it carries; a
    plain mask is read by :func:`attnkit.masks.read_mask` first.

    Shape:
        y ``(B, Tq, D)``; mask as :func:`attnkit.masks.read_mask` takes it for
        ``(B, H, Tq, Tk)``, a BlockMask or an AttentionMask; returns ``(B, Tq, D)``.
    """
    if mask is not None and not isinstance(mask, AttentionMask):
        mask = read_mask(mask, (y.shape[0], None, y.shape[1], tk))
    ok = query_has_key(mask, y.shape[1], tk, causal=causal)  # (B or 1, Tq, 1)
    return y if ok is None else y.masked_fill(~ok, 0.0)


def check_sequence(name: str, x: object, width: int) -> Tensor:
    """Validate a batch-first sequence ``(B, T, width)``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != width:
        raise ValueError(f"{name} must be (B, T, {width}), got shape {tuple(x.shape)}")
    return x


def resolve_key_value(
    x: Tensor, key: Tensor | None, value: Tensor | None, width: int
) -> tuple[Tensor, Tensor]:
    """Keys and values of a layer call: ``x`` itself for self-attention, else the checked pair.

    Shape:
        x ``(B, Tq, width)``; key and value ``(B, Tk, width)``; returns ``(key, value)``.
    """
    if (key is None) != (value is None):
        raise ValueError("pass both key and value for cross-attention, or neither for self-attention")
    if key is None or value is None:
        return x, x
    check_sequence("key", key, width)
    check_sequence("value", value, width)
    if key.shape[:2] != value.shape[:2] or key.shape[0] != x.shape[0]:
        raise ValueError(
            f"key {tuple(key.shape)} and value {tuple(value.shape)} must share (B, Tk) "
            f"with batch B={x.shape[0]} of x"
        )
    return key, value


def _with_cache_mask(mask: MaskLike, limit: Tensor | None) -> MaskLike:
    """``mask`` narrowed to the keys a bounded cache (rolling, sinks) lets the new queries see.

    The cache decides anew at every step which keys exist, so the narrowed mask
    is a new one: a boolean tensor, whose rows the layer then finds by the same rule.
    """
    if limit is None:
        return mask
    pairs = allowed_pairs(mask)
    if isinstance(pairs, BlockMask):
        raise TypeError(
            "MultiHeadAttention cannot combine a BlockMask with a rolling or attention-sink cache "
            "(the cache decides which keys each query sees); pass a boolean mask or none"
        )
    return limit if pairs is None else pairs & limit


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, with the attnkit mask rule.

    Args:
        d_model: model width D; must be divisible by ``num_heads``.
        num_heads: query heads H.
        kv_heads: key/value heads (grouped-query attention); must divide
            ``num_heads``. Default ``num_heads``.
        kdim: width of the key input for cross-attention (default ``d_model``).
        vdim: width of the value input for cross-attention (default ``d_model``).
        bias: add biases to the projections.
        dropout: attention-weight dropout, active in training mode only.

    Shape:
        query ``(B, Tq, D)``, key ``(B, Tk, kdim)``, value ``(B, Tk, vdim)``;
        output ``(B, Tq, D)``; weights ``(B, H, Tq, Tk)``.
    """

    def __init__(
        self, d_model: int, num_heads: int, *, kv_heads: int | None = None, kdim: int | None = None,
        vdim: int | None = None, bias: bool = True, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        positive_int("d_model", d_model)
        positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} must be divisible by num_heads={num_heads} "
                f"(each head gets d_model / num_heads features)"
            )
        kv_heads = num_heads if kv_heads is None else positive_int("kv_heads", kv_heads)
        if num_heads % kv_heads:
            raise ValueError(f"kv_heads={kv_heads} must divide num_heads={num_heads}")
        self.d_model, self.num_heads, self.kv_heads = d_model, num_heads, kv_heads
        self.head_dim = d_model // num_heads
        self.kdim = d_model if kdim is None else positive_int("kdim", kdim)
        self.vdim = d_model if vdim is None else positive_int("vdim", vdim)
        self.dropout = check_dropout(dropout)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(self.kdim, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., *,
        mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[False] = ..., cache: KVCache | None = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., *,
        mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[True], cache: KVCache | None = ...,
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
        mask: MaskLike = None, bias: Tensor | None = None, causal: bool = False,
        return_weights: bool = False, cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query`` to ``key``/``value`` (to ``query`` itself when they are omitted).

        ``mask`` is boolean, True where a query may attend to a key, read by
        the rule of every layer (:func:`attnkit.masks.read_mask`):
        ``(B, 1|H, Tq|1, Tk)``, a ``(B, Tk)`` key-padding mask or ``(Tq, Tk)``
        pairs, a 2-D mask with ``B == Tq`` refused as ambiguous. A
        :class:`attnkit.masks.BlockMask` for ``(B, H, Tq, Tk)`` runs the
        block-sparse path; an :class:`attnkit.masks.AttentionMask` built once
        by the model is used as it is, its rows included. A query with no key
        gets a zero output (no output-projection bias). ``cache`` enables
        incremental decoding: the projected keys and values of this call are
        appended to it (or, for a static cache that is already filled, read
        from it, and ``key``/``value`` may be omitted); a
        :class:`~attnkit.layers.kv_cache.RollingKVCache` or
        :class:`~attnkit.layers.kv_cache.AttentionSinkCache` also narrows the
        mask to the keys each new query may see.

        Shape:
            query ``(B, Tq, D)``; key ``(B, Tk, kdim)``; value ``(B, Tk, vdim)``;
            returns ``(B, Tq, D)`` and, on request, weights ``(B, H, Tq, Tk)``
            where ``Tk`` includes cached steps.
        """
        check_sequence("query", query, self.d_model)
        if (key is None) != (value is None):
            raise ValueError("pass both key and value for cross-attention, or neither for self-attention")
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, Tq, Dh)
        limit: Tensor | None = None  # the keys a bounded cache lets the new queries see
        if cache is not None and cache.static and cache.filled:
            k, v = cache.keys, cache.values
            assert k is not None and v is not None
        else:
            if key is None or value is None:
                if cache is not None and cache.static:
                    raise ValueError("an empty static cache needs key and value to fill it")
                key, value = query, query
                k_in, v_in = query, query
            else:
                k_in = check_sequence("key", key, self.kdim)
                v_in = check_sequence("value", value, self.vdim)
                if k_in.shape[:2] != v_in.shape[:2] or k_in.shape[0] != query.shape[0]:
                    raise ValueError(
                        f"key {tuple(k_in.shape)} and value {tuple(v_in.shape)} must share (B, Tk) "
                        f"with batch B={query.shape[0]} of query"
                    )
            k, v = self.project_key_value(k_in, v_in)
            if cache is not None:
                k, v = cache.update(k, v)
                limit = cache.last_mask
        mask = as_attention_mask(mask, (query.shape[0], self.num_heads, query.shape[1], k.shape[2]),
                                 name="MultiHeadAttention mask")
        if limit is not None:
            mask = _with_cache_mask(mask, limit)
        dropout = self.dropout if self.training else 0.0
        result = attention(
            q, k, v, mask=mask, bias=bias, causal=causal, dropout=dropout,
            return_weights=return_weights,
        )
        out, weights = result if isinstance(result, tuple) else (result, None)
        y = zero_rows_without_key(self.out_proj(merge_heads(out)), mask, k.shape[2], causal=causal)  # (B, Tq, D)
        if weights is not None:
            return y, weights
        return y

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """``key`` and ``value`` through the layer's projections, split into its key-value heads (the ring's
        self-attention projects its slice with these too).

        Shape:
            key ``(B, Tk, kdim)``, value ``(B, Tk, vdim)`` -> each ``(B, Hkv, Tk, Dh)``.
        """
        return split_heads(self.k_proj(key), self.kv_heads), split_heads(self.v_proj(value), self.kv_heads)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Build an equivalent layer from ``nn.MultiheadAttention``, copying its weights.

        The result is batch-first whatever ``module.batch_first`` was, and reads
        masks by attnkit's rule: convert PyTorch masks with
        :func:`attnkit.masks.from_key_padding_mask` and
        :func:`attnkit.masks.from_torch_attn_mask`. Modules with ``add_bias_kv``
        or ``add_zero_attn`` have no equivalent and are rejected.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"module must be nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
        d = module.embed_dim
        has_bias = module.in_proj_bias is not None
        layer = cls(
            d, module.num_heads, kdim=module.kdim, vdim=module.vdim, bias=has_bias,
            dropout=module.dropout,
        )
        # Match dtype and device before copying, so float64 weights are not rounded.
        layer = layer.to(device=module.out_proj.weight.device, dtype=module.out_proj.weight.dtype)
        with torch.no_grad():
            if module.in_proj_weight is not None:
                wq, wk, wv = module.in_proj_weight.chunk(3)
            else:
                wq, wk, wv = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
            layer.q_proj.weight.copy_(wq)
            layer.k_proj.weight.copy_(wk)
            layer.v_proj.weight.copy_(wv)
            layer.out_proj.weight.copy_(module.out_proj.weight)
            if has_bias:
                bq, bk, bv = module.in_proj_bias.chunk(3)
                layer.q_proj.bias.copy_(bq)
                layer.k_proj.bias.copy_(bk)
                layer.v_proj.bias.copy_(bv)
                layer.out_proj.bias.copy_(module.out_proj.bias)
        return layer.train(module.training)


