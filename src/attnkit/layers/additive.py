"""Additive (Bahdanau) attention (Bahdanau, Cho and Bengio, 2015, "Neural Machine Translation
by Jointly Learning to Align and Translate").

A small feed-forward network scores how well a query (a decoder state ``s``)
matches each key (an encoder state ``h_j``)::

    e_j     = v^T tanh(W_q s + W_k h_j + b)
    alpha_j = softmax_j(e_j)             over the keys that may be attended
    c       = sum_j alpha_j * value_j    (value_j = h_j unless values are given)

Unlike dot-product attention the query and key widths may differ, and the
score is a learned non-linear function. The price is a ``(B, Tq, Tk, A)``
hidden tensor instead of a single matrix product. A decoder calls the layer
once per output step with the same keys, so ``W_k h_j + b`` can be computed
once with :meth:`AdditiveAttention.project_keys` and passed back as
``projected_keys=``.

The weights (the alignment the layer is known for) come back with
``return_weights=True``, as in every attnkit layer. The mask is read by the
rule of every layer (:func:`attnkit.masks.read_mask`, one head); masked keys
get exactly zero weight; a query with no key to attend to gets a zero context,
zero weights and zero gradients (see :func:`attnkit.functional.safe_softmax`).

Shape legend: B batch, Tq/Tk query/key length, Dq/Dk/Dv query/key/value
width, A hidden (alignment) width.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnkit._checks import positive_int
from attnkit.core.functional import safe_softmax
from attnkit.core.masks import BlockMask, MaskLike, as_attention_mask, four_axes
from attnkit.layers.multi_head import refuse_block_mask

__all__ = ["AdditiveAttention"]


def _check_float(name: str, x: object, dims: tuple[int, ...], legend: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in dims:
        raise ValueError(f"{name} must be {legend}, got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    return x


class AdditiveAttention(nn.Module):
    """Bahdanau additive attention: ``e_j = v^T tanh(W_q s + W_k h_j + b)``.

    Args:
        query_dim: width ``Dq`` of the queries (decoder states).
        key_dim: width ``Dk`` of the keys (encoder states).
        hidden_dim: width ``A`` of the alignment network.
        value_dim: width ``Dv`` of the values, checked at the call; defaults to
            ``key_dim`` (the keys are the values unless ``value`` is passed).
            The layer has no value projection, so this sets no parameter.

    Parameters: ``query_proj`` (``W_q``, no bias), ``key_proj`` (``W_k`` and the
    one bias ``b``), ``score`` (``v``, no bias: a constant added to every score
    cancels in the softmax).

    Shape:
        query ``(B, Dq)`` or ``(B, Tq, Dq)``; key ``(B, Tk, Dk)``; value
        ``(B, Tk, Dv)``; mask as :func:`attnkit.masks.read_mask` reads it for
        ``(B, 1, Tq, Tk)`` (``Tq = 1`` for a 2-D query). Returns context ``(B, Dv)``
        [and weights ``(B, Tk)``] for a 2-D query, context ``(B, Tq, Dv)`` [and
        weights ``(B, Tq, Tk)``] for a 3-D one.
    """

    def __init__(
        self, query_dim: int, key_dim: int, hidden_dim: int, *, value_dim: int | None = None
    ) -> None:
        super().__init__()
        self.query_dim = positive_int("query_dim", query_dim)
        self.key_dim = positive_int("key_dim", key_dim)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        self.value_dim = key_dim if value_dim is None else positive_int("value_dim", value_dim)
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=True)
        self.score = nn.Linear(hidden_dim, 1, bias=False)

    def project_keys(self, key: Tensor) -> Tensor:
        """``W_k h_j + b`` for every key: compute it once per source sequence, reuse it each step.

        Shape:
            key ``(B, Tk, Dk)``; returns ``(B, Tk, A)``.
        """
        _check_float("key", key, (3,), f"(B, Tk, {self.key_dim})")
        if key.shape[-1] != self.key_dim:
            raise ValueError(f"key must be (B, Tk, {self.key_dim}), got shape {tuple(key.shape)}")
        return self.key_proj(key)  # (B, Tk, A)

    @overload
    def forward(
        self, query: Tensor, key: Tensor, value: Tensor | None = ..., *, mask: MaskLike = ...,
        projected_keys: Tensor | None = ..., return_weights: Literal[False] = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, query: Tensor, key: Tensor, value: Tensor | None = ..., *, mask: MaskLike = ...,
        projected_keys: Tensor | None = ..., return_weights: Literal[True],
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, query: Tensor, key: Tensor, value: Tensor | None = None, *,
        mask: MaskLike = None, projected_keys: Tensor | None = None, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Score every key against the query; the context, and ``(context, weights)`` with ``return_weights``.

        ``mask`` is boolean, True where a query may attend a key, read as for
        one head (:func:`attnkit.masks.read_mask`). ``projected_keys``
        is the output of :meth:`project_keys` for this ``key``; when given,
        the key projection is skipped. A BlockMask is refused (``TypeError``):
        the scores are a dense ``(B, Tq, Tk)`` tensor, with no blocks to skip.

        Shape:
            query ``(B, Dq)`` or ``(B, Tq, Dq)``; key ``(B, Tk, Dk)``; value
            ``(B, Tk, Dv)`` (default: key); projected_keys ``(B, Tk, A)``.
            Returns context ``(B, [Tq,] Dv)`` [and weights ``(B, [Tq,] Tk)``].
        """
        refuse_block_mask("AdditiveAttention", mask, "it scores every key with a small network")
        _check_float("query", query, (2, 3), f"(B, {self.query_dim}) or (B, Tq, {self.query_dim})")
        if query.shape[-1] != self.query_dim:
            raise ValueError(
                f"query must be (B, {self.query_dim}) or (B, Tq, {self.query_dim}), "
                f"got shape {tuple(query.shape)}"
            )
        _check_float("key", key, (3,), f"(B, Tk, {self.key_dim})")
        b, tk = key.shape[0], key.shape[1]
        if key.shape[-1] != self.key_dim or b != query.shape[0]:
            raise ValueError(
                f"key must be (B, Tk, {self.key_dim}) with B={query.shape[0]} of query "
                f"{tuple(query.shape)}, got shape {tuple(key.shape)}"
            )
        value = key if value is None else value
        _check_float("value", value, (3,), f"(B, Tk, {self.value_dim})")
        if value.shape != (b, tk, self.value_dim):
            raise ValueError(
                f"value must be (B, Tk, Dv) = {(b, tk, self.value_dim)}, got shape {tuple(value.shape)}"
            )
        if projected_keys is None:
            projected_keys = self.key_proj(key)  # (B, Tk, A)
        else:
            _check_float("projected_keys", projected_keys, (3,), f"(B, Tk, A) = {(b, tk, self.hidden_dim)}")
            if projected_keys.shape != (b, tk, self.hidden_dim):
                raise ValueError(
                    f"projected_keys must be (B, Tk, A) = {(b, tk, self.hidden_dim)} "
                    f"(from project_keys(key)), got shape {tuple(projected_keys.shape)}"
                )

        single = query.dim() == 2
        q = query[:, None, :] if single else query  # (B, Tq, Dq)
        tq = q.shape[1]
        read = as_attention_mask(mask, (b, 1, tq, tk), name="AdditiveAttention mask")
        allowed = None if read is None else read.allowed
        assert not isinstance(allowed, BlockMask)  # refused above
        full_mask = None if allowed is None else four_axes(allowed)[:, 0]  # (B|1, Tq|1, Tk)

        hidden = torch.tanh(
            self.query_proj(q)[:, :, None, :] + projected_keys[:, None, :, :]
        )  # (B, Tq, Tk, A)
        scores = self.score(hidden).squeeze(-1)  # (B, Tq, Tk)
        weights = safe_softmax(scores, full_mask)  # (B, Tq, Tk)
        context = weights.to(value.dtype) @ value  # (B, Tq, Dv)
        if single:
            context, weights = context[:, 0], weights[:, 0]  # (B, Dv), (B, Tk)
        return (context, weights) if return_weights else context
