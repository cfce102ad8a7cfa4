"""Weights of attnkit's own attention layers.

Every attnkit layer can return its weights beside an unchanged output
(``return_weights=True``). When the model
already asked for them they are taken from the output; otherwise the layer is
called once more on the same inputs with ``return_weights=True``, in eval mode
(so no dropout mask is drawn and the random stream the model uses is not
advanced) and without gradients, and only its weights are kept. The model's
own output is the first call's, untouched.

A call that writes to a key/value cache is not repeated (the cache would grow
twice); it is reported as missed unless it asked for its weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode
from attnkit.layers import (
    AdditiveAttention,
    AttentionPooling,
    BertSelfAttention,
    LinearAttention,
    MultiHeadAttention,
    RelativePositionAttention,
    SelfAttention2d,
)

__all__ = ["OWN_LAYERS", "own_layer_weights", "as_heads"]

OWN_LAYERS: tuple[type[nn.Module], ...] = (
    MultiHeadAttention, AdditiveAttention, AttentionPooling, RelativePositionAttention,
    LinearAttention, SelfAttention2d, BertSelfAttention,
)
"""attnkit's attention layers that a capture reads (containers such as ``BertAttention`` hold one)."""


def as_heads(w: Tensor) -> Tensor:
    """Weights in the ``(B, H, Tq, Tk)`` form: a pooling's ``(B, T)`` is one head, one query.

    Shape:
        w ``(B, Tk)``, ``(B, Tq, Tk)`` or ``(B, H, Tq, Tk)``; returns ``(B, H, Tq, Tk)``.
    """
    if w.dim() == 2:
        return w[:, None, None, :]
    if w.dim() == 3:
        return w[:, None]
    return w


class CacheCall(ValueError):
    """A cached decoding step that did not ask for its weights."""


def own_layer_weights(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Tensor:
    """The weights of one attnkit layer call (from ``output`` or a second, weights-only call).

    Shape:
        returns ``(B, H, Tq, Tk)`` (``H = Tq = 1`` for a pooling).
    """
    asked = bool(kwargs.get("return_weights"))
    per_head = not isinstance(module, SelfAttention2d) or kwargs.get("average_heads") is False
    if asked and per_head and isinstance(output, tuple):
        return as_heads(output[1].detach())
    if kwargs.get("cache") is not None:
        raise CacheCall("a cached decoding step is not repeated (its cache would grow twice)")
    again = dict(kwargs)
    again["return_weights"] = True
    if isinstance(module, SelfAttention2d):
        again["average_heads"] = False
    with eval_mode(module), torch.no_grad():
        _, w = module.forward(*args, **again)
    return as_heads(w)
