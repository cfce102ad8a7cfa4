"""Position-wise feed-forward network of a Transformer block (Vaswani et al., 2017).

Each position is transformed on its own, by the same two-layer network::

    FFN(x) = W_2 dropout(act(W_1 x + b_1)) + b_2                  (relu, gelu, silu)

Gated variants (Shazeer, 2020, "GLU Variants Improve Transformer") multiply
the activated gate with a second, linear projection of the input::

    FFN_SwiGLU(x) = W_2 dropout(SiLU(W_gate x) * (W_1 x))           (swiglu)
    FFN_GEGLU(x)  = W_2 dropout(GELU(W_gate x) * (W_1 x))           (geglu)

A gated network has three matrices instead of two; to keep the parameter
count of a ReLU network of width ``d_ff`` one usually picks ``d_ff`` about
``2/3`` as large (LLaMA uses ``8/3 * d_model`` instead of ``4 * d_model``).

Shape legend: B batch, T length, D model width, F hidden width ``d_ff``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit._checks import positive_int
from attnkit.layers.multi_head import check_dropout

__all__ = ["FeedForward", "ACTIVATIONS", "ActivationSpec", "activation_from_torch"]


@dataclass(frozen=True)
class ActivationSpec:
    """A registered activation: how to build it and whether it gates a second projection."""

    build: Callable[[], nn.Module]
    gated: bool = False


ACTIVATIONS: dict[str, ActivationSpec] = {
    "relu": ActivationSpec(nn.ReLU),
    "gelu": ActivationSpec(nn.GELU),  # exact (erf) GELU, as PyTorch's activation="gelu"
    "gelu_tanh": ActivationSpec(lambda: nn.GELU(approximate="tanh")),
    "silu": ActivationSpec(nn.SiLU),
    "swiglu": ActivationSpec(nn.SiLU, gated=True),
    "geglu": ActivationSpec(nn.GELU, gated=True),
}
"""Activation names accepted by :class:`FeedForward` (and every block that takes ``activation``): the names of
:data:`attnkit.layer_config.ACTIVATION_NAMES`, which a :class:`~attnkit.blocks.TransformerLayerConfig` checks."""

Activation = str | type[nn.Module] | nn.Module


def _resolve_activation(activation: object) -> tuple[nn.Module, bool, str | None]:
    """Return ``(module, gated, registered name or None)`` for an ``activation`` argument."""
    if isinstance(activation, str):
        spec = ACTIVATIONS.get(activation)
        if spec is None:
            raise ValueError(
                f"unknown activation {activation!r}; valid names are {sorted(ACTIVATIONS)} "
                "(or pass an nn.Module class)"
            )
        return spec.build(), spec.gated, activation
    if isinstance(activation, type) and issubclass(activation, nn.Module):
        return activation(), False, None
    if isinstance(activation, nn.Module):
        return copy.deepcopy(activation), False, None
    raise TypeError(
        f"activation must be a name in {sorted(ACTIVATIONS)}, an nn.Module class or an nn.Module, "
        f"got {type(activation).__name__}"
    )


class FeedForward(nn.Module):
    """Position-wise feed-forward network, plain or gated (see the module docstring for the equations).

    Args:
        d_model: input and output width D.
        d_ff: hidden width F.
        activation: a name from :data:`ACTIVATIONS` (``"relu"``, ``"gelu"``,
            ``"swiglu"``...), an ``nn.Module`` class (built with no arguments),
            or an ``nn.Module`` instance (copied).
        dropout: dropout on the hidden activations, active in training mode only
            (where PyTorch's ``nn.TransformerEncoderLayer`` puts it).
        bias: add biases to the linear maps.

    Attributes:
        linear1: ``D -> F`` (the value branch of a gated network).
        linear_gate: ``D -> F`` gate branch, only for gated activations (else ``None``).
        linear2: ``F -> D``.
        activation_name: the registered name, or ``None`` for a class or module.

    Shape:
        x ``(B, T, D)`` (any leading axes); returns the same shape.
    """

    linear_gate: nn.Linear | None

    def __init__(
        self, d_model: int, d_ff: int, *, activation: Activation = "relu", dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.d_model = positive_int("d_model", d_model)
        self.d_ff = positive_int("d_ff", d_ff)
        self.activation, self.gated, self.activation_name = _resolve_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear_gate = nn.Linear(d_model, d_ff, bias=bias) if self.gated else None
        self.dropout = nn.Dropout(check_dropout(dropout))
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the network to every position.

        Shape:
            x ``(..., D)``; returns ``(..., D)``.
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (..., {self.d_model}), got shape {tuple(x.shape)}")
        if self.linear_gate is not None:
            hidden = self.activation(self.linear_gate(x)) * self.linear1(x)  # (..., F)
        else:
            hidden = self.activation(self.linear1(x))  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., D)


def activation_from_torch(activation: object) -> Activation:
    """Translate the ``activation`` of a PyTorch Transformer layer to a :class:`FeedForward` argument.

    PyTorch stores ``F.relu`` or ``F.gelu`` for the names ``"relu"`` and
    ``"gelu"``, or whatever callable it was given. Plain functions other than
    those two have no module equivalent and are rejected.
    """
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    if isinstance(activation, nn.Module):
        return activation
    raise ValueError(
        f"cannot convert activation {activation!r}: use 'relu', 'gelu' or an nn.Module in the source layer"
    )
