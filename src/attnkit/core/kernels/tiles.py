"""Attention with a ``score_mod`` in query tiles, FlashAttention style: no ``(Tq, Tk)`` tensor.

:func:`tiled_attention` cuts the queries into tiles of whole blocks of a
:class:`~attnkit.core.block_mask.BlockMask` (or of the plain sequence when there is
no mask). A tile computes its scores against the span of key blocks its query
blocks need, so the empty blocks outside the span are skipped; ``score_mod``
rewrites those scores, the element mask of the span's blocks is applied only
where a block is not full, and the tile's output and row log-sum-exp ``L`` are
kept. Backward recomputes each tile from ``L`` (Dao et al., 2022)::

    P = exp(S' - L),  dV += P^T dO,  dP = dO V^T,  dS' = P * (dP - rowsum(dO * O)),
    dS = vjp(score_mod)(dS'),  dQ = scale dS K,  dK += scale dS^T Q

where ``S'`` is the scores after ``score_mod``. Memory is the output, ``L`` and
one tile of scores: linear in the length. A query with no key gives zeros and
zero gradients. Shifted logits are clamped at ``-87`` before ``exp``: float32
``exp`` below that returns subnormal numbers, which the CPU computes many times
slower; an entry that far below its row maximum weighs less than ``1e-37`` of
the row, so the clamp changes no float32 result.

Shape legend: B batch, H query heads, Hkv key/value heads, G = H / Hkv, Tq/Tk query/key
length, Dh head width, Dv value head width, bs block size, tq/S the queries and keys of one tile.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.block_mask import BlockMask, block_kinds
from attnkit.core.rows import rows_with_keys
from attnkit.core.score_mods import apply_score_mod, bias_of, refuse_non_finite
from attnkit.core.types import BiasFn, ScoreMod

__all__ = ["tiled_attention", "tile_plan", "block_kinds", "TILE_ELEMENTS", "FUSED_TILE_ELEMENTS", "captures_gradients",
           "score_index", "span_forward", "span_backward"]

TILE_ELEMENTS = 1 << 22
"""Scores computed at once (B * H * tq * S) on the step-by-step path, 16 MiB in float32 (at least one block)."""
FUSED_TILE_ELEMENTS = 1 << 24
"""The same for a :func:`~attnkit.core.score_mods.bias_mod` through the fused kernel (its bias tile, 64 MiB):
the kernel's backward costs more per call than per entry, so its tiles are larger."""
_FLOOR = -87.0  # exp(-87) ~ 1.6e-38, the smallest normal float32 is 1.2e-38


@dataclass(frozen=True)
class _Tile:
    q0: int
    q1: int
    k0: int
    k1: int
    c0: int = 0  # the columns [c0, c1) of the span hold its blocks that are not full
    c1: int = 0
    kinds: Tensor | None = None  # (Bm, Hm, nb, nj) kinds of those blocks; None when every block is full


