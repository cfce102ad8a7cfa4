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
timm attention blocks               the block's non-fused path, its ``attn_drop`` input (eval mode);
                                    for Swin, BEiT, EVA... this is also how they are read, and their
                                    fused output is checked against that path's
attnkit layers, BLOOM, Falcon...     their own weights (``return_weights=True``,
                                    ``output_attentions``): what is recorded
=================================== =============================================================

Rows compared: those where the reference is finite and either map holds
weight (a query that attends to nothing is zero here and uniform or NaN in an
eager softmax over a fully masked row). A Hugging Face call compares only its
real queries, the rows its mask lets attend some key (:func:`~attnkit.inspect.hf.real_queries`):
a padding query's row (left padding) is zero here and, in eager, whatever the
release makes of a fully masked row (uniform, NaN, or the causal keys of a
model that applies its own causal mask after the padding mask).
"""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.inspect.timm_blocks import eager_probabilities, eval_call

__all__ = ["CaptureMismatch", "map_difference", "mha_reference", "encoder_layer_reference", "timm_reference",
           "TOLERANCE", "TOLERANCES", "tolerance"]

TOLERANCE = 1e-5
"""Largest absolute difference between a recorded map and its reference in float32 and float64."""

TOLERANCES = {torch.bfloat16: 4 * 2.0 ** -8, torch.float16: 4 * 2.0 ** -11}
"""Half precision: four units in the last place of a weight in ``[0.5, 1)`` (bfloat16 ``1.5625e-2``,
float16 ``1.953e-3``). The kernel and the reference round their scores and weights at different steps,
so a map right to the dtype's rounding differs from its reference by about one such unit."""


def tolerance(dtype: torch.dtype) -> float:
    """The largest difference :func:`map_difference` may show for maps of ``dtype`` (:data:`TOLERANCES`)."""
    return TOLERANCES.get(dtype, TOLERANCE)

_MHA_SIG = _pyinspect.signature(nn.MultiheadAttention.forward)
_LAYER_SIG = _pyinspect.signature(nn.TransformerEncoderLayer.forward)


class CaptureMismatch(ValueError):
    """A recorded map differs from the plain computation of the same call (the modules are named)."""


def map_difference(ours: Tensor, ref: Tensor, queries: Tensor | None = None) -> float:
    """Largest ``|ours - ref|`` over the rows both can be compared on (see the module docstring).

    ``queries`` marks the real query rows (``None``: every row may be one); the others are not compared.

    Shape:
        both ``(B, H, Tq, Tk)``, queries broadcasting to ``(B, H, Tq, 1)``; a shape mismatch is
        infinitely different.
    """
    if ours.shape != ref.shape:
        return float("inf")
    a, b = ours.detach().float(), ref.detach().float()
    finite = torch.isfinite(b).all(dim=-1, keepdim=True)
    spread = (b.amax(dim=-1, keepdim=True) - b.amin(dim=-1, keepdim=True)) > 1e-7
    rows = finite & ((a.sum(dim=-1, keepdim=True) > 0.5) | spread)
    if queries is not None:
        rows = rows & queries.to(rows.device)
    if not bool(rows.any()):
        return 0.0
    return float((a - torch.nan_to_num(b)).abs().masked_select(rows.expand_as(a)).max())


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
    _, w = eval_call(mha, lambda: nn.MultiheadAttention.forward(mha, **a))  # the class's forward: no hooks
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
    _, w = eval_call(mha, lambda: nn.MultiheadAttention.forward(
        mha, x, x, x, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True, average_attn_weights=False))
    if nested:  # the fast path computes no padded query, and the capture leaves its row zero
        w = w * (~kpm)[:, None, :, None]
    return w  # type: ignore[no-any-return]


def timm_reference(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """The probabilities a timm attention block computes on its non-fused path.

    The block is called again with ``fused_attn`` off, in eval mode, and the
    input of its ``attn_drop`` (the map that multiplies the values) is kept
    (:func:`attnkit.inspect.timm_blocks.eager_probabilities`).

    Shape:
        returns the block's own weights, ``(B, H, Tq, Tk)``.
    """
    if not isinstance(getattr(module, "attn_drop", None), nn.Module):
        raise ValueError(f"{type(module).__name__} has no attn_drop to recompute it with")
    return eager_probabilities(module, args, kwargs)[0]
