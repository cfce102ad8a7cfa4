"""Weights of ``torch.nn.MultiheadAttention``, computed beside the module's own kernel.

``nn.MultiheadAttention`` returns no weights when ``need_weights=False`` (which
``nn.TransformerEncoderLayer`` and ``nn.TransformerDecoderLayer`` always pass),
and the encoder layer's fast path (eval mode, no grad) does not call the
attention module at all: one fused C++ kernel runs the whole layer, on a
nested tensor when ``nn.TransformerEncoder`` packs padded batches. So the
weights are read from the *inputs*:

* a decoder layer or a bare ``nn.MultiheadAttention``: a forward pre-hook on
  the attention module reads ``query``, ``key`` and the masks;
* an encoder layer: a forward pre-hook on the layer reads ``src`` and its masks
  (through ``norm1`` when ``norm_first``), whichever path the layer then takes.

The weights are ``softmax(Q K^T / sqrt(Dh))`` under the same masks, from the
module's own projection weights, through :func:`attnkit.attention_weights` and
attnkit's mask converters. The module's output is not touched. Attention
dropout is not applied (the weights are the probabilities before dropout), and
a query row with no key gets zero weights (attnkit's rule) where PyTorch gives NaN.
Rows of padded queries that the nested-tensor path never computes are zero.
"""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core import masks
from attnkit.core.functional import attention_weights, split_heads

__all__ = ["mha_weights", "mha_call_weights", "encoder_layer_call_weights"]

_MHA_SIG = _pyinspect.signature(nn.MultiheadAttention.forward)
_LAYER_SIG = _pyinspect.signature(nn.TransformerEncoderLayer.forward)


def _projections(mha: nn.MultiheadAttention) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    e = mha.embed_dim
    if mha._qkv_same_embed_dim:
        assert mha.in_proj_weight is not None
        wq, wk = mha.in_proj_weight[:e], mha.in_proj_weight[e: 2 * e]
    else:
        wq, wk = mha.q_proj_weight, mha.k_proj_weight
    bias = mha.in_proj_bias
    bq, bk = (None, None) if bias is None else (bias[:e], bias[e: 2 * e])
    return wq, wk, bq, bk


def _extra_keys(k: Tensor, mha: nn.MultiheadAttention) -> tuple[Tensor, int]:
    """Append ``bias_k`` and the zero key of ``add_zero_attn`` as MHA does; (k, keys added)."""
    added = 0
    if mha.bias_k is not None:  # (1, 1, E) appended to every sequence
        k = torch.cat([k, mha.bias_k.expand(k.shape[0], 1, -1)], dim=1)
        added += 1
    if mha.add_zero_attn:
        k = torch.cat([k, k.new_zeros(k.shape[0], 1, k.shape[-1])], dim=1)
        added += 1
    return k, added


def _mask_parts(
    key_padding_mask: Tensor | None, attn_mask: Tensor | None, is_causal: bool,
    b: int, h: int, tq: int, tk: int, added: int, device: torch.device,
) -> tuple[Tensor | None, Tensor | None]:
    """PyTorch's masks (True = ignore, or additive floats) as attnkit's ``mask`` and ``bias``."""
    keep: Tensor | None = None
    bias: Tensor | None = None
    if key_padding_mask is not None:
        kpm = F.pad(key_padding_mask, (0, added), value=False if key_padding_mask.dtype == torch.bool else 0.0)
        if kpm.dtype == torch.bool:
            keep = masks.from_key_padding_mask(kpm)  # (B, 1, 1, Tk)
        else:
            bias = kpm[:, None, None, :]
    if attn_mask is None and is_causal:  # PyTorch's is_causal: top-left aligned
        tri = F.pad(masks.causal(tq, tk - added, align="top_left", device=device), (0, added), value=True)
        keep = masks.combine(keep, tri[None, None])
    elif attn_mask is not None:
        am = F.pad(attn_mask, (0, added), value=False if attn_mask.dtype == torch.bool else 0.0)
        if am.dtype == torch.bool:
            keep = masks.combine(keep, masks.from_torch_attn_mask(am, b, h))
        else:
            am = am[None, None] if am.dim() == 2 else am.reshape(b, h, tq, tk)
            bias = am if bias is None else bias + am
    return keep, bias


