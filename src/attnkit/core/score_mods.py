"""Score mods: ``score_mod(score, b, h, q_idx, kv_idx) -> score`` for :func:`attnkit.attention`.

Any function of that signature may be passed as ``score_mod=``; it is
evaluated on broadcast index tensors, tile by tile, and may be any
element-wise function of the scores (soft-capping, sink logits...). When the
function only *adds* a term that does not depend on the score, say so with
:func:`bias_mod`: attention then evaluates the term tile by tile and hands it
to torch's fused kernel as a small additive bias, which is several times faster
than running the softmax step by step. :func:`alibi_mod` and
:func:`soft_cap_mod` are ready-made. :func:`apply_score_mod` is how every kernel
calls a score mod: checked for its type, shape and finite results.

Shape legend: H heads; index tensors ``b``, ``h``, ``q_idx``, ``kv_idx``
broadcast against the score tile.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnkit.core.types import BiasFn, ScoreMod
from attnkit.positional import alibi_slopes

__all__ = ["ScoreMod", "BiasFn", "bias_mod", "bias_of", "alibi_mod", "alibi_slopes", "soft_cap_mod"]

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


def refuse_non_finite(what: str, out: Tensor, s: Tensor | None, idx: tuple[Tensor, ...]) -> None:
    """Raise ``ValueError`` where ``out`` is NaN or ``+inf`` though the score ``s`` was finite.

    A softmax row with such an entry is NaN; attention refuses it by name instead. ``-inf``
    stays allowed (it masks). One reduction when all is well; eager only.
    """
    if torch.compiler.is_compiling():
        return
    top = out.amax() if out.numel() else out.new_zeros(())
    if not bool(torch.isnan(top) | torch.isposinf(top)):
        return
    bad = torch.isnan(out) | torch.isposinf(out)
    if s is not None:
        bad = bad & torch.isfinite(s)  # a NaN query makes NaN scores: not the score_mod's doing
    if not bool(bad.any()):
        return
    where = [int(i) for i in bad.nonzero()[0]]
    pos = [int(x[tuple(w if n > 1 else 0 for w, n in zip(where[-x.dim():], x.shape, strict=True))])
           for x in idx] if len(where) >= 4 else where
    raise ValueError(
        f"{what} returned NaN or +inf at {int(bad.sum())} entries whose score was finite "
        "(first at b, h, q_idx, kv_idx = "
        f"{tuple(pos)}); return finite scores, or -inf where a query may not attend a key"
    )


def apply_score_mod(score_mod: ScoreMod, s: Tensor, idx: tuple[Tensor, ...], check: bool = True) -> Tensor:
    """``score_mod(s, *idx)`` checked to be a floating tensor of ``s``'s shape, as float32 (float64 for float64).

    With ``check``, a NaN or ``+inf`` made from a finite score raises ``ValueError``.
    """
    out = score_mod(s, *idx)
    if not isinstance(out, Tensor) or not out.dtype.is_floating_point:
        got = out.dtype if isinstance(out, Tensor) else type(out).__name__
        raise TypeError(f"score_mod must return a floating tensor of the score's shape, got {got}")
    if out.shape != s.shape:
        raise ValueError(
            f"score_mod must keep the score's shape {tuple(s.shape)}, got {tuple(out.shape)}; "
            "use element-wise operations on score, b, h, q_idx, kv_idx"
        )
    if check:
        refuse_non_finite("score_mod", out, s, idx)
    return out.to(torch.promote_types(s.dtype, torch.float32))
