"""Score mods: ``score_mod(score, b, h, q_idx, kv_idx) -> score`` for :func:`attnkit.attention`.

Any function of that signature may be passed as ``score_mod=``; it is
evaluated on broadcast index tensors, tile by tile, and may be any
element-wise function of the scores (soft-capping, sink logits...). When the
function only *adds* a term that does not depend on the score, say so with
:func:`bias_mod`: attention then evaluates the term tile by tile and hands it
to torch's fused kernel as a small additive bias, which is several times faster
than running the softmax step by step. :func:`alibi_mod` and
:func:`soft_cap_mod` are ready-made.

Shape legend: H heads; index tensors ``b``, ``h``, ``q_idx``, ``kv_idx``
broadcast against the score tile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnkit.positional import alibi_slopes

__all__ = ["ScoreMod", "BiasFn", "bias_mod", "bias_of", "alibi_mod", "alibi_slopes", "soft_cap_mod"]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled logits."""
BiasFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``bias_fn(b, h, q_idx, kv_idx) -> float bias``, broadcast against the scores."""
_BIAS = "_attnkit_bias_fn"


def bias_mod(bias_fn: BiasFn) -> ScoreMod:
    """A score mod that adds ``bias_fn(b, h, q_idx, kv_idx)`` to the scores, marked as additive.

    Equal to ``lambda score, b, h, q, k: score + bias_fn(b, h, q, k)``, but
    attention knows the term ignores the score, so it runs the fused kernel
    with the bias of one query tile at a time (never a ``(Tq, Tk)`` tensor).

    Shape:
        ``bias_fn`` maps broadcast index tensors to a float tensor that
        broadcasts against them; the returned score mod keeps the score's shape.
    """
    if not callable(bias_fn):
        raise TypeError(f"bias_mod needs a callable bias_fn(b, h, q_idx, kv_idx), got {type(bias_fn).__name__}")

    def mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + bias_fn(b, h, q_idx, kv_idx)

    setattr(mod, _BIAS, bias_fn)
    return mod


def bias_of(score_mod: object) -> BiasFn | None:
    """The bias function of a score mod made by :func:`bias_mod`, else ``None``."""
    fn = getattr(score_mod, _BIAS, None)
    return fn if callable(fn) else None


def alibi_mod(slopes: int | Sequence[float] | Tensor, *, symmetric: bool = False) -> ScoreMod:
    """ALiBi as a score mod (Press et al., 2022): ``score + slope[h] * (kv_idx - q_idx)``.

    ``slopes`` is the number of heads (the paper's slopes,
    :func:`~attnkit.positional.alibi_slopes`) or one slope per head. On the
    keys a causal query sees (``kv_idx <= q_idx``) this is the paper's
    penalty ``-slope * (q_idx - kv_idx)``; put ``causal_mod`` in the block
    mask for the decoder form. Without a causal mask, later keys
    (``kv_idx > q_idx``) are *raised* by the same amount: for bidirectional
    attention pass ``symmetric=True``, which adds ``-slope[h] * |q_idx - kv_idx|``
    (what :func:`~attnkit.positional.alibi_bias` builds as a tensor).

    Shape:
        slopes ``(H,)``; the returned mod keeps the score's shape.
    """
    table = alibi_slopes(slopes) if isinstance(slopes, int) else torch.as_tensor(slopes, dtype=torch.float32)
    if table.dim() != 1 or table.numel() == 0:
        raise ValueError(f"alibi_mod needs one slope per head, a (H,) sequence, got shape {tuple(table.shape)}")

    def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        # distances in float32 (exact below 2^24): one 4-byte pass over the tile instead of an int64 one
        dist = kv_idx.float() - q_idx.float()
        return table.to(q_idx.device)[h] * (-dist.abs() if symmetric else dist)

    return bias_mod(bias)


def soft_cap_mod(cap: float) -> ScoreMod:
    """Logit soft-capping ``cap * tanh(score / cap)`` (Gemma 2); not additive, runs step by step.

    Shape:
        the returned mod keeps the score's shape.
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
        raise ValueError(f"cap must be a positive float, got {cap!r}")
    c = float(cap)

    def mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return c * torch.tanh(score / c)

    return mod