def mha_weights(
    mha: nn.MultiheadAttention, query: Tensor, key: Tensor, *,
    key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None, is_causal: bool = False,
    batch_first: bool | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-head weights of ``mha`` for these inputs, and its query and key vectors.

    Shape:
        query ``(B, Tq, E)`` (``(Tq, B, E)`` unless batch-first, ``(Tq, E)``
        unbatched), key likewise; returns weights ``(B, H, Tq, Tk)`` and
        q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)`` (``Tk`` counts ``bias_k`` and
        the zero key of ``add_zero_attn``).
    """
    first = mha.batch_first if batch_first is None else batch_first
    if query.dim() == 2:  # unbatched (T, E)
        query, key = query.unsqueeze(0), key.unsqueeze(0)
        key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
    elif not first:
        query, key = query.transpose(0, 1), key.transpose(0, 1)  # (B, T, E)
    wq, wk, bq, bk = _projections(mha)
    h = mha.num_heads
    if query is key and mha._qkv_same_embed_dim:  # self-attention: one matmul for Q and K
        e = mha.embed_dim
        assert mha.in_proj_weight is not None
        both = F.linear(query, mha.in_proj_weight[: 2 * e], None if mha.in_proj_bias is None
                        else mha.in_proj_bias[: 2 * e])  # (B, T, 2E)
        q, k = both[..., :e], both[..., e:]
    else:
        q, k = F.linear(query, wq, bq), F.linear(key, wk, bk)  # (B, Tq, E), (B, Tk, E)
    k, added = _extra_keys(k, mha)
    b, tq, tk = q.shape[0], q.shape[1], k.shape[1]
    keep, bias = _mask_parts(key_padding_mask, attn_mask, is_causal, b, h, tq, tk, added, q.device)
    qh, kh = split_heads(q, h), split_heads(k, h)  # (B, H, T, Dh)
    return attention_weights(qh, kh, mask=keep, bias=bias), qh, kh


def mha_call_weights(mha: nn.MultiheadAttention, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`mha_weights` for one call ``mha(*args, **kwargs)`` seen by a forward pre-hook.

    Shape:
        as :func:`mha_weights`.
    """
    bound = _MHA_SIG.bind(mha, *args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    return mha_weights(mha, a["query"], a["key"], key_padding_mask=a["key_padding_mask"],
                       attn_mask=a["attn_mask"], is_causal=bool(a["is_causal"]))


def _nested_weights(
    layer: nn.TransformerEncoderLayer, src: Tensor, length: int | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Weights of a nested ``(B, *T, E)`` batch, one sequence at a time at its own length.

    The nested path computes no padded position, and neither does this: each
    sequence attends over its own tokens with no mask, and the result is laid
    into zeros of the encoder's padded length.
    """
    parts = src.unbind()
    longest = max([int(t.shape[0]) for t in parts] + [length or 0])
    mha, b = layer.self_attn, len(parts)
    h, dh = mha.num_heads, mha.head_dim
    w_out = parts[0].new_zeros(b, h, longest, longest)  # (B, H, T, T)
    q_out, k_out = parts[0].new_zeros(b, h, longest, dh), parts[0].new_zeros(b, h, longest, dh)
    for i, seq in enumerate(parts):
        x = seq[None]  # (1, n, E)
        x = layer.norm1(x) if layer.norm_first else x
        w, q, k = mha_weights(mha, x, x, batch_first=True)
        n = seq.shape[0]
        w_out[i, :, :n, :n], q_out[i, :, :n], k_out[i, :, :n] = w[0], q[0], k[0]
    return w_out, q_out, k_out


def encoder_layer_call_weights(layer: nn.TransformerEncoderLayer, args: tuple[Any, ...],
                               kwargs: dict[str, Any], length: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The self-attention weights of one ``nn.TransformerEncoderLayer`` call, fast path or not.

    ``length`` is the padded length of the encoder's input, used when the layer
    receives a nested tensor (then the rows of padded queries are zero).

    Shape:
        src ``(B, T, E)`` (``(T, B, E)`` unless batch-first) or nested; returns
        weights ``(B, H, T, T)``, q and k ``(B, H, T, Dh)``.
    """
    bound = _LAYER_SIG.bind(layer, *args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    src, kpm = a["src"], a["src_key_padding_mask"]
    if src.is_nested:  # the encoder packed a padded batch; the layer has no mask then
        return _nested_weights(layer, src, length)
    x = layer.norm1(src) if layer.norm_first else src
    return mha_weights(layer.self_attn, x, x, key_padding_mask=kpm, attn_mask=a["src_mask"],
                       is_causal=bool(a["is_causal"]), batch_first=layer.self_attn.batch_first)
