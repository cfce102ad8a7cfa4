"""One block of ring attention: this process's queries against one span of keys, forward and backward.

The ring (:mod:`attnkit.parallel.ring`) hands every block here with the keys'
global positions. :func:`forward_block` folds a block into the running output
and log-sum-exp (the online softmax of FlashAttention)::

    L = logaddexp(L, L_blk),   O = O * exp(L_old - L) + O_blk * exp(L_blk - L)

:func:`backward_block` returns the block's share of the gradients from the
*global* ``O`` and ``L`` (Dao et al., 2022)::

    P = exp(S - L),  dV += P^T dO,  dS = P * (dO V^T - rowsum(dO * O)),  dQ += s dS K,  dK += s dS^T Q

Two ways compute a block, tested against each other: torch's CPU flash
kernel, which returns the block's log-sum-exp and, given the global ``O`` and
``L``, the exact gradients (float32/float64, no ``score_mod`` or a
:func:`~attnkit.core.score_mods.bias_mod`, equal query and value widths); and
the core's own tile (:func:`~attnkit.core.kernels.tiles.span_forward` and
:func:`~attnkit.core.kernels.tiles.span_backward`, the step-by-step path of
:func:`attnkit.attention` with a ``score_mod``) in small query tiles (any ``score_mod``, float32 for half
inputs, float64 kept). The mask's empty blocks are skipped either way
(:meth:`~attnkit.parallel.pairs.GlobalPairs.block`); a query row with no key
gets zero output and zero gradients.

Shape legend: B batch, H query heads, Hkv key/value heads, G = H / Hkv,
Tl local length, Dh head width, Dv value head width, tq/tk the queries and keys of one tile.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.core.kernels.dense import expand_heads
from attnkit.core.kernels.runs import neg_inf_where
from attnkit.core.kernels.tiles import score_index, span_backward, span_forward
from attnkit.core.score_mods import bias_of, refuse_non_finite
from attnkit.core.types import ScoreMod
from attnkit.parallel.pairs import Allowed, GlobalPairs

__all__ = ["BlockMath", "Saved", "fusable", "forward_block", "backward_block", "FUSED", "TILE_ELEMENTS"]

FUSED = True
"""Run blocks through torch's CPU flash kernel where it applies (False: always the readable formula)."""
TILE_ELEMENTS = 1 << 17
"""Scores computed at once (B * H * tq * tk), 512 KiB in float32: small tiles keep the peak near the slices' size."""


@dataclass
class BlockMath:
    """The per-call constants of the block math."""

    scale: float
    score_mod: ScoreMod | None
    dtype: torch.dtype  # the working dtype: float32 for half inputs
    fused: bool = False  # blocks through torch's CPU flash kernel (no score_mod, or a bias_mod)


@dataclass
class Saved:
    """What backward reads of the forward, per query row, in the working dtype."""

    go: Tensor  # the output's gradient (B, H, Tl, Dv)
    delta: Tensor  # rowsum(dO * O) (B, H, Tl)
    out: Tensor  # the output (B, H, Tl, Dv)
    lse_open: Tensor  # log-sum-exp, +inf where a row has no key: every weight exp(s - L) is 0 (B, H, Tl)


