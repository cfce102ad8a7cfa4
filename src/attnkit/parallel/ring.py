"""Ring attention over a process group: each process its query slice against every process's keys.

Context parallelism (Liu et al., 2023, "Ring Attention with Blockwise
Transformers"; the load-balanced layout of Megatron-LM) splits one sequence of
length ``T`` over ``world`` processes. Process ``r`` holds the queries, keys
and values of its positions (:mod:`attnkit.parallel.layout`) and computes its
rows of the full attention block by block, combining the blocks with their
log-sum-exp (the online softmax of FlashAttention)::

    L = logaddexp(L, L_blk),   O = O * exp(L_old - L) + exp(S_blk - L) V_blk

Backward recomputes each block from the saved ``L`` (Dao et al., 2022)::

    P = exp(S - L),  dV += P^T dO,  dS = P * (dO V^T - rowsum(dO * O)),  dQ += s dS K,  dK += s dS^T Q

and sends each block's ``dK``, ``dV`` back to the process that owns those keys.

**What travels.** A process's keys and values are cut into pieces
(:data:`PIECES` per slice). In round ``(d, p)`` process ``r`` sends piece ``p``
of its slice to ``r + d`` and receives piece ``p`` of ``r - d``'s -- but only
the span of the piece some query of the receiver may attend under the mask
(:meth:`~attnkit.parallel.pairs.GlobalPairs.needed_span`); a piece nobody needs
is never sent. Every process derives the same plan from the same full-sequence
mask, so sends and receives match without asking. The next round's messages
are posted (``isend``/``irecv``) before the current round is computed, so
communication overlaps computation; backward receives the pieces again
(memory stays ``O(T / world)``) and returns their gradients.

Within a block the math is the readable formula in query tiles (float32 for
half inputs, float64 for float64), with the mask's empty blocks skipped; a
query row with no key anywhere gets zero output and zero gradients.

Shape legend: B batch, H query heads, Hkv key/value heads, G = H / Hkv,
T full length, Tl = T / world local length, Dh head width, Dv value head width,
tq/tk the queries and keys of one tile.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.core.block_mask import BlockMask
from attnkit.core.functional import attention
from attnkit.core.kernels.tiles import captures_gradients
from attnkit.core.masks import MaskLike, read_mask
from attnkit.core.score_mods import apply_score_mod, bias_of, refuse_non_finite
from attnkit.core.types import ScoreMod
from attnkit.parallel.comm import Group, agree, fingerprint, resolve_group, wait
from attnkit.parallel.layout import Layout, check_length, runs_of
from attnkit.parallel.pairs import Allowed, GlobalPairs

__all__ = ["ring_attention", "PIECES", "TILE_ELEMENTS"]

PIECES = 32
"""Pieces each process's keys and values are cut into for the ring (fewer when a slice is short)."""
MIN_PIECE = 4
"""The shortest piece, in tokens."""
FUSED = True
"""Run blocks through torch's CPU flash kernel where it applies (False: always the readable formula)."""
TILE_ELEMENTS = 1 << 17
"""Scores computed at once (B * H * tq * tk), 512 KiB in float32: small tiles keep the peak near the slices' size."""
_KEY, _VALUE, _DKEY, _DVALUE = range(4)
_BACKWARD_TAGS = 1 << 24


