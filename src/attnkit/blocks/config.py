"""Shared construction of Transformer layers and stacks.

:class:`TransformerLayerConfig` holds the keyword arguments of one encoder or
decoder layer (it lives in :mod:`attnkit.layer_config`, without torch, so that
the NumPy twin shares it); a stack builds ``num_layers`` independent layers
from it (or from a factory, or by copying a layer). The helpers here validate
the arguments that every torch layer shares.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

from torch import nn

from attnkit._checks import positive_int
from attnkit.layer_config import TransformerLayerConfig, check_bool
from attnkit.layers.multi_head import check_dropout

__all__ = ["TransformerLayerConfig", "LayerSpec"]

LayerT = TypeVar("LayerT", bound=nn.Module)


LayerSpec = TransformerLayerConfig | nn.Module | Callable[[], nn.Module]
"""What a stack is built from: a config, a layer to copy, or a factory returning fresh layers."""


def resolve_dropouts(
    dropout: object, attention_dropout: object, activation_dropout: object
) -> tuple[float, float, float]:
    """``(residual, attention, activation)`` rates; the last two fall back to ``dropout`` when None."""
    rate = check_dropout(dropout)
    attn = rate if attention_dropout is None else check_dropout(attention_dropout)
    ff = rate if activation_dropout is None else check_dropout(activation_dropout)
    return rate, attn, ff


def build_layers(
    spec: object, num_layers: object, layer_cls: type[LayerT], from_config: Callable[[TransformerLayerConfig], LayerT],
) -> list[LayerT]:
    """Build ``num_layers`` independent layers of type ``layer_cls`` from a :data:`LayerSpec`."""
    count = positive_int("num_layers", num_layers)
    layers: list[nn.Module]
    if isinstance(spec, TransformerLayerConfig):
        layers = [from_config(spec) for _ in range(count)]
    elif isinstance(spec, nn.Module):
        layers = [copy.deepcopy(spec) for _ in range(count)]
    elif callable(spec):
        layers = [spec() for _ in range(count)]
    else:
        raise TypeError(
            f"layer must be a TransformerLayerConfig, a {layer_cls.__name__} or a factory returning one, "
            f"got {type(spec).__name__}"
        )
    typed: list[LayerT] = []
    for index, layer in enumerate(layers):
        if not isinstance(layer, layer_cls):
            raise TypeError(f"layer {index} must be a {layer_cls.__name__}, got {type(layer).__name__}")
        typed.append(layer)
    if len({id(layer) for layer in typed}) != len(typed):
        raise ValueError("the layer factory returned the same module twice; each layer needs its own weights")
    return typed


def final_layer_norm(first: nn.Module, final_norm: object) -> nn.LayerNorm | None:
    """The stack's closing LayerNorm: by default present exactly when the layers are pre-norm.

    A pre-norm stack's residual stream is never normalised inside the layers, so
    it needs one last LayerNorm (Xiong et al., 2020); a post-norm stack ends
    with a normalised output already.
    """
    if final_norm is not None:
        check_bool("final_norm", final_norm)
    use = bool(first.norm_first) if final_norm is None else bool(final_norm)
    if not use:
        return None
    ref = first.norm1
    assert isinstance(ref, nn.LayerNorm)
    return nn.LayerNorm(
        ref.normalized_shape, eps=ref.eps, bias=ref.bias is not None,
        device=ref.weight.device, dtype=ref.weight.dtype,
    )
