"""attnkit's own Transformer stacks under context parallelism: every self-attention through the ring.

:func:`context_parallel` is a context manager around any module built from
:class:`~attnkit.layers.multi_head.MultiHeadAttention` (``TransformerEncoder``,
``TransformerDecoder``, the models built from them). Inside it, each of those
layers computes its *self*-attention with
:func:`~attnkit.parallel.ring_attention` over the group; everything else a
Transformer layer does (projections, feed-forward, LayerNorm, residuals) is
per token and runs on the local tokens as it is. Cross-attention (a decoder
reading an encoder's memory) keeps the ordinary path: the local queries
attend the whole memory, which every process holds.

The module's input is this process's slice of the tokens
(:func:`~attnkit.parallel.shard_sequence`, positions from
:func:`~attnkit.parallel.local_positions`), and ``mask`` is the mask of the
**full** sequence (a BlockMask, an ``AttentionMask``, lengths...), passed
down unchanged as the stacks always do. A query with no key gets the zero
row (no output-projection bias), as outside. The parameters' gradients of one
process are its tokens' share: sum them over the group (``all_reduce``) to get
the unsharded step's gradients.

Shape legend: B batch, T full length, Tl = T / world, D model width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.block_mask import BlockMask
from attnkit.core.functional import merge_heads, split_heads
from attnkit.core.masks import AttentionMask, MaskLike, query_has_key, read_mask
from attnkit.layers.multi_head import MultiHeadAttention, check_sequence
from attnkit.parallel.comm import resolve_group
from attnkit.parallel.layout import Layout, runs_of
from attnkit.parallel.ring import ring_attention

__all__ = ["context_parallel"]


def _local_rows(mask: MaskLike, causal: bool, b: int, length: int, g: Any, layout: str) -> Tensor | None:
    """The local query rows that have a key in the full sequence (``None``: all).

    Shape:
        returns ``(B|1, Tl, 1)`` bool.
    """
    if mask is not None and not isinstance(mask, AttentionMask | BlockMask):
        mask = read_mask(mask, (b, None, length, length))
    rows = query_has_key(mask, length, length, causal=causal)  # (B|1, T|1, 1)
    if rows is None or rows.shape[1] == 1:
        return rows
    pos = torch.cat([torch.arange(a, z, device=rows.device) for a, z in runs_of(g.rank, g.world, length, layout)])
    return rows[:, pos]


class _RingSelfAttention:
    """The ``forward`` a :class:`MultiHeadAttention` takes inside :func:`context_parallel`."""

    def __init__(self, layer: MultiHeadAttention, group: Any, layout: Layout, timeout: float | None):
        self.layer, self.group, self.layout, self.timeout = layer, group, layout, timeout

    def __call__(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                 mask: MaskLike = None, bias: Tensor | None = None, causal: bool = False,
                 return_weights: bool = False, cache: Any = None) -> Any:
        layer = self.layer
        if key is not None or value is not None:  # cross-attention: the whole memory is here
            return MultiHeadAttention.forward(layer, query, key, value, mask=mask, bias=bias, causal=causal,
                                              return_weights=return_weights, cache=cache)  # type: ignore[call-overload]
        refused = [name for name, on in (("bias", bias is not None), ("return_weights", return_weights),
                                         ("cache", cache is not None),
                                         ("attention dropout", layer.training and layer.dropout > 0)) if on]
        if refused:
            raise ValueError(f"context_parallel's self-attention takes no {', '.join(refused)} "
                             "(use eval mode or attention_dropout=0 for dropout)")
        check_sequence("query", query, layer.d_model)
        q = split_heads(layer.q_proj(query), layer.num_heads)  # (B, H, Tl, Dh)
        k, v = layer.project_key_value(query, query)  # (B, Hkv, Tl, Dh) each
        out = ring_attention(q, k, v, mask=mask, causal=causal, group=self.group, layout=self.layout,
                             timeout=self.timeout)  # (B, H, Tl, Dh)
        y = layer.out_proj(merge_heads(out))  # (B, Tl, D)
        g = resolve_group(self.group, self.timeout)
        rows = _local_rows(mask, causal, query.shape[0], query.shape[1] * g.world, g, self.layout)
        return y if rows is None else y.masked_fill(~rows, 0.0)


@contextmanager
def context_parallel(module: nn.Module, *, group: Any = None, layout: Layout = "balanced",
                     timeout: float | None = None) -> Iterator[nn.Module]:
    """Run ``module``'s attnkit self-attention layers with :func:`~attnkit.parallel.ring_attention`.

    Inside the ``with`` block, call the module with this process's slice of the
    tokens and the full sequence's ``mask``; each self-attention layer's output
    is its rows of the unsharded layer's. The layers get their own ``forward``
    back when the block ends, also on an exception.

    Shape:
        inside, the module's sequence inputs are ``(B, Tl, D)`` slices and its ``mask`` is for ``(B, H, T, T)``.
    """
    layers = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"context_parallel found no attnkit MultiHeadAttention in {type(module).__name__}; "
                         "for a layer of your own call attnkit.parallel.ring_attention where it calls attention")
    resolve_group(group, timeout)  # no process group: refused here, by name
    for layer in layers:
        layer.forward = _RingSelfAttention(layer, group, layout, timeout)  # type: ignore[method-assign]
    try:
        yield module
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