def tile_plan(bm: BlockMask | None, b: int, h: int, tq: int, tk: int, elements: int | None = None
              ) -> list[_Tile]:
    """The query tiles and the key span each one computes (empty blocks outside the span skipped).

    A tile holds whole query blocks and grows while ``B * H * tq * S <= elements``
    (default :data:`TILE_ELEMENTS`).
    """
    elements = TILE_ELEMENTS if elements is None else elements
    if bm is None:
        rows = max(1, min(tq, elements // max(1, b * h * tk)))
        return [_Tile(q0, min(tq, q0 + rows), 0, tk) for q0 in range(0, tq, rows)]
    bs = bm.block_size
    kinds = block_kinds(bm)  # (Bm, Hm, nQ, nK)
    used = kinds.amax(dim=(0, 1)) > 0  # (nQ, nK): some (b, h) computes this block
    nq = used.shape[0]
    cols = torch.arange(used.shape[1], device=used.device)
    first = torch.where(used, cols, used.shape[1]).amin(dim=1).tolist()
    last = torch.where(used, cols, -1).amax(dim=1).tolist()
    tiles: list[_Tile] = []
    i0 = 0
    while i0 < nq:
        i1, j0, j1 = i0 + 1, first[i0], last[i0] + 1
        while i1 < nq:  # grow the tile while its scores stay within TILE_ELEMENTS
            n0, n1 = min(j0, first[i1]), max(j1, last[i1] + 1)
            if b * h * (i1 + 1 - i0) * bs * max(0, n1 - n0) * bs > elements:
                break
            i1, j0, j1 = i1 + 1, n0, n1
        if j1 > j0:
            tiles.append(_make_tile(kinds[:, :, i0:i1, j0:j1], i0 * bs, min(tq, i1 * bs), j0 * bs,
                                    min(tk, j1 * bs), bs))
        i0 = i1
    return tiles


def _make_tile(span: Tensor, q0: int, q1: int, k0: int, k1: int, bs: int) -> _Tile:
    notfull = (span != 1).flatten(0, 2).any(dim=0)  # (nj,): a block column that needs the element mask
    if not bool(notfull.any()):
        return _Tile(q0, q1, k0, k1)
    cols = notfull.nonzero()[:, 0]
    jc0, jc1 = int(cols[0]), int(cols[-1]) + 1
    return _Tile(q0, q1, k0, k1, jc0 * bs, min(k1 - k0, jc1 * bs), span[..., jc0:jc1])


def _blocked(bm: BlockMask | None, tile: _Tile) -> tuple[Tensor, Tensor | None] | None:
    """Where a tile's queries may NOT attend (True) in its columns ``[c0, c1)``, and the rows that keep a key.

    ``None`` when the whole span is allowed; the second result is ``None``
    when every row keeps a key.

    Shape:
        returns ``(Bm, Hm, tq, c1 - c0)`` bool and ``(Bm, Hm, tq, 1)`` bool.
    """
    if bm is None or tile.kinds is None:
        return None
    bmb, hm, nb, nj = tile.kinds.shape
    bs = bm.block_size
    elems = bm.elements.index_select(0, tile.kinds.flatten()).view(bmb, hm, nb, nj, bs, bs)
    allowed = elems.transpose(3, 4).reshape(bmb, hm, nb * bs, nj * bs)[:, :, : tile.q1 - tile.q0,
                                                                       : tile.c1 - tile.c0]
    if tile.c1 - tile.c0 < tile.k1 - tile.k0:  # the span's other columns are full blocks: every row has keys
        return ~allowed, None
    rows = rows_with_keys(allowed)  # (Bm, Hm, Tb, 1)
    return ~allowed, None if bool(rows.all()) else rows


def _own(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x`` itself when nothing else holds it (a fresh, full-shaped result), else a copy of that shape.

    Lets the bias of a tile take its ``-inf`` entries in place, without a second tile-sized copy.
    """
    if sys.getrefcount(x) <= 3 and x._base is None and x.is_contiguous() and x.shape == shape:
        return x
    return x.expand(shape).clone()


def score_index(b: int, h: int, span: tuple[int, int, int, int], device: torch.device
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A score_mod's ``(b, h, q_idx, kv_idx)`` for queries ``[qa, qb)`` and keys ``[ka, kb)`` of ``span``.

    Shape:
        returns ``(B, 1, 1, 1)``, ``(1, H, 1, 1)``, ``(1, 1, qb - qa, 1)``, ``(1, 1, 1, kb - ka)`` int64.
    """
    qa, qb, ka, kb = span
    return (torch.arange(b, device=device).view(b, 1, 1, 1), torch.arange(h, device=device).view(1, h, 1, 1),
            torch.arange(qa, qb, device=device).view(1, 1, -1, 1),
            torch.arange(ka, kb, device=device).view(1, 1, 1, -1))


def _index(b: int, h: int, tile: _Tile, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return score_index(b, h, (tile.q0, tile.q1, tile.k0, tile.k1), device)


def _grouped(x: Tensor, hkv: int) -> Tensor:
    """``(B, H, t, d)`` -> ``(B, Hkv, G * t, d)``: the query heads that share a key/value head, stacked."""
    b, h, t, d = x.shape
    return x.reshape(b, hkv, (h // hkv) * t, d)


def _scores(qt: Tensor, k: Tensor, h: int) -> Tensor:
    """``qt`` (already scaled) against the span's keys. ``(B, H, tq, S)`` float32."""
    b, hkv = k.shape[0], k.shape[1]
    s = _grouped(qt, hkv) @ k.transpose(-1, -2)  # (B, Hkv, G * tq, S)
    return s.view(b, h, qt.shape[2], k.shape[2])


def _fill(s: Tensor, tile: _Tile, mask: tuple[Tensor, Tensor | None] | None, value: float) -> None:
    """Set the blocked entries of a tile's columns ``[c0, c1)`` to ``value``, in place."""
    if mask is not None:
        s[..., tile.c0:tile.c1].masked_fill_(mask[0], value)


def _forward_tile(qt: Tensor, k: Tensor, v: Tensor, tile: _Tile, mask: tuple[Tensor, Tensor | None] | None,
                  score_mod: ScoreMod | None, idx: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
    """One tile's normalised output ``(B, H, tq, Dv)`` and log-sum-exp ``(B, H, tq, 1)`` (+inf: no key)."""
    b, h, tq, _ = qt.shape
    s = _scores(qt, k, h)
    if score_mod is not None:
        s2 = apply_score_mod(score_mod, s, idx)
        del s
        s = _own(s2, (b, h, tq, k.shape[2]))
        del s2
    _fill(s, tile, mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    nan_row = torch.isnan(m)  # a NaN query: NaN out, as on the readable path
    ok = torch.isfinite(m)
    m = torch.where(ok, m, torch.zeros_like(m))
    p = s.sub_(m).clamp_(min=_FLOOR).exp_()
    _fill(p, tile, mask, 0.0)
    total = p.sum(dim=-1, keepdim=True)
    out = (_grouped(p, v.shape[1]) @ v).view(b, h, tq, v.shape[-1])
    total = torch.where(ok, total, torch.ones_like(total))
    out = out.div_(total).masked_fill_(~ok, 0.0).masked_fill_(nan_row, float("nan"))
    return out, torch.where(ok, m + total.log(), torch.full_like(m, float("inf")))


def _backward_tile(qt: Tensor, k: Tensor, v: Tensor, go: Tensor, lse: Tensor, delta: Tensor, tile: _Tile,
                   mask: tuple[Tensor, Tensor | None] | None, score_mod: ScoreMod | None,
                   idx: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """One tile's ``(dq, dk, dv)``: dq for the tile's queries (unscaled), dk/dv for its key span."""
    b, h, tq, _ = qt.shape
    hkv = k.shape[1]
    s = _scores(qt, k, h)
    s2 = s
    if score_mod is not None:
        with torch.enable_grad():
            s.requires_grad_()
            s2 = apply_score_mod(score_mod, s, idx, check=False)  # checked in forward
    p = s2.detach() - lse if score_mod is not None else s.sub_(lse)
    p = p.clamp_(min=_FLOOR).exp_()  # rows without a key have L = +inf: P = exp(-87) there, zeroed below
    _fill(p, tile, mask, 0.0)
    if bool(torch.isinf(lse).any()):
        p.masked_fill_(torch.isinf(lse), 0.0)
    go_g = _grouped(go, hkv)  # (B, Hkv, G * tq, Dv)
    pg = _grouped(p, hkv)
    dv = pg.transpose(-1, -2) @ go_g  # (B, Hkv, S, Dv)
    dp = (go_g @ v.transpose(-1, -2)).view(b, h, tq, k.shape[2])
    ds = dp.sub_(delta).mul_(p)
    if score_mod is not None:
        (ds,) = torch.autograd.grad(s2, s, ds)
    dsg = _grouped(ds, hkv)
    dq = (dsg @ k).view(b, h, tq, k.shape[-1])
    dk = dsg.transpose(-1, -2) @ _grouped(qt, hkv)  # (B, Hkv, S, Dh), still times 1 / scale
    return dq, dk, dv


def _span(qt: Tensor, span: tuple[int, int, int, int], blocked: Tensor | None
          ) -> tuple[_Tile, tuple[Tensor, None] | None, tuple[Tensor, ...]]:
    qa, qb, ka, kb = span
    return (_Tile(qa, qb, ka, kb, 0, kb - ka), None if blocked is None else (blocked, None),
            score_index(qt.shape[0], qt.shape[1], span, qt.device))


def span_forward(qt: Tensor, k: Tensor, v: Tensor, span: tuple[int, int, int, int], blocked: Tensor | None,
                 score_mod: ScoreMod | None) -> tuple[Tensor, Tensor]:
    """A tile's forward for a caller that folds key spans itself (ring attention): queries ``qt`` (already
    scaled, the global positions ``[qa, qb)`` of ``span``) against the keys ``[ka, kb)``, ``blocked`` True where
    a query may not attend (None: nowhere). Returns the span's normalised output and row log-sum-exp (+inf
    for a row with no key here), in the inputs' dtype (float32 or float64).

    Shape:
        qt ``(B, H, tq, Dh)``, k ``(B, Hkv, tk, Dh)``, v ``(B, Hkv, tk, Dv)``, blocked broadcasting to
        ``(B, H, tq, tk)``; returns ``(B, H, tq, Dv)`` and ``(B, H, tq, 1)``.
    """
    tile, mask, idx = _span(qt, span, blocked)
    return _forward_tile(qt, k, v, tile, mask, score_mod, idx)


def span_backward(qt: Tensor, k: Tensor, v: Tensor, go: Tensor, lse: Tensor, delta: Tensor,
                  span: tuple[int, int, int, int], blocked: Tensor | None, score_mod: ScoreMod | None
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """The span's share of the gradients given the row's *global* log-sum-exp ``lse`` (+inf: no key at all)
    and ``delta = rowsum(dO * O)``: ``dq`` (still to be multiplied by the scale), ``dk``, ``dv``.

    Shape:
        as :func:`span_forward`, go ``(B, H, tq, Dv)``, lse and delta ``(B, H, tq, 1)``; returns
        ``(B, H, tq, Dh)``, ``(B, Hkv, tk, Dh)``, ``(B, Hkv, tk, Dv)``.
    """
    tile, mask, idx = _span(qt, span, blocked)
    return _backward_tile(qt, k, v, go, lse, delta, tile, mask, score_mod, idx)


class _Tiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, bm: BlockMask | None, scale: float,
                score_mod: ScoreMod | None, tiles: list[_Tile]) -> Tensor:
        work = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for float64 inputs
        qf, kf, vf = q.to(work), k.to(work), v.to(work)
        b, h, tq, _ = q.shape
        out = torch.zeros(b, h, tq, v.shape[-1], dtype=work, device=q.device)
        lse = torch.full((b, h, tq, 1), float("inf"), dtype=work, device=q.device)
        for t in tiles:
            qt = qf[:, :, t.q0:t.q1] * scale
            o, l_ = _forward_tile(qt, kf[:, :, t.k0:t.k1], vf[:, :, t.k0:t.k1], t, _blocked(bm, t), score_mod,
                                  _index(b, h, t, q.device))
            out[:, :, t.q0:t.q1] = o
            lse[:, :, t.q0:t.q1] = l_
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (bm, scale, score_mod, tiles)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        bm, scale, score_mod, tiles = ctx.args
        work = out.dtype
        qf, kf, vf, go = q.to(work), k.to(work), v.to(work), grad.to(work)
        b, h = q.shape[:2]
        delta = (go * out).sum(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        for t in tiles:
            qs, ks = slice(t.q0, t.q1), slice(t.k0, t.k1)
            dq_t, dk_t, dv_t = _backward_tile(qf[:, :, qs] * scale, kf[:, :, ks], vf[:, :, ks], go[:, :, qs],
                                              lse[:, :, qs], delta[:, :, qs], t, _blocked(bm, t), score_mod,
                                              _index(b, h, t, q.device))
            dq[:, :, qs] += dq_t
            dk[:, :, ks] += dk_t
            dv[:, :, ks] += dv_t
        return dq.mul_(scale).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def _bias_tile(bm: BlockMask | None, t: _Tile, bias_fn: BiasFn, b: int, h: int, dtype: torch.dtype,
               device: torch.device, check: bool = False) -> tuple[Tensor, Tensor | None]:
    """A tile's additive mask for the fused kernel: the bias, ``-inf`` where blocked; rows kept.

    Rows without a key are left open (bias only) and reported in the second
    result, ``None`` when every row keeps a key.

    Shape:
        returns a float tensor broadcasting to ``(B, H, tq, S)`` and ``(Bm, Hm, tq, 1)`` bool.
    """
    bias = bias_fn(*_index(b, h, t, device))
    want = (b, h, t.q1 - t.q0, t.k1 - t.k0)
    if not isinstance(bias, Tensor) or not bias.dtype.is_floating_point:
        got = bias.dtype if isinstance(bias, Tensor) else type(bias).__name__
        raise TypeError(f"bias_mod's bias_fn must return a floating tensor, got {got}")
    try:
        ok = bias.dim() <= 4 and torch.broadcast_shapes(bias.shape, want) == torch.Size(want)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"bias_mod's bias_fn returned shape {tuple(bias.shape)}, which does not broadcast "
                         f"to the tile {want}; use element-wise operations on b, h, q_idx, kv_idx")
    if check:
        refuse_non_finite("score_mod (its bias_mod's bias_fn)", bias, None, _index(b, h, t, device))
    bias = bias.to(dtype)
    mask = _blocked(bm, t)
    if mask is None:
        return bias, None
    blocked, row_ok = mask
    shape = tuple(torch.broadcast_shapes(bias.shape, blocked.shape[:2] + want[2:]))
    bias = _own(bias, shape)
    if row_ok is not None:
        blocked = blocked & row_ok  # rows without a key stay open inside the kernel, zeroed after
    bias[..., t.c0:t.c1].masked_fill_(blocked, float("-inf"))
    return bias, row_ok


def _flash_cpu(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether torch's CPU flash kernel can be called with its log-sum-exp (no recompute in backward): as many
    key/value heads as query heads, and values as wide as queries."""
    return q.device.type == "cpu" and q.shape[1] == k.shape[1] and q.shape[-1] == v.shape[-1] and hasattr(
        torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward")


class _FusedBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, bm: BlockMask | None, scale: float,
                bias_fn: BiasFn, tiles: list[_Tile]) -> Tensor:
        b, h, tq, _ = q.shape
        out = torch.zeros(b, h, tq, v.shape[-1], dtype=q.dtype, device=q.device)
        flash = _flash_cpu(q, k, v)
        wide = torch.promote_types(q.dtype, torch.float32)  # the log-sum-exp: float64 for float64 inputs
        lse = torch.zeros(b, h, tq, dtype=wide, device=q.device) if flash else None
        for t in tiles:
            qs, ks = slice(t.q0, t.q1), slice(t.k0, t.k1)
            bias, row_ok = _bias_tile(bm, t, bias_fn, b, h, q.dtype, q.device, check=True)
            if flash:
                assert lse is not None
                o, lse[:, :, qs] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q[:, :, qs], k[:, :, ks], v[:, :, ks], attn_mask=bias, scale=scale)
            else:
                o = F.scaled_dot_product_attention(q[:, :, qs], k[:, :, ks], v[:, :, ks], attn_mask=bias,
                                                   scale=scale, enable_gqa=k.shape[1] != h)
            out[:, :, qs] = o if row_ok is None else o.masked_fill(~row_ok, 0.0)
        ctx.save_for_backward(q, k, v, out, *(() if lse is None else (lse,)))
        ctx.args = (bm, scale, bias_fn, tiles)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, *lse = ctx.saved_tensors
        bm, scale, bias_fn, tiles = ctx.args
        b, h = q.shape[:2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for t in tiles:
            qs, ks = slice(t.q0, t.q1), slice(t.k0, t.k1)
            bias, row_ok = _bias_tile(bm, t, bias_fn, b, h, q.dtype, q.device)
            g = grad[:, :, qs] if row_ok is None else grad[:, :, qs].masked_fill(~row_ok, 0.0)
            if lse:  # torch's CPU flash backward from the saved log-sum-exp
                grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    g.contiguous(), q[:, :, qs], k[:, :, ks], v[:, :, ks], out[:, :, qs], lse[0][:, :, qs],
                    0.0, False, attn_mask=bias, scale=scale)
            else:  # recompute the tile's forward under autograd
                with torch.enable_grad():
                    qt, kt, vt = (x.detach().requires_grad_() for x in (q[:, :, qs], k[:, :, ks], v[:, :, ks]))
                    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias, scale=scale,
                                                       enable_gqa=k.shape[1] != h)
                    grads = torch.autograd.grad(o, (qt, kt, vt), g)
            dq[:, :, qs] += grads[0]
            dk[:, :, ks] += grads[1]
            dv[:, :, ks] += grads[2]
        return dq, dk, dv, None, None, None, None


def captures_gradients(score_mod: ScoreMod, device: torch.device) -> bool:
    """Whether ``score_mod`` mixes in a tensor that needs a gradient (a learned bias table).

    :func:`tiled_attention` gives gradients for q, k and v only, so such a
    score_mod takes the autograd path instead. Probed on one score entry.
    """
    if not torch.is_grad_enabled():
        return False
    zero = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
    with torch.enable_grad():
        out = score_mod(torch.zeros(1, 1, 1, 1, device=device), zero, zero, zero, zero)
    return isinstance(out, Tensor) and out.requires_grad


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, bm: BlockMask | None, *, scale: float,
                    score_mod: ScoreMod | None) -> Tensor:
    """Attention over ``bm`` (``None``: every key) with ``score_mod``, one query tile at a time.

    A :func:`~attnkit.core.score_mods.bias_mod` goes through torch's fused kernel with one bias tile per query
    tile, in float32 for half-precision inputs so that the bias is added in float32 (on CPU its log-sum-exp
    is kept; elsewhere a tile's forward is recomputed in backward); any other
    score_mod runs step by step, in float32. Gradients reach q, k and v, not tensors captured inside
    ``score_mod`` (:func:`captures_gradients` tells those apart).

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``; returns ``(B, H, Tq, Dv)``.
    """
    b, h, tq, _ = q.shape
    bias_fn = bias_of(score_mod)
    if bias_fn is not None:
        plan = tile_plan(bm, b, h, tq, k.shape[2], FUSED_TILE_ELEMENTS)
        if q.dtype in (torch.float16, torch.bfloat16):
            # the bias is added in float32: ALiBi's distances times slopes reach tens, where a
            # half-precision bias would be off by tenths; the kernel runs in float32 on these tiles
            wide: Tensor = _FusedBias.apply(q.float(), k.float(), v.float(), bm, scale, bias_fn, plan)
            return wide.to(q.dtype)
        fused: Tensor = _FusedBias.apply(q, k, v, bm, scale, bias_fn, plan)
        return fused
    out: Tensor = _Tiled.apply(q, k, v, bm, scale, score_mod, tile_plan(bm, b, h, tq, k.shape[2]))
    return out
