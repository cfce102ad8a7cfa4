"""Attention pooling: a learned weighted average of a sequence.

Hierarchical attention networks (Yang et al., 2016, "Hierarchical Attention
Networks for Document Classification") summarise a sequence ``x_1..x_T`` by
scoring each position against a learned context vector ``u``::

    u_t     = tanh(W x_t + b)           (hidden_dim=A)
    s_t     = u^T u_t                   (a learned score per position)
    alpha_t = softmax_t(s_t)            over the positions that are not masked
    output  = sum_t alpha_t x_t

With ``hidden_dim=None`` the score is a single linear map, ``s_t = w^T x_t``.
With ``num_queries=r > 1`` the layer learns ``r`` score vectors and returns
``r`` summaries: the structured self-attention of Lin et al. (2017, "A
Structured Self-attentive Sentence Embedding"), ``A = softmax(W_s2 tanh(W_s1 X^T))``.

The score has no bias: a constant added to every ``s_t`` cancels in the
softmax. Without positional information the pooling is permutation
invariant: permuting the sequence permutes the weights and leaves the output
unchanged. Padded positions get exactly zero weight; a sequence with no
valid position pools to zeros with zero gradients.

Shape legend: B batch, T length, D model width, A hidden width, r queries.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnkit._checks import positive_int
from attnkit.core import masks as _masks
from attnkit.core.functional import safe_softmax
from attnkit.layers.multi_head import check_sequence, refuse_block_mask

__all__ = ["AttentionPooling", "linear_head_contributions"]


class AttentionPooling(nn.Module):
    """Pool a sequence ``(B, T, D)`` into ``(B, D)`` with learned attention scores.

    Args:
        d_model: width D of the sequence.
        hidden_dim: width A of the ``tanh`` scoring layer (Yang et al., 2016);
            ``None`` scores each position with one linear map ``w^T x_t``.
        num_queries: number ``r`` of learned score vectors; with ``r > 1`` the
            output is ``(B, r, D)`` (Lin et al., 2017).

    Parameters: ``proj`` (``W``, ``b``; only when ``hidden_dim`` is set) and
    ``score`` (the context vectors ``u``, one row per query).

    Shape:
        x ``(B, T, D)``, the one input; mask ``(B, T)`` bool, True = valid position,
        or any form :func:`attnkit.masks.read_mask` reads for ``(B, 1, r, T)``
        (one head, the ``r`` learned queries), such as ``(B, 1, 1, T)``.
        Returns ``(B, D)`` and weights ``(B, T)`` when ``num_queries == 1``,
        else ``(B, r, D)`` and weights ``(B, r, T)``.
    """

    def __init__(self, d_model: int, *, hidden_dim: int | None = None, num_queries: int = 1) -> None:
        super().__init__()
        self.d_model = positive_int("d_model", d_model)
        self.hidden_dim = None if hidden_dim is None else positive_int("hidden_dim", hidden_dim)
        self.num_queries = positive_int("num_queries", num_queries)
        self.proj = None if hidden_dim is None else nn.Linear(d_model, hidden_dim)
        self.score = nn.Linear(d_model if hidden_dim is None else hidden_dim, num_queries, bias=False)

    @overload
    def forward(
        self, x: Tensor, *, mask: _masks.MaskLike = ..., return_weights: Literal[False] = ...
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: _masks.MaskLike = ..., return_weights: Literal[True]
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: _masks.MaskLike = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Weighted average ``sum_t alpha_t x_t`` of the valid positions.

        Shape:
            x ``(B, T, D)``; mask ``(B, T)``, or ``(B, 1, 1, T)`` from
            :func:`attnkit.masks.from_lengths` (any form :func:`attnkit.masks.read_mask`
            reads for ``(B, 1, r, T)``; a 2-D mask with ``B == r`` is ambiguous), or the
            model's ``AttentionMask`` holding it. Returns ``(B, D)`` [and weights
            ``(B, T)``], or ``(B, r, D)`` [and ``(B, r, T)``] when ``num_queries > 1``.
            A BlockMask is refused (``TypeError``): pooling takes a position mask.
        """
        refuse_block_mask("AttentionPooling", mask, "it takes a (B, T) position mask")
        check_sequence("x", x, self.d_model)
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
        b, t, _ = x.shape
        read = _masks.as_attention_mask(mask, (b, 1, self.num_queries, t), name="AttentionPooling mask")
        allowed = None if read is None else read.allowed
        assert not isinstance(allowed, _masks.BlockMask)  # refused above
        keys = None if allowed is None else _masks.four_axes(allowed)  # (B|1, 1, r|1, T)
        hidden = x if self.proj is None else torch.tanh(self.proj(x))  # (B, T, A)
        scores = self.score(hidden).transpose(1, 2)[:, None]  # (B, 1, r, T): one head, r queries
        weights = safe_softmax(scores, keys)[:, 0]  # (B, r, T)
        pooled = weights.to(x.dtype) @ x  # (B, r, D)
        if self.num_queries == 1:
            pooled, weights = pooled[:, 0], weights[:, 0]  # (B, D), (B, T)
        return (pooled, weights) if return_weights else pooled


def linear_head_contributions(weights: Tensor, values: Tensor, head: nn.Linear) -> Tensor:
    """What each position adds to each logit of ``head(sum_t weights_t values_t)``: exact, by linearity.

    ``logit_c = b_c + sum_t weights_t (w_c . values_t)``, so position ``t`` adds
    ``weights_t (w_c . values_t)`` to class ``c`` and the additions plus
    ``head.bias`` are the logits (up to rounding). Only a linear head after
    the pooling keeps this exact (dropout in eval mode is the identity); a
    nonlinearity between the two would break it.

    Shape:
        weights ``(B, T)`` (zero on padding), values ``(B, T, D)``; returns ``(B, T, C)``.
    """
    return weights[..., None].to(values.dtype) * (values @ head.weight.T)  # (B, T, C)