def _split(a: int, b: int, n: int) -> list[tuple[int, int]]:
    n = max(1, min(n, (b - a) // MIN_PIECE))
    edges = [a + (b - a) * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


@dataclass
class _Plan:
    """Who sends what to whom, computed alike in every process from the full-sequence mask."""

    g: Group
    pairs: GlobalPairs
    runs: list[list[tuple[int, int]]]  # per rank, its global ranges
    pieces: list[list[tuple[int, int]]]  # per rank, its pieces (global ranges, each inside a run)
    rounds: list[tuple[int, int]]  # (d, p)
    recv: list[tuple[int, int] | None]  # per round, the span this process receives (global)
    send: list[tuple[int, int] | None]  # per round, the span this process sends (global)

    @classmethod
    def build(cls, g: Group, pairs: GlobalPairs, length: int, layout: str) -> _Plan:
        runs = [runs_of(r, g.world, length, layout) for r in range(g.world)]
        per_run = max(1, PIECES // len(runs[0]))
        pieces = [[p for a, b in rr for p in _split(a, b, per_run)] for rr in runs]
        rounds = [(d, p) for d in range(1, g.world) for p in range(len(pieces[0]))]
        me, w = g.rank, g.world
        recv = [pairs.needed_span(runs[me], *pieces[(me - d) % w][p]) for d, p in rounds]
        send = [pairs.needed_span(runs[(me + d) % w], *pieces[me][p]) for d, p in rounds]
        return cls(g, pairs, runs, pieces, rounds, recv, send)

    def local(self, lo: int, hi: int) -> slice:
        """This process's local indices of the global span ``[lo, hi)`` (inside one of its runs)."""
        at = 0
        for a, b in self.runs[self.g.rank]:
            if a <= lo < b:
                return slice(at + lo - a, at + hi - a)
            at += b - a
        raise AssertionError(f"span [{lo}, {hi}) is not held by rank {self.g.rank}")

    def own_spans(self) -> list[tuple[int, int]]:
        """The spans of this process's own pieces that its own queries need."""
        me = self.g.rank
        spans = [self.pairs.needed_span(self.runs[me], a, b) for a, b in self.pieces[me]]
        return [s for s in spans if s is not None]


@dataclass
class _Math:
    """The per-call constants of the block math."""

    scale: float
    score_mod: ScoreMod | None
    dtype: torch.dtype  # the working dtype: float32 for half inputs
    fused: bool = False  # blocks through torch's CPU flash kernel (no score_mod, or a bias_mod)


@dataclass
class _Saved:
    """What backward reads of the forward, per query row, in the working dtype."""

    go: Tensor  # the output's gradient (B, H, Tl, Dv)
    base: Tensor  # log-sum-exp, 0 where a row has no key (B, H, Tl)
    delta: Tensor  # rowsum(dO * O) (B, H, Tl)
    out: Tensor  # the output (B, H, Tl, Dv)
    lse_open: Tensor  # log-sum-exp, +inf where a row has no key: every weight exp(s - L) is 0 (B, H, Tl)


def _fusable(q: Tensor, v: Tensor, score_mod: ScoreMod | None) -> bool:
    """Whether the blocks can run through torch's CPU flash kernel, which returns the log-sum-exp."""
    return (FUSED and q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
            and v.shape[-1] == q.shape[-1]
            and (score_mod is None or bias_of(score_mod) is not None)
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward"))


def _index(b: int, h: int, span: tuple[int, int, int, int], device: torch.device) -> tuple[Tensor, ...]:
    """A score_mod's ``(b, h, q_idx, kv_idx)`` for queries ``[qa, qb)`` and keys ``[ka, kb)`` (global positions)."""
    qa, qb, ka, kb = span
    return (torch.arange(b, device=device).view(b, 1, 1, 1), torch.arange(h, device=device).view(1, h, 1, 1),
            torch.arange(qa, qb, device=device).view(1, 1, -1, 1),
            torch.arange(ka, kb, device=device).view(1, 1, 1, -1))


def _additive(allowed: Allowed, m: _Math, span: tuple[int, int, int, int], b: int, h: int,
              device: torch.device) -> Tensor | None:
    """A tile's additive mask for the fused kernel: the bias_mod's term, ``-inf`` where not allowed.

    Shape:
        returns ``(B|1, H|1, tq, tk)`` in the working dtype, or ``None``.
    """
    bias: Tensor | None = None
    if m.score_mod is not None:
        bias_fn = bias_of(m.score_mod)
        assert bias_fn is not None
        qa, qb, ka, kb = span
        idx = _index(b, h, span, device)
        bias = torch.broadcast_to(bias_fn(*idx), (b, h, qb - qa, kb - ka)).to(m.dtype)
        refuse_non_finite("score_mod", bias, None, idx)
    if isinstance(allowed, Tensor):
        blocked = torch.zeros(allowed.shape, dtype=m.dtype, device=device).masked_fill_(~allowed, float("-inf"))
        bias = blocked if bias is None else bias + blocked
    return bias


def _expand_heads(x: Tensor, h: int) -> Tensor:
    """Key/value heads repeated for their query heads (the fused kernel takes equal heads). ``(B, H, tk, D)``."""
    return x if x.shape[1] == h else x.repeat_interleave(h // x.shape[1], dim=1)


def _fold_heads(x: Tensor, hkv: int) -> Tensor:
    """The gradient of :func:`_expand_heads`: per query head ``(B, H, tk, D)`` summed to ``(B, Hkv, tk, D)``."""
    b, h, tk, d = x.shape
    return x if h == hkv else x.view(b, hkv, h // hkv, tk, d).sum(2)


def _q_tiles(plan: _Plan, b: int, h: int, tk: int) -> list[tuple[int, int, slice]]:
    """This process's query tiles: (global start, global stop, local slice), inside its runs."""
    size = max(1, TILE_ELEMENTS // max(1, b * h * tk))
    tiles, at = [], 0
    for a, z in plan.runs[plan.g.rank]:
        for q0 in range(a, z, size):
            q1 = min(z, q0 + size)
            tiles.append((q0, q1, slice(at + q0 - a, at + q1 - a)))
        at += z - a
    return tiles


def _modded(score_mod: ScoreMod, raw: Tensor, idx: tuple[Tensor, ...], check: bool) -> Tensor:
    """``score_mod`` of the tile's logits in their own dtype (float64 stays float64), checked like the core's.

    A :func:`~attnkit.core.score_mods.bias_mod` adds its term; any other goes through
    :func:`~attnkit.core.score_mods.apply_score_mod`'s checks, and its result keeps ``raw``'s dtype.
    """
    bias_fn = bias_of(score_mod)
    if bias_fn is not None:
        s = raw + bias_fn(*idx).to(raw.dtype)
        if check:
            refuse_non_finite("score_mod", s, raw, idx)
        return s
    if raw.dtype != torch.float64:
        return apply_score_mod(score_mod, raw, idx, check=check).to(raw.dtype)
    out = score_mod(raw, *idx)
    apply_score_mod(lambda *_: out, raw, idx, check=check)  # the core's checks of type, shape and finiteness
    return out.to(raw.dtype)


def _scores(qt: Tensor, k: Tensor, span: tuple[int, int, int, int], m: _Math, allowed: Allowed,
            grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """Scaled (and score-modded) logits of a tile, ``-inf`` where not allowed; with ``grad`` the raw logits too.

    Shape:
        qt ``(B, H, tq, Dh)``, k ``(B, Hkv, tk, Dh)``; returns ``(B, H, tq, tk)`` in the working dtype.
    """
    b, h, tq, dh = qt.shape
    hkv, tk = k.shape[1], k.shape[2]
    qg = qt.to(m.dtype).reshape(b, hkv, h // hkv, tq, dh)  # (B, Hkv, G, tq, Dh)
    raw = (qg @ k.to(m.dtype).unsqueeze(2).transpose(-1, -2)).reshape(b, h, tq, tk) * m.scale
    s, src = raw, None
    if m.score_mod is not None:
        idx = _index(b, h, span, qt.device)
        if grad and bias_of(m.score_mod) is None:  # backward needs the score_mod's vector-Jacobian product
            src = raw.requires_grad_()
        with torch.enable_grad() if src is not None else contextlib.nullcontext():
            s = _modded(m.score_mod, raw, idx, check=not grad)
            if isinstance(allowed, Tensor):
                s = s.masked_fill(~allowed, float("-inf"))
        return s, src
    if isinstance(allowed, Tensor):
        s = s.masked_fill(~allowed, float("-inf"))
    return s, src


def _forward_block(q: Tensor, k: Tensor, v: Tensor, ka: int, plan: _Plan, m: _Math, out: Tensor,
                   lse: Tensor) -> None:
    """Fold the keys ``[ka, ka + tk)`` into the running output and log-sum-exp, tile by tile, in place.

    Shape:
        q ``(B, H, Tl, Dh)``; k ``(B, Hkv, tk, Dh)``, v ``(B, Hkv, tk, Dv)``; out ``(B, H, Tl, Dv)``,
        lse ``(B, H, Tl)``, both in the working dtype.
    """
    b, h = q.shape[:2]
    hkv, tk = k.shape[1], k.shape[2]
    for qa, qb, loc in _q_tiles(plan, b, h, tk):
        allowed = plan.pairs.block(qa, qb, ka, ka + tk)
        if allowed is False:
            continue
        old = lse[:, :, loc]
        if m.fused:
            o, blk = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q[:, :, loc], _expand_heads(k, h), _expand_heads(v, h),
                attn_mask=_additive(allowed, m, (qa, qb, ka, ka + tk), b, h, q.device), scale=m.scale)
            if isinstance(allowed, Tensor):  # a row with no key in this block: the kernel says 0, it is -inf
                blk = blk.masked_fill(~allowed.any(-1), float("-inf"))
            new = torch.logaddexp(old, blk)  # (B, H, tq)
            base = new.masked_fill(torch.isneginf(new), 0.0)
            pv = o * torch.exp(blk - base)[..., None]  # (B, H, tq, Dv)
        else:
            s, _ = _scores(q[:, :, loc], k, (qa, qb, ka, ka + tk), m, allowed)  # (B, H, tq, tk)
            new = torch.logaddexp(old, torch.logsumexp(s, dim=-1))  # (B, H, tq)
            base = new.masked_fill(torch.isneginf(new), 0.0)  # rows with no key yet: nothing to scale
            p = torch.exp(s - base[..., None])  # (B, H, tq, tk)
            pv = (p.reshape(b, hkv, h // hkv, -1, tk) @ v.to(m.dtype).unsqueeze(2)).reshape(b, h, -1, v.shape[-1])
        out[:, :, loc] = out[:, :, loc] * torch.exp(old - base)[..., None] + pv
        lse[:, :, loc] = new


def _fused_backward_block(q: Tensor, k: Tensor, v: Tensor, ka: int, saved: _Saved, plan: _Plan, m: _Math,
                          dq: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_backward_block` through torch's CPU flash backward, given the *global* output and log-sum-exp.

    With the whole row's ``O`` and ``L`` the kernel's ``exp(S - L)`` and ``rowsum(dO * O)`` are those of the
    full attention, so it returns exactly this block's share of dq, dk and dv.
    """
    b, h = q.shape[:2]
    hkv, tk = k.shape[1], k.shape[2]
    ke, ve = _expand_heads(k, h), _expand_heads(v, h)
    dk = torch.zeros(b, h, tk, k.shape[-1], dtype=m.dtype, device=k.device)
    dv = torch.zeros(b, h, tk, v.shape[-1], dtype=m.dtype, device=v.device)
    for qa, qb, loc in _q_tiles(plan, b, h, tk):
        allowed = plan.pairs.block(qa, qb, ka, ka + tk)
        if allowed is False:
            continue
        gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            saved.go[:, :, loc].contiguous(), q[:, :, loc], ke, ve, saved.out[:, :, loc], saved.lse_open[:, :, loc],
            0.0, False, attn_mask=_additive(allowed, m, (qa, qb, ka, ka + tk), b, h, q.device), scale=m.scale)
        dq[:, :, loc] += gq
        dk += gk
        dv += gv
    return _fold_heads(dk, hkv), _fold_heads(dv, hkv)


def _backward_block(q: Tensor, k: Tensor, v: Tensor, ka: int, saved: _Saved, plan: _Plan, m: _Math,
                    dq: Tensor) -> tuple[Tensor, Tensor]:
    """The keys ``[ka, ka + tk)``'s share of the gradients: ``dq`` grows in place; returns ``dk``, ``dv``.

    Shape:
        q, dq ``(B, H, Tl, Dh)``; k ``(B, Hkv, tk, Dh)``, v ``(B, Hkv, tk, Dv)``; returns their shapes.
    """
    if m.fused:
        return _fused_backward_block(q, k, v, ka, saved, plan, m, dq)
    b, h = q.shape[:2]
    hkv, tk = k.shape[1], k.shape[2]
    go, base, delta = saved.go, saved.base, saved.delta
    kw, vw = k.to(m.dtype).unsqueeze(2), v.to(m.dtype).unsqueeze(2)  # (B, Hkv, 1, tk, D)
    dk = torch.zeros(kw.shape[0], hkv, tk, k.shape[-1], dtype=m.dtype, device=k.device)
    dv = torch.zeros(kw.shape[0], hkv, tk, v.shape[-1], dtype=m.dtype, device=v.device)
    for qa, qb, loc in _q_tiles(plan, b, h, tk):
        allowed = plan.pairs.block(qa, qb, ka, ka + tk)
        if allowed is False:
            continue
        s, raw = _scores(q[:, :, loc], k, (qa, qb, ka, ka + tk), m, allowed, grad=True)
        p = torch.exp(s.detach() - base[:, :, loc, None])  # (B, H, tq, tk)
        p5 = p.reshape(b, hkv, h // hkv, -1, tk)  # (B, Hkv, G, tq, tk)
        g5 = go[:, :, loc].reshape(b, hkv, h // hkv, -1, go.shape[-1])  # (B, Hkv, G, tq, Dv)
        dv += (p5.transpose(-1, -2) @ g5).sum(2)
        ds = p * ((g5 @ vw.transpose(-1, -2)).reshape(p.shape) - delta[:, :, loc, None])  # (B, H, tq, tk)
        if raw is not None:  # through the score_mod: its vector-Jacobian product
            (ds,) = torch.autograd.grad(s, raw, ds)
        ds5 = ds.reshape(b, hkv, h // hkv, -1, tk) * m.scale
        dq[:, :, loc] += (ds5 @ kw).reshape(b, h, -1, k.shape[-1])
        dk += (ds5.transpose(-1, -2) @ q[:, :, loc].to(m.dtype).reshape(b, hkv, h // hkv, -1, q.shape[-1])).sum(2)
    return dk, dv


def _post_pieces(plan: _Plan, i: int, k: Tensor, v: Tensor, phase: str, tag0: int) -> tuple[list[Any], list[Any]]:
    """Post round ``i``'s sends of this process's key/value span and receives of its source's."""
    g, (d, _) = plan.g, plan.rounds[i]
    sends: list[Any] = []
    recvs: list[Any] = []
    span = plan.send[i]
    if span is not None:
        loc = plan.local(*span)
        dst = (g.rank + d) % g.world
        sends = [g.send(k[:, :, loc], dst, tag0 + 4 * i + _KEY, phase),
                 g.send(v[:, :, loc], dst, tag0 + 4 * i + _VALUE, phase)]
    span = plan.recv[i]
    if span is not None:
        n, src = span[1] - span[0], (g.rank - d) % g.world
        recvs = [g.recv(k.new_empty(k.shape[0], k.shape[1], n, k.shape[3]), src, tag0 + 4 * i + _KEY, phase),
                 g.recv(v.new_empty(v.shape[0], v.shape[1], n, v.shape[3]), src, tag0 + 4 * i + _VALUE, phase)]
    return sends, recvs


def _ring_forward(q: Tensor, k: Tensor, v: Tensor, plan: _Plan, m: _Math) -> tuple[Tensor, Tensor]:
    """The output and log-sum-exp of this process's queries against every key its rows need.

    Shape:
        q ``(B, H, Tl, Dh)``; returns ``(B, H, Tl, Dv)`` and ``(B, H, Tl)`` in the working dtype.
    """
    b, h, tl, _ = q.shape
    out = torch.zeros(b, h, tl, v.shape[-1], dtype=m.dtype, device=q.device)
    lse = torch.full((b, h, tl), float("-inf"), dtype=m.dtype, device=q.device)
    g, n = plan.g, len(plan.rounds)
    posted = _post_pieces(plan, 0, k, v, "forward", 0) if n else None
    for lo, hi in plan.own_spans():
        loc = plan.local(lo, hi)
        _forward_block(q, k[:, :, loc], v[:, :, loc], lo, plan, m, out, lse)
    for i in range(n):
        nxt = _post_pieces(plan, i + 1, k, v, "forward", 0) if i + 1 < n else None
        assert posted is not None
        sends, recvs = posted
        src = (g.rank - plan.rounds[i][0]) % g.world
        if recvs:
            ks, vs = (wait(g, r, src, f"receiving keys/values of round {i}") for r in recvs)
            span = plan.recv[i]
            assert span is not None
            _forward_block(q, ks, vs, span[0], plan, m, out, lse)
        for s in sends:
            wait(g, s, (g.rank + plan.rounds[i][0]) % g.world, f"sending keys/values of round {i}")
        posted = nxt
    return out, lse


def _finish_grads(plan: _Plan, i: int, pending: tuple[list[Any], list[Any]], dk: Tensor, dv: Tensor) -> None:
    """Wait for round ``i``'s gradient messages; add the gradients received for this process's keys."""
    g, d = plan.g, plan.rounds[i][0]
    sends, recvs = pending
    if recvs:
        gk, gv = (wait(g, r, (g.rank + d) % g.world, f"receiving key gradients of round {i}") for r in recvs)
        span = plan.send[i]
        assert span is not None
        loc = plan.local(*span)
        dk[:, :, loc] += gk
        dv[:, :, loc] += gv
    for s in sends:
        wait(g, s, (g.rank - d) % g.world, f"sending key gradients of round {i}")


def _ring_backward(q: Tensor, k: Tensor, v: Tensor, saved: _Saved, plan: _Plan,
                   m: _Math) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of this process's slice: its own blocks, then each received piece's, sent back to its owner."""
    g, n, tag0 = plan.g, len(plan.rounds), _BACKWARD_TAGS
    dq = torch.zeros(q.shape, dtype=m.dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=m.dtype, device=k.device)
    dv = torch.zeros(v.shape, dtype=m.dtype, device=v.device)
    posted = _post_pieces(plan, 0, k, v, "backward", tag0) if n else None
    for lo, hi in plan.own_spans():
        loc = plan.local(lo, hi)
        gk, gv = _backward_block(q, k[:, :, loc], v[:, :, loc], lo, saved, plan, m, dq)
        dk[:, :, loc] += gk
        dv[:, :, loc] += gv
    previous: tuple[int, tuple[list[Any], list[Any]]] | None = None
    for i in range(n):
        d = plan.rounds[i][0]
        src, dst = (g.rank - d) % g.world, (g.rank + d) % g.world
        nxt = _post_pieces(plan, i + 1, k, v, "backward", tag0) if i + 1 < n else None
        assert posted is not None
        sends, recvs = posted
        grad_recvs: list[Any] = []
        if plan.send[i] is not None:  # dst computes with this process's span: its gradients come back
            lo, hi = plan.send[i]  # type: ignore[misc]
            grad_recvs = [g.recv(dk.new_empty(dk.shape[0], dk.shape[1], hi - lo, dk.shape[3]), dst,
                                 tag0 + 4 * i + _DKEY, "backward"),
                          g.recv(dv.new_empty(dv.shape[0], dv.shape[1], hi - lo, dv.shape[3]), dst,
                                 tag0 + 4 * i + _DVALUE, "backward")]
        grad_sends: list[Any] = []
        if recvs:
            ks, vs = (wait(g, r, src, f"receiving keys/values of round {i} (backward)") for r in recvs)
            span = plan.recv[i]
            assert span is not None
            gk, gv = _backward_block(q, ks, vs, span[0], saved, plan, m, dq)
            # in the working dtype, as the owner accumulates them (float32 for half inputs)
            grad_sends = [g.send(gk, src, tag0 + 4 * i + _DKEY, "backward"),
                          g.send(gv, src, tag0 + 4 * i + _DVALUE, "backward")]
        for s in sends:
            wait(g, s, dst, f"sending keys/values of round {i} (backward)")
        if previous is not None:
            _finish_grads(plan, *previous, dk, dv)
        previous, posted = (i, (grad_sends, grad_recvs)), nxt
    if previous is not None:
        _finish_grads(plan, *previous, dk, dv)
    return dq, dk, dv


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, plan: _Plan, m: _Math) -> Tensor:
        out, lse = _ring_forward(q, k, v, plan, m)
        result = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, result, lse)
        ctx.args = (plan, m)
        return result

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        plan, m = ctx.args
        go, ow = grad.to(m.dtype), out.to(m.dtype)
        empty = torch.isneginf(lse)  # (B, H, Tl): rows with no key
        if m.fused:  # the kernel computes rowsum(dO * O) and exp(S - L) itself
            saved = _Saved(go, lse, lse, ow, lse.masked_fill(empty, float("inf")))
        else:
            saved = _Saved(go, lse.masked_fill(empty, 0.0), (go * ow).sum(-1), ow, lse)
        dq, dk, dv = _ring_backward(q, k, v, saved, plan, m)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _check_local(q: object, k: object, v: object) -> tuple[Tensor, Tensor, Tensor]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4 or not t.dtype.is_floating_point:
            legend = "(B, H, Tl, Dh)" if name == "q" else "(B, Hkv, Tl, Dh)"
            raise ValueError(f"{name} must be a 4-D floating tensor {legend} (this process's slice), "
                             f"got {t.dtype} of shape {tuple(t.shape)}")
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    if not q.dtype == k.dtype == v.dtype or not q.device == k.device == v.device:
        raise TypeError(f"q, k and v must share a dtype and device, got {q.dtype}/{q.device}, "
                        f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")
    b, h, tl, dh = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[2] != tl or v.shape[2] != tl or k.shape[1] != v.shape[1]:
        raise ValueError(
            "q, k and v must be this process's slices of one sequence: the same B and local length Tl, "
            f"k and v the same Hkv; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[3] != dh or dh == 0 or k.shape[1] == 0 or h % k.shape[1]:
        raise ValueError(f"k must have q's head width Dh and a number of heads Hkv dividing H, "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    return q, k, v


def _agreement(q: Tensor, k: Tensor, v: Tensor, layout: str, causal: bool, scale: float,
               score_mod: ScoreMod | None, pairs: GlobalPairs) -> dict[str, int]:
    mod = None if score_mod is None else getattr(score_mod, "__qualname__", type(score_mod).__name__)
    return {
        "local shapes": fingerprint([tuple(q.shape), tuple(k.shape), tuple(v.shape)]),
        "dtype": fingerprint([str(q.dtype)]),
        "layout": fingerprint([layout]),
        "causal, scale and score_mod": fingerprint([causal, scale, mod]),
        "mask": pairs.mask.cached(("parallel", "fingerprint"), lambda: fingerprint(pairs.description()))
        if isinstance(pairs.mask, BlockMask) else fingerprint(pairs.description()),
    }


def ring_attention(q: Tensor, k: Tensor, v: Tensor, *, mask: MaskLike = None, causal: bool = False,
                   scale: float | None = None, score_mod: ScoreMod | None = None, group: Any = None,
                   layout: Layout = "balanced", timeout: float | None = None) -> Tensor:
    """:func:`attnkit.attention` of the full sequence, for this process's slice of queries, over a process group.

    Every process of ``group`` (default: the default group) calls it with its
    slice of ``q``, ``k`` and ``v`` -- cut by :func:`~attnkit.parallel.shard_sequence`
    with the same ``layout`` -- and the same full-sequence ``mask``; each gets
    its rows of ``attention(q_full, k_full, v_full, mask=mask, causal=causal,
    scale=scale, score_mod=score_mod)``, and backward gives each its slice of
    the gradients. Keys and values travel only where the mask lets some query
    of the receiver see them (a window: the neighbours' edges; packed
    documents: the processes holding the same documents).

    Before any message, the processes compare a fingerprint of their
    arguments (one small ``all_gather``) and refuse, by name, shapes, a layout,
    options or a mask that differ. A peer that crashes or stops answering for
    ``timeout`` seconds (default :data:`~attnkit.parallel.comm.DEFAULT_TIMEOUT_S`)
    raises :class:`~attnkit.parallel.ContextParallelError`. A group of one runs
    :func:`attnkit.attention` locally.

    Args:
        q: this process's queries. Grouped-query attention when ``Hkv`` divides ``H``.
        k: this process's keys.
        v: this process's values.
        mask: what :func:`attnkit.attention` takes for the **full** sequence ``(B, H, T, T)``:
            a boolean mask (True = may attend), lengths, a ``BlockMask`` (windows,
            documents), an ``AttentionMask``.
        causal: forbid attention to later positions (global positions).
        scale: logit scale, default ``1 / sqrt(Dh)``.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` with global positions
            (ALiBi, soft-capping); gradients reach q, k and v.
        group: the process group (``None``: the default group).
        layout: ``"balanced"`` (head and tail chunks: equal causal work) or ``"contiguous"``.
        timeout: seconds to wait for a peer before giving up by name.

    Shape:
        q ``(B, H, Tl, Dh)``, k ``(B, Hkv, Tl, Dh)``, v ``(B, Hkv, Tl, Dv)`` with
        ``Tl = T / world``; returns ``(B, H, Tl, Dv)``.
    """
    q, k, v = _check_local(q, k, v)
    g = resolve_group(group, timeout)
    b, h, tl, dh = q.shape
    length = tl * g.world
    check_length(f"the full length T = Tl * world = {tl} * {g.world}", length, layout, g.world)
    try:
        full = read_mask(mask, (b, h, length, length))
    except ValueError as e:
        raise ValueError(f"{e}; ring_attention takes the mask of the full sequence, "
                         f"T = Tl * world = {tl} * {g.world} = {length}") from e
    if isinstance(full, BlockMask):
        full.check(b, h, length, length, q.device)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0):
        raise ValueError(f"scale must be a positive float or None, got {scale!r}")
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be callable, got {type(score_mod).__name__}")
    if score_mod is not None and captures_gradients(score_mod, q.device):
        raise ValueError("score_mod mixes in a tensor that needs a gradient (a learned table): ring_attention "
                         "gives gradients to q, k and v only; pass such a bias another way")
    scale_f = float(scale) if scale is not None else 1.0 / math.sqrt(dh)
    if g.world == 1:
        return attention(q, k, v, mask=mask, causal=causal, scale=scale_f, score_mod=score_mod)
    pairs = GlobalPairs(full, causal)
    agree(g, _agreement(q, k, v, layout, causal, scale_f, score_mod, pairs), q.device)
    plan = _Plan.build(g, pairs, length, layout)
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out: Tensor = _Ring.apply(q, k, v, plan, _Math(scale_f, score_mod, work, _fusable(q, v, score_mod)))
    return out
