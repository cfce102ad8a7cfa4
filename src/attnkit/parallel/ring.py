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

Each block is computed by :mod:`attnkit.parallel.blocks` (torch's CPU flash
kernel or the readable formula), with the mask's empty blocks skipped; a query
row with no key anywhere gets zero output and zero gradients.

Shape legend: B batch, H query heads, Hkv key/value heads, T full length,
Tl = T / world local length, Dh head width, Dv value head width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit._checks import attention_scale
from attnkit.core.block_mask import BlockMask
from attnkit.core.functional import attention, check_inputs
from attnkit.core.kernels.tiles import captures_gradients
from attnkit.core.masks import MaskLike, read_mask
from attnkit.core.types import ScoreMod
from attnkit.parallel.blocks import BlockMath, Saved, backward_block, forward_block, fusable
from attnkit.parallel.comm import Group, agree, fingerprint, resolve_group, wait
from attnkit.parallel.layout import Layout, check_length, runs_of
from attnkit.parallel.pairs import GlobalPairs

__all__ = ["ring_attention", "PIECES"]

PIECES = 32
"""Pieces each process's keys and values are cut into for the ring (fewer when a slice is short)."""
MIN_PIECE = 4
"""The shortest piece, in tokens."""
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

    @property
    def mine(self) -> list[tuple[int, int]]:
        """This process's global ranges."""
        return self.runs[self.g.rank]

    def own_spans(self) -> list[tuple[int, int]]:
        """The spans of this process's own pieces that its own queries need."""
        me = self.g.rank
        spans = [self.pairs.needed_span(self.runs[me], a, b) for a, b in self.pieces[me]]
        return [s for s in spans if s is not None]


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


def _ring_forward(q: Tensor, k: Tensor, v: Tensor, plan: _Plan, m: BlockMath) -> tuple[Tensor, Tensor]:
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
        forward_block(q, k[:, :, loc], v[:, :, loc], lo, plan.pairs, plan.mine, m, out, lse)
    for i in range(n):
        nxt = _post_pieces(plan, i + 1, k, v, "forward", 0) if i + 1 < n else None
        assert posted is not None
        sends, recvs = posted
        src = (g.rank - plan.rounds[i][0]) % g.world
        if recvs:
            ks, vs = (wait(g, r, src, f"receiving keys/values of round {i}") for r in recvs)
            span = plan.recv[i]
            assert span is not None
            forward_block(q, ks, vs, span[0], plan.pairs, plan.mine, m, out, lse)
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


def _ring_backward(q: Tensor, k: Tensor, v: Tensor, saved: Saved, plan: _Plan,
                   m: BlockMath) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of this process's slice: its own blocks, then each received piece's, sent back to its owner."""
    g, n, tag0 = plan.g, len(plan.rounds), _BACKWARD_TAGS
    dq, dk, dv = (torch.zeros(x.shape, dtype=m.dtype, device=x.device) for x in (q, k, v))
    posted = _post_pieces(plan, 0, k, v, "backward", tag0) if n else None
    for lo, hi in plan.own_spans():
        loc = plan.local(lo, hi)
        gk, gv = backward_block(q, k[:, :, loc], v[:, :, loc], lo, saved, plan.pairs, plan.mine, m, dq)
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
            gk, gv = backward_block(q, ks, vs, span[0], saved, plan.pairs, plan.mine, m, dq)
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
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, plan: _Plan, m: BlockMath) -> Tensor:
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
        delta = lse if m.fused else (go * ow).sum(-1)  # the fused kernel computes rowsum(dO * O) itself
        saved = Saved(go, delta, ow, lse.masked_fill(empty, float("inf")))
        dq, dk, dv = _ring_backward(q, k, v, saved, plan, m)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _check_local(q: object, k: object, v: object) -> tuple[Tensor, Tensor, Tensor]:
    check_inputs(q, k, v)
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    if k.shape[2] != q.shape[2] or not q.device == k.device == v.device:
        raise ValueError("q, k and v must be this process's slices of one sequence on one device: the same "
                         f"local length Tl, got q {tuple(q.shape)} on {q.device}, k {tuple(k.shape)} on {k.device}, "
                         f"v {tuple(v.shape)} on {v.device}")
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
        causal: forbid attention to later positions (global positions); beside a mask (a BlockMask
            too, with one process or many) the pairs both allow.
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
    scale_f = attention_scale(scale, dh)
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be callable, got {type(score_mod).__name__}")
    if score_mod is not None and captures_gradients(score_mod, q.device):
        raise ValueError("score_mod mixes in a tensor that needs a gradient (a learned table): ring_attention "
                         "gives gradients to q, k and v only; pass such a bias another way")
    if g.world == 1:
        return attention(q, k, v, mask=mask, causal=causal, scale=scale_f, score_mod=score_mod)
    pairs = GlobalPairs(full, causal)
    agree(g, _agreement(q, k, v, layout, causal, scale_f, score_mod, pairs), q.device)
    plan = _Plan.build(g, pairs, length, layout)
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out: Tensor = _Ring.apply(q, k, v, plan, BlockMath(scale_f, score_mod, work, fusable(q, v, score_mod)))
    return out
