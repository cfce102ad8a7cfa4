"""Weights of timm's ``Attention`` block, computed beside its fused kernel.

timm's ``Attention`` (``timm.layers.attention.Attention``, used by its vision
transformers) runs ``F.scaled_dot_product_attention`` when ``fused_attn`` is
set and returns no weights either way. Its documented structure is enough to
recompute them from the block's input: a ``qkv`` linear layer of width
``3 * num_heads * head_dim`` (queries, keys, values in that order),
``q_norm``/``k_norm`` applied per head, the ``scale``, and ``forward(x,
attn_mask=None, is_causal=False)`` where a boolean ``attn_mask`` is True where
a query may attend (SDPA's rule, which is attnkit's) and a float one is added
to the logits. The weights are ``softmax(q_norm(Q) k_norm(K)^T * scale +
mask)``, before ``attn_drop``.

A module is taken for a timm attention block when its class comes from
``timm`` and has exactly that structure; variants with rotary positions or
other projections (``AttentionRope``, Swin, BEiT, ...) are read from their
``attn_drop`` instead (:mod:`attnkit.inspect.timm_blocks`).
"""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core import masks
from attnkit.core.functional import attention_weights

__all__ = ["is_timm_attention", "timm_call_weights"]

_PARTS = ("qkv", "num_heads", "head_dim", "scale", "q_norm", "k_norm", "attn_drop", "proj")


def is_timm_attention(module: nn.Module) -> bool:
    """True for timm's standard ``Attention`` block (by its class and its documented parts)."""
    cls = type(module)
    if not cls.__module__.startswith("timm.") or cls.__name__ != "Attention":
        return False
    return all(hasattr(module, p) for p in _PARTS) and isinstance(module.qkv, nn.Linear)


def timm_call_weights(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-head weights of one ``module(x, attn_mask=..., is_causal=...)`` call, and q, k.

    Shape:
        x ``(B, N, C)``; returns weights ``(B, H, N, N)``, q and k ``(B, H, N, Dh)``.
    """
    bound = _pyinspect.signature(type(module).forward).bind(module, *args, **kwargs)
    bound.apply_defaults()
    x: Tensor = bound.arguments["x"]
    if not isinstance(x, Tensor) or x.dim() != 3:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x: the standard timm Attention block reads tokens (B, N, C), got {shape}; "
                         "a (B, C, H, W) feature map is not read")
    attn_mask = bound.arguments.get("attn_mask")
    is_causal = bool(bound.arguments.get("is_causal", False))
    b, n, _ = x.shape
    h, dh = int(module.num_heads), int(module.head_dim)
    width = h * dh
    w_qk = module.qkv.weight[: 2 * width]  # the value rows are not needed
    b_qk = None if module.qkv.bias is None else module.qkv.bias[: 2 * width]
    qk = F.linear(x, w_qk, b_qk).reshape(b, n, 2, h, dh).permute(2, 0, 3, 1, 4)  # (2, B, H, N, Dh)
    q, k = module.q_norm(qk[0]), module.k_norm(qk[1])
    keep: Tensor | None = None
    bias: Tensor | None = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask
        else:
            bias = attn_mask
    if is_causal:
        keep = masks.combine(keep, masks.causal(n, n, align="top_left", device=x.device))
    return attention_weights(q, k, mask=keep, bias=bias, scale=float(module.scale)), q, k
