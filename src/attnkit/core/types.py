"""The function types of the attention core, declared once.

* ``MaskMod`` — ``mask_mod(b, h, q_idx, kv_idx) -> bool Tensor``, True where a query may attend a key
  (:func:`~attnkit.core.block_mask.create_block_mask`).
* ``ScoreMod`` — ``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled logits
  (``attention(score_mod=...)``).
* ``BiasFn`` — ``bias_fn(b, h, q_idx, kv_idx) -> float bias``, an additive term that ignores the score
  (:func:`~attnkit.core.score_mods.bias_mod`).

The index tensors are integer and broadcast against each other (``b`` over
batch, ``h`` over heads, ``q_idx`` over queries, ``kv_idx`` over keys).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

__all__ = ["MaskMod", "ScoreMod", "BiasFn"]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``mask_mod(b, h, q_idx, kv_idx) -> bool Tensor``, True where a query may attend a key."""
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled logits."""
BiasFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``bias_fn(b, h, q_idx, kv_idx) -> float bias``, broadcast against the scores."""
