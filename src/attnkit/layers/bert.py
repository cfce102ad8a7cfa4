"""BERT's attention sub-layer (Devlin et al., 2019), with Hugging Face's parameter names.

One BERT encoder layer starts with multi-head self-attention followed by a
post-norm residual block::

    context = MultiHead(x, x, x)                            (BertSelfAttention)
    out     = LayerNorm(x + Dropout(context W_O + b_O))     (BertSelfOutput)

The modules below keep the attribute names of ``transformers``'
``BertAttention`` (``self.query/key/value``, ``output.dense``,
``output.LayerNorm``), so the tensors under
``encoder.layer.N.attention.`` of a BERT checkpoint load with
``load_state_dict(..., strict=True)`` unchanged; see
:func:`hf_attention_state_dict`. The attention runs through
:func:`attnkit.attention` (fused when possible) and follows the attnkit mask
rule: a boolean mask, True where a token may be attended. Hugging Face's
``attention_mask`` (1 = real token, 0 = padding) goes through
:func:`from_hf_attention_mask` first.

One difference from Hugging Face: a query with no key to attend to gets a zero
context (the attnkit rule) where Hugging Face spreads its weight uniformly, and
:class:`BertAttention` adds no output bias to it, so its output is
``LayerNorm(x)``. Ordinary padding never produces such a row, because every
sequence keeps ``[CLS]``.

Shape legend: B batch, T length, D hidden size, H heads, Dh = D / H.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, Protocol, overload

from torch import Tensor, nn

from attnkit._checks import non_negative_int, positive_float, positive_int
from attnkit.core.functional import attention, merge_heads, split_heads
from attnkit.core.masks import MaskLike, as_attention_mask, from_hf_attention_mask
from attnkit.layers.multi_head import Dropout, check_dropout, check_sequence, zero_rows_without_key

__all__ = [
    "BertSelfAttention",
    "BertSelfOutput",
    "BertAttention",
    "from_hf_attention_mask",
    "hf_attention_state_dict",
]


_LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.attention\.")


class BertConfigLike(Protocol):
    """The fields of a ``transformers.BertConfig`` that :meth:`BertAttention.from_config` reads."""

    hidden_size: int
    num_attention_heads: int
    attention_probs_dropout_prob: float
    hidden_dropout_prob: float
    layer_norm_eps: float


def hf_attention_state_dict(state_dict: Mapping[str, Tensor], layer: int) -> dict[str, Tensor]:
    """The tensors of encoder layer ``layer``'s attention, with the prefix removed.

    Works for the state dict of a ``BertModel`` (``encoder.layer.N.attention.*``),
    of a task model (``bert.encoder.layer.N.attention.*``) or of a
    ``model.safetensors`` file. The result loads into :class:`BertAttention`
    with ``strict=True``.
    """
    non_negative_int("layer", layer)
    part = f"encoder.layer.{layer}.attention."
    found: dict[str, Tensor] = {}
    for name, tensor in state_dict.items():
        head, sep, tail = name.partition(part)
        if sep and head in ("", "bert."):
            found[tail] = tensor
    if not found:
        layers = sorted({int(m.group(1)) for n in state_dict if (m := _LAYER.search(n))})
        raise ValueError(f"no tensors under '{part}' in the state dict; attention layers present: {layers}")
    return found


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with BERT's parameter names ``query``, ``key``, ``value``.

    ``softmax(Q K^T / sqrt(Dh)) V`` per head, heads concatenated; the output
    projection lives in :class:`BertSelfOutput`, as in BERT.

    Args:
        hidden_size: width D; divisible by ``num_attention_heads``.
        num_attention_heads: heads H.
        attention_probs_dropout_prob: dropout on the attention weights (training only).

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)`` [and weights ``(B, H, T, T)``].
    """

    def __init__(
        self, hidden_size: int, num_attention_heads: int, attention_probs_dropout_prob: float = 0.1
    ) -> None:
        super().__init__()
        positive_int("hidden_size", hidden_size)
        positive_int("num_attention_heads", num_attention_heads)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size={hidden_size} must be divisible by num_attention_heads={num_attention_heads}"
            )
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.attention_probs_dropout_prob = check_dropout(attention_probs_dropout_prob)
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[False] = ...
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[True]
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: MaskLike = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend over the sequence ``x`` (the one input); ``mask`` is boolean, read by the rule of every layer.

        Any form :func:`attnkit.masks.read_mask` reads for ``(B, H, T, T)``; a
        :class:`~attnkit.core.masks.BlockMask` runs the block-sparse path;
        the model's :class:`~attnkit.core.masks.AttentionMask` is passed on as it is.

        Shape:
            x ``(B, T, D)``; mask e.g. ``(B, 1, 1, T)``; returns the
            concatenated heads ``(B, T, D)`` [and weights ``(B, H, T, T)``].
        """
        check_sequence("x", x, self.hidden_size)
        h = self.num_attention_heads
        q = split_heads(self.query(x), h)  # (B, H, T, Dh)
        k = split_heads(self.key(x), h)  # (B, H, T, Dh)
        v = split_heads(self.value(x), h)  # (B, H, T, Dh)
        dropout = self.attention_probs_dropout_prob if self.training else 0.0
        mask = as_attention_mask(mask, (x.shape[0], h, x.shape[1], x.shape[1]), name="BertSelfAttention mask")
        result = attention(q, k, v, mask=mask, dropout=dropout, return_weights=return_weights)
        if isinstance(result, tuple):
            return merge_heads(result[0]), result[1]  # (B, T, D), (B, H, T, T)
        return merge_heads(result)  # (B, T, D)


class BertSelfOutput(nn.Module):
    """BERT's post-norm residual: ``LayerNorm(input + Dropout(dense(hidden)))``.

    Shape:
        hidden_states and input_tensor ``(B, T, D)``; returns ``(B, T, D)``.
    """

    def __init__(
        self, hidden_size: int, *, layer_norm_eps: float = 1e-12, hidden_dropout_prob: float = 0.1
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        eps = positive_float("layer_norm_eps", layer_norm_eps)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = Dropout(check_dropout(hidden_dropout_prob))

    def forward(self, hidden_states: Tensor, input_tensor: Tensor, *, mask: MaskLike = None) -> Tensor:
        """Project, drop out, add the residual ``input_tensor`` and normalise.

        ``mask``, the self-attention's mask, marks the rows that attended to
        nothing: their projection (bias included) is zero, so they keep
        ``LayerNorm(input_tensor)``.
        """
        check_sequence("hidden_states", hidden_states, self.hidden_size)
        check_sequence("input_tensor", input_tensor, self.hidden_size)
        if hidden_states.shape != input_tensor.shape:
            raise ValueError(
                f"hidden_states {tuple(hidden_states.shape)} and input_tensor "
                f"{tuple(input_tensor.shape)} must have the same shape"
            )
        projected = zero_rows_without_key(self.dense(hidden_states), mask, hidden_states.shape[1])  # (B, T, D)
        return self.LayerNorm(self.dropout(projected) + input_tensor)  # (B, T, D)


class BertAttention(nn.Module):
    """BERT's attention sub-layer: :class:`BertSelfAttention` then :class:`BertSelfOutput`.

    Attribute names match ``transformers``' ``BertAttention`` (``self``,
    ``output``), so ``layer.load_state_dict(hf_attention_state_dict(sd, i))``
    loads a pretrained layer with ``strict=True``.

    Args:
        hidden_size: width D.
        num_attention_heads: heads H.
        attention_probs_dropout_prob: dropout on the attention weights.
        hidden_dropout_prob: dropout before the residual sum.
        layer_norm_eps: LayerNorm epsilon (BERT uses 1e-12).

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)`` [and weights ``(B, H, T, T)``].
    """

    def __init__(
        self, hidden_size: int, num_attention_heads: int, *, attention_probs_dropout_prob: float = 0.1,
        hidden_dropout_prob: float = 0.1, layer_norm_eps: float = 1e-12,
    ) -> None:
        super().__init__()
        self.self = BertSelfAttention(hidden_size, num_attention_heads, attention_probs_dropout_prob)
        self.output = BertSelfOutput(
            hidden_size, layer_norm_eps=layer_norm_eps, hidden_dropout_prob=hidden_dropout_prob
        )

    @classmethod
    def from_config(cls, config: BertConfigLike) -> BertAttention:
        """Build the layer from a ``transformers.BertConfig`` (or any object with its fields)."""
        return cls(
            config.hidden_size, config.num_attention_heads,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            hidden_dropout_prob=config.hidden_dropout_prob, layer_norm_eps=config.layer_norm_eps,
        )

    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[False] = ...
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[True]
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: MaskLike = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention over ``x`` (the one input), output projection, residual and LayerNorm.

        ``mask`` is boolean, True where a token may be attended, read by the
        rule of every layer (:func:`attnkit.masks.read_mask`), e.g.
        ``from_hf_attention_mask(attention_mask)``, a
        :class:`~attnkit.core.masks.BlockMask` for ``(B, H, T, T)``, or the
        model's :class:`~attnkit.core.masks.AttentionMask`. A token that may
        attend no key gets ``LayerNorm(x)``: no attention, no bias.

        Shape:
            x ``(B, T, D)``; returns ``(B, T, D)`` [and weights ``(B, H, T, T)``].
        """
        if isinstance(x, Tensor) and x.dim() == 3:  # read once for both halves (a bad x is named below)
            mask = as_attention_mask(mask, (x.shape[0], self.self.num_attention_heads, x.shape[1], x.shape[1]),
                                     name="BertAttention mask")
        result = self.self(x, mask=mask, return_weights=return_weights)
        context, weights = result if isinstance(result, tuple) else (result, None)
        out = self.output(context, x, mask=mask)  # (B, T, D)
        return out if weights is None else (out, weights)
