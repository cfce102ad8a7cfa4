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
from attnkit.functional import safe_softmax
from attnkit.layers.multi_head import check_sequence

__all__ = ["AttentionPooling"]


def _position_mask(mask: object, b: int, t: int) -> Tensor:
    """Read ``mask`` as ``(B, 1, T)`` bool: ``(B, T)`` or the ``(B, 1, 1, T)`` of ``masks.from_lengths``."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean (True = valid position), got dtype {mask.dtype}; "
            "build it with attnkit.masks.from_lengths or a comparison such as ids != pad_id"
        )
    m = mask.reshape(mask.shape[0], mask.shape[-1]) if mask.dim() == 4 and mask.shape[1:3] == (1, 1) else mask
    if m.dim() != 2 or m.shape[1] != t or m.shape[0] not in (1, b):
        raise ValueError(f"mask must be (B, T) = {(b, t)}, got shape {tuple(mask.shape)}")
    return m[:, None, :]  # (B, 1, T)


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
        x ``(B, T, D)``; mask ``(B, T)`` bool, True = valid position.
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
        self, x: Tensor, *, mask: Tensor | None = ..., return_weights: Literal[False] = ...
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: Tensor | None = ..., return_weights: Literal[True]
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Weighted average ``sum_t alpha_t x_t`` of the valid positions.

        Shape:
            x ``(B, T, D)``; mask ``(B, T)`` (or ``(B, 1, 1, T)`` from
            :func:`attnkit.masks.from_lengths`). Returns ``(B, D)`` [and weights
            ``(B, T)``], or ``(B, r, D)`` [and ``(B, r, T)``] when ``num_queries > 1``.
        """
        check_sequence("x", x, self.d_model)
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
        b, t, _ = x.shape
        valid = None if mask is None else _position_mask(mask, b, t)  # (B, 1, T)
        hidden = x if self.proj is None else torch.tanh(self.proj(x))  # (B, T, A)
        scores = self.score(hidden).transpose(1, 2)  # (B, r, T)
        weights = safe_softmax(scores, valid)  # (B, r, T)
        pooled = weights.to(x.dtype) @ x  # (B, r, D)
        if self.num_queries == 1:
            pooled, weights = pooled[:, 0], weights[:, 0]  # (B, D), (B, T)
        return (pooled, weights) if return_weights else pooled
