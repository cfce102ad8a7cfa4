"""Shared construction of Transformer layers and stacks.

:class:`TransformerLayerConfig` holds the keyword arguments of one encoder or
decoder layer; a stack builds ``num_layers`` independent layers from it (or
from a factory, or by copying a layer). The helpers here validate the
arguments that every layer shares.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from torch import nn

from attnkit._checks import positive_float, positive_int, probability
from attnkit.blocks.feed_forward import ACTIVATIONS
from attnkit.layers.multi_head import check_dropout

__all__ = ["TransformerLayerConfig", "LayerSpec"]

LayerT = TypeVar("LayerT", bound=nn.Module)


@dataclass(frozen=True)
class TransformerLayerConfig:
    """Arguments of one :class:`~attnkit.blocks.TransformerEncoderLayer` or
    :class:`~attnkit.blocks.TransformerDecoderLayer`, kept as plain data (JSON-ready
    through :meth:`to_dict`).

    ``activation`` must be a registered name here, so that the config stays
    serialisable; pass a module class to the layer constructor directly instead.
    """

    d_model: int
    num_heads: int
    d_ff: int
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    kv_heads: int | None = None
    bias: bool = True
    attention_dropout: float | None = None
    activation_dropout: float | None = None

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "d_ff"):
            positive_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if self.kv_heads is not None and self.num_heads % positive_int("kv_heads", self.kv_heads):
            raise ValueError(f"kv_heads={self.kv_heads} must divide num_heads={self.num_heads}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if value is not None or name == "dropout":
                probability(name, value)
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}; valid names are {sorted(ACTIVATIONS)}"
            )
        check_bool("norm_first", self.norm_first)
        check_bool("bias", self.bias)
        check_eps(self.layer_norm_eps)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (``TransformerLayerConfig(**d)`` rebuilds it)."""
        return asdict(self)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a layer constructor, after the three positional ones."""
        d = self.to_dict()
        for positional in ("d_model", "num_heads", "d_ff"):
            d.pop(positional)
        return d


LayerSpec = TransformerLayerConfig | nn.Module | Callable[[], nn.Module]
"""What a stack is built from: a config, a layer to copy, or a factory returning fresh layers."""


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def resolve_dropouts(
    dropout: object, attention_dropout: object, activation_dropout: object
) -> tuple[float, float, float]:
    """``(residual, attention, activation)`` rates; the last two fall back to ``dropout`` when None."""
    rate = check_dropout(dropout)
    attn = rate if attention_dropout is None else check_dropout(attention_dropout)
    ff = rate if activation_dropout is None else check_dropout(activation_dropout)
    return rate, attn, ff


def check_eps(value: object) -> float:
    return positive_float("layer_norm_eps", value)


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
