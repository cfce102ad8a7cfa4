"""``capture(model, verify=True)``: each recorded map against the plain computation of the same call.

The capture reads weights *beside* a model's kernel, from the call's inputs
and the terms it knows about. The self-check recomputes the first call of each
captured module the plain way, with the module's own code wherever it has one:

=================================== =============================================================
module                              reference
=================================== =============================================================
Hugging Face attention              the model file's own ``eager_attention_forward`` (its returned
                                    weights), mask in the eager form, dropout off
``nn.MultiheadAttention``           the module's own ``need_weights=True,
                                    average_attn_weights=False`` (eval mode)
``nn.TransformerEncoderLayer``      the same on its ``self_attn``, from the (normalised) input
timm attention blocks               the block's non-fused path, its ``attn_drop`` input (eval mode)
attnkit layers, BLOOM, Falcon...     their own weights (``return_weights=True``,
                                    ``output_attentions``): what is recorded
=================================== =============================================================

Rows compared: those where the reference is finite and either map holds
weight (a query that attends to nothing is zero here and uniform or NaN in an
eager softmax over a fully masked row).
"""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["CaptureMismatch", "map_difference", "mha_reference", "encoder_layer_reference", "timm_reference",
           "TOLERANCE"]

TOLERANCE = 1e-5
"""Largest absolute difference between a recorded map and its reference."""

_MHA_SIG = _pyinspect.signature(nn.MultiheadAttention.forward)
_LAYER_SIG = _pyinspect.signature(nn.TransformerEncoderLayer.forward)


class CaptureMismatch(ValueError):
    """A recorded map differs from the plain computation of the same call (the modules are named)."""


def map_difference(ours: Tensor, ref: Tensor) -> float:
    """Largest ``|ours - ref|`` over the rows both can be compared on (see the module docstring).

    Shape:
        both ``(B, H, Tq, Tk)``; a shape mismatch is infinitely different.
    """
    if ours.shape != ref.shape:
        return float("inf")
    a, b = ours.detach().float(), ref.detach().float()
    finite = torch.isfinite(b).all(dim=-1, keepdim=True)
    spread = (b.amax(dim=-1, keepdim=True) - b.amin(dim=-1, keepdim=True)) > 1e-7
    rows = finite & ((a.sum(dim=-1, keepdim=True) > 0.5) | spread)
    if not bool(rows.any()):
        return 0.0
    return float((a - torch.nan_to_num(b)).abs().masked_select(rows.expand_as(a)).max())


def _eval_call(module: nn.Module, fn: Any) -> Any:
    modes = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        with torch.no_grad():
            return fn()
    finally:
        for m, mode in modes:
            m.training = mode


def mha_reference(mha: nn.MultiheadAttention, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """The module's own per-head weights for the call ``mha(*args, **kwargs)``.

    Shape:
        returns ``(B, H, Tq, Tk)``.
    """
    bound = _MHA_SIG.bind(mha, *args, **kwargs)
    bound.apply_defaults()
    a = dict(bound.arguments)
    a.pop("self")
    a.update(need_weights=True, average_attn_weights=False)
    _, w = _eval_call(mha, lambda: nn.MultiheadAttention.forward(mha, **a))  # the class's forward: no hooks
    return w if w.dim() == 4 else w[None]  # type: ignore[no-any-return]


def encoder_layer_reference(layer: nn.TransformerEncoderLayer, args: tuple[Any, ...],
                            kwargs: dict[str, Any], length: int | None = None) -> Tensor:
    """The weights of the layer's ``self_attn`` called the plain way on the layer's input.

    A nested input is padded to ``length`` (the encoder's padded length) with
    a key padding mask.

    Shape:
        returns ``(B, H, T, T)``.
    """
    bound = _LAYER_SIG.bind(layer, *args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    src, kpm, attn_mask = a["src"], a["src_key_padding_mask"], a["src_mask"]
    mha = layer.self_attn
    nested = bool(src.is_nested)
    if nested:  # (B, *T, E) -> padded (B, T, E) with a key padding mask
        parts = src.unbind()
        lengths = [int(t.shape[0]) for t in parts]
        longest = max(lengths + [length or 0])
        src = torch.nested.to_padded_tensor(src, 0.0, (len(parts), longest, parts[0].shape[-1]))
        kpm = torch.arange(longest, device=src.device)[None, :] >= torch.tensor(lengths, device=src.device)[:, None]
        attn_mask = None
        if not mha.batch_first:
            src = src.transpose(0, 1)  # (T, B, E)
    x = layer.norm1(src) if layer.norm_first else src
    _, w = _eval_call(mha, lambda: nn.MultiheadAttention.forward(
        mha, x, x, x, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True, average_attn_weights=False))
    if nested:  # the fast path computes no padded query, and the capture leaves its row zero
        w = w * (~kpm)[:, None, :, None]
    return w  # type: ignore[no-any-return]


def timm_reference(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """The probabilities a timm attention block computes on its non-fused path.

    The block is called again with ``fused_attn`` off, in eval mode, and the
    input of its ``attn_drop`` (the softmax output) is kept.

    Shape:
        returns the block's own weights, ``(B, H, Tq, Tk)`` for the standard block.
    """
    drop = getattr(module, "attn_drop", None)
    if not isinstance(drop, nn.Module) or not hasattr(module, "fused_attn"):
        raise ValueError(f"{type(module).__name__} has no attn_drop/fused_attn to recompute it with")
    seen: list[Tensor] = []
    handle = drop.register_forward_hook(lambda _m, inp, _o: seen.append(inp[0].detach()))
    fused = module.fused_attn
    try:
        module.fused_attn = False  # type: ignore[assignment]
        _eval_call(module, lambda: type(module).forward(module, *args, **kwargs))
    finally:
        module.fused_attn = fused
        handle.remove()
    if len(seen) != 1:
        raise ValueError(f"{type(module).__name__}'s non-fused path passed {len(seen)} maps through attn_drop")
    return seen[0]