def fusable(q: Tensor, v: Tensor, score_mod: ScoreMod | None) -> bool:
    """Whether the blocks can run through torch's CPU flash kernel, which returns the log-sum-exp."""
    return (FUSED and q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
            and v.shape[-1] == q.shape[-1]
            and (score_mod is None or bias_of(score_mod) is not None)
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward"))


def _additive(blocked: Tensor | None, m: BlockMath, span: tuple[int, int, int, int], b: int, h: int,
              device: torch.device) -> Tensor | None:
    """A tile's additive mask for the fused kernel: the bias_mod's term, ``-inf`` where ``blocked``.

    Shape:
        returns ``(B|1, H|1, tq, tk)`` in the working dtype, or ``None``.
    """
    bias: Tensor | None = None
    if m.score_mod is not None:
        bias_fn = bias_of(m.score_mod)
        assert bias_fn is not None
        qa, qb, ka, kb = span
        idx = score_index(b, h, span, device)
        bias = torch.broadcast_to(bias_fn(*idx), (b, h, qb - qa, kb - ka)).to(m.dtype)
        refuse_non_finite("score_mod", bias, None, idx)
    if blocked is not None:
        refused = neg_inf_where(blocked, m.dtype)
        bias = refused if bias is None else bias + refused
    return bias


def _fold_heads(x: Tensor, hkv: int) -> Tensor:
    """The gradient of :func:`~attnkit.core.kernels.dense.expand_heads`: per query head ``(B, H, tk, D)``
    summed to ``(B, Hkv, tk, D)``."""
    b, h, tk, d = x.shape
    return x if h == hkv else x.view(b, hkv, h // hkv, tk, d).sum(2)


def q_tiles(runs: list[tuple[int, int]], pairs: GlobalPairs, b: int, h: int, ka: int, tk: int
            ) -> Iterator[tuple[int, int, slice, Allowed]]:
    """The query tiles of a process holding ``runs`` that may attend to a key of ``[ka, ka + tk)``:
    (global start, global stop, local slice, which pairs may attend)."""
    size, at = max(1, TILE_ELEMENTS // max(1, b * h * tk)), 0
    for a, z in runs:
        for q0 in range(a, z, size):
            q1 = min(z, q0 + size)
            allowed = pairs.block(q0, q1, ka, ka + tk)
            if allowed is not False:
                yield q0, q1, slice(at + q0 - a, at + q1 - a), allowed
        at += z - a


def forward_block(q: Tensor, k: Tensor, v: Tensor, ka: int, pairs: GlobalPairs, runs: list[tuple[int, int]],
                  m: BlockMath, out: Tensor, lse: Tensor) -> None:
    """Fold the keys ``[ka, ka + tk)`` into the running output and log-sum-exp, tile by tile, in place.

    Shape:
        q ``(B, H, Tl, Dh)``; k ``(B, Hkv, tk, Dh)``, v ``(B, Hkv, tk, Dv)``; out ``(B, H, Tl, Dv)``,
        lse ``(B, H, Tl)``, both in the working dtype.
    """
    b, h, tk = q.shape[0], q.shape[1], k.shape[2]
    for qa, qb, loc, allowed in q_tiles(runs, pairs, b, h, ka, tk):
        blocked = ~allowed if isinstance(allowed, Tensor) else None  # as the core's tiles take it
        if m.fused:
            o, blk = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q[:, :, loc], *expand_heads(h, k, v),
                attn_mask=_additive(blocked, m, (qa, qb, ka, ka + tk), b, h, q.device), scale=m.scale)
            if blocked is not None:  # a row with no key in this block: the kernel says 0, it is -inf
                blk = blk.masked_fill(blocked.all(-1), float("-inf"))
        else:  # the core's tile (attnkit.core.kernels.tiles)
            o, blk = span_forward(q[:, :, loc].to(m.dtype) * m.scale, k.to(m.dtype), v.to(m.dtype),
                                  (qa, qb, ka, ka + tk), blocked, m.score_mod)
            blk = blk[..., 0].masked_fill(torch.isposinf(blk[..., 0]), float("-inf"))  # no key here: weight 0
        old = lse[:, :, loc]
        new = torch.logaddexp(old, blk)  # (B, H, tq)
        base = new.masked_fill(torch.isneginf(new), 0.0)  # rows with no key yet: nothing to scale
        out[:, :, loc] = out[:, :, loc] * torch.exp(old - base)[..., None] + o * torch.exp(blk - base)[..., None]
        lse[:, :, loc] = new


def backward_block(q: Tensor, k: Tensor, v: Tensor, ka: int, saved: Saved, pairs: GlobalPairs,
                   runs: list[tuple[int, int]], m: BlockMath, dq: Tensor) -> tuple[Tensor, Tensor]:
    """The keys ``[ka, ka + tk)``'s share of the gradients: ``dq`` grows in place; returns ``dk``, ``dv``.

    Both ways read the *global* output and log-sum-exp: with the whole row's ``O`` and ``L`` the block's
    ``exp(S - L)`` and ``rowsum(dO * O)`` are those of the full attention, so each returns exactly this
    block's share of dq, dk and dv (the fused kernel per query head, folded onto the key/value heads).

    Shape:
        q, dq ``(B, H, Tl, Dh)``; k ``(B, Hkv, tk, Dh)``, v ``(B, Hkv, tk, Dv)``; returns their shapes.
    """
    b, h, hkv, tk = q.shape[0], q.shape[1], k.shape[1], k.shape[2]
    kw, vw = expand_heads(h, k, v) if m.fused else (k.to(m.dtype), v.to(m.dtype))
    dk, dv = torch.zeros_like(kw, dtype=m.dtype), torch.zeros_like(vw, dtype=m.dtype)
    for qa, qb, loc, allowed in q_tiles(runs, pairs, b, h, ka, tk):
        blocked = ~allowed if isinstance(allowed, Tensor) else None
        if m.fused:
            gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                saved.go[:, :, loc].contiguous(), q[:, :, loc], kw, vw, saved.out[:, :, loc],
                saved.lse_open[:, :, loc], 0.0, False, scale=m.scale,
                attn_mask=_additive(blocked, m, (qa, qb, ka, ka + tk), b, h, q.device))
        else:  # the core's tile; its dq is still to be scaled
            gq, gk, gv = span_backward(q[:, :, loc].to(m.dtype) * m.scale, kw, vw, saved.go[:, :, loc],
                                       saved.lse_open[:, :, loc, None], saved.delta[:, :, loc, None],
                                       (qa, qb, ka, ka + tk), blocked, m.score_mod)
            gq = gq * m.scale
        dq[:, :, loc] += gq
        dk += gk
        dv += gv
    return _fold_heads(dk, hkv), _fold_heads(dv, hkv)
