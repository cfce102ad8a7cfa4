"""Query rows with no key: the one rule, used by every kernel, mask and layer.

A query row whose mask allows no key has nothing to average. attnkit's answer,
everywhere: the row gets zero output, zero weights and zero gradients, and a
layer that projects the attention output adds no bias to it. Which rows those
are is computed by :func:`rows_with_keys` and by nothing else: the dense and
block-sparse kernels, :class:`~attnkit.core.block_mask.BlockMask` and
:class:`~attnkit.core.masks.AttentionMask` all call it.

Shape legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["rows_with_keys"]


def rows_with_keys(allowed: Tensor) -> Tensor:
    """True for each query row that may attend at least one key.

    Shape:
        allowed ``(..., Tq, Tk)`` bool (True = may attend); returns ``(..., Tq, 1)`` bool.
    """
    return allowed.any(dim=-1, keepdim=True)
