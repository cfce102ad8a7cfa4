"""The arguments of one Transformer layer, as plain data that every backend reads.

:class:`TransformerLayerConfig` is the one description of a layer's sizes and
options: the torch blocks (:class:`attnkit.blocks.TransformerEncoderLayer`,
:class:`~attnkit.blocks.TransformerDecoderLayer`) are built from it, the torch
models hold it as their ``layer`` field, and so does the NumPy twin's
:class:`attnkit.reference.models.ClassifierConfig`. It imports neither torch
nor NumPy, so both sides may use it; its checks live here and nowhere else.
A backend that lacks one of the options (the NumPy twin has no grouped-query
attention, for instance) refuses that value itself, naming the field.

In a run's ``config.json`` it is a nested dict; on the command line its
fields are named by their path: ``--model-opt layer.d_ff=512``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from attnkit._checks import positive_float, positive_int, probability

__all__ = ["TransformerLayerConfig", "ACTIVATION_NAMES", "check_bool", "check_eps"]

ACTIVATION_NAMES = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")
"""The feed-forward activations a layer config may name (:data:`attnkit.blocks.feed_forward.ACTIVATIONS`
builds them in torch)."""


@dataclass(frozen=True)
class TransformerLayerConfig:
    """Arguments of one :class:`~attnkit.blocks.TransformerEncoderLayer` or
    :class:`~attnkit.blocks.TransformerDecoderLayer`, kept as plain data (JSON-ready
    through :meth:`to_dict`).

    ``activation`` must be one of :data:`ACTIVATION_NAMES` here, so that the config
    stays serialisable; pass a module class to the layer constructor directly instead.
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
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(
                f"unknown activation {self.activation!r}; valid names are {sorted(ACTIVATION_NAMES)}"
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


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool, else TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_eps(value: object) -> float:
    """``layer_norm_eps`` as a positive float."""
    return positive_float("layer_norm_eps", value)
