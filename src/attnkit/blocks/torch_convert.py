"""Copy weights from PyTorch's ``nn.Transformer*`` modules into attnkit blocks.

PyTorch packs the query, key and value projections into one ``in_proj_weight``
``(3D, D)``; attnkit keeps ``q_proj``, ``k_proj`` and ``v_proj`` apart (they
differ in width under grouped-query attention). Layers are moved to the
source's dtype *before* copying, so float64 weights arrive unrounded.
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.layers.multi_head import MultiHeadAttention

__all__ = ["copy_layer_weights", "copy_attention_weights", "copy_final_norm"]


def copy_layer_weights(layer: nn.Module, module: nn.Module) -> None:
    """Copy every weight and dropout setting of a PyTorch Transformer layer into ``layer``.

    ``layer`` is first moved to the source's dtype and device, so that float64
    weights are copied exactly (copying into float32 first would round them).
    The attention weights are copied here too, from PyTorch's packed
    ``in_proj_weight`` (or separate ``q/k/v_proj_weight``).
    """
    ref = module.get_parameter("linear1.weight")
    layer.to(device=ref.device, dtype=ref.dtype)
    pairs = [("ff.linear1", "linear1"), ("ff.linear2", "linear2")]
    pairs += [(f"norm{i}", f"norm{i}") for i in (1, 2, 3) if hasattr(layer, f"norm{i}")]
    with torch.no_grad():
        for ours, theirs in pairs:
            dst, src = layer.get_submodule(ours), module.get_submodule(theirs)
            for name, param in dst.named_parameters():
                param.copy_(getattr(src, name))
        for ours, theirs in (("self_attn", "self_attn"), ("cross_attn", "multihead_attn")):
            if hasattr(layer, ours):
                copy_attention_weights(layer.get_submodule(ours), module.get_submodule(theirs))
    for i in (1, 2, 3):
        if hasattr(layer, f"dropout{i}"):
            getattr(layer, f"dropout{i}").p = getattr(module, f"dropout{i}").p
    layer.train(module.training)


def copy_attention_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy ``nn.MultiheadAttention`` weights into an attnkit ``MultiHeadAttention`` of the same dtype."""
    assert isinstance(ours, MultiHeadAttention) and isinstance(theirs, nn.MultiheadAttention)
    if theirs.in_proj_weight is not None:
        weights = theirs.in_proj_weight.chunk(3)
    else:
        weights = (theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight)
    biases = theirs.in_proj_bias.chunk(3) if theirs.in_proj_bias is not None else (None, None, None)
    for proj, weight, bias in zip((ours.q_proj, ours.k_proj, ours.v_proj), weights, biases, strict=True):
        proj.weight.copy_(weight)
        if bias is not None and proj.bias is not None:
            proj.bias.copy_(bias)
    ours.out_proj.weight.copy_(theirs.out_proj.weight)
    if ours.out_proj.bias is not None and theirs.out_proj.bias is not None:
        ours.out_proj.bias.copy_(theirs.out_proj.bias)


def copy_final_norm(ours: nn.LayerNorm | None, theirs: nn.Module | None) -> None:
    """Copy a stack's closing LayerNorm (nothing to do when either side has none)."""
    if ours is None or theirs is None:
        return
    if not isinstance(theirs, nn.LayerNorm):
        raise TypeError(f"the source's final norm must be nn.LayerNorm, got {type(theirs).__name__}")
    ours.eps = theirs.eps
    with torch.no_grad():
        ours.weight.copy_(theirs.weight)
        if ours.bias is not None and theirs.bias is not None:
            ours.bias.copy_(theirs.bias)
    ours.to(theirs.weight.device, theirs.weight.dtype)
