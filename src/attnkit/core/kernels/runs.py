"""Block-sparse attention over contiguous key runs: views of the keys, no gather.

When every query block's non-empty key blocks of a
:class:`~attnkit.core.block_mask.BlockMask` form one contiguous run (causal,
sliding windows, packed documents, prefix-LM), a group of consecutive query
blocks attends a *view* ``k[:, :, start:end]`` through torch's CPU flash kernel,
with an additive mask only where the group's span holds blocks that are not
full for all its rows. Consecutive query blocks share one kernel call while
their common span wastes at most a tenth more work than their own runs
(groups of one shape become one strided call anyway, so merging saves few
calls: a sliding window's blocks stay apart, each attending its own run).
The plan (groups and masks) is found once per BlockMask and kept on it;
backward calls the flash kernel's backward from the saved log-sum-exp and adds
each group's key and value gradients into their slices in place.

Shape legend: B batch, H heads, Hkv key/value heads, Tq/Tk query/key length, Dh head width,
bs block size, nQ query blocks, K key blocks stored per query block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnkit.core.block_mask import BlockMask
from attnkit.core.kernels.dense import expand_heads
from attnkit.core.rows import rows_with_keys

__all__ = ["run_plan", "usable", "runs_attention"]

_WASTE = 1.1  # a group's span may hold this much more work than its query blocks' own runs
_MAX_GROUP = 8  # query blocks per kernel call at most
_CACHED_MASK_ELEMENTS = 1 << 24  # additive masks kept on the BlockMask up to this many entries in all

Call = tuple[int, int, int, int, int, int, int, Tensor | None]
"""``(q0, q_step, L, k0, k_step, S, n, allowed)``: ``n`` groups of ``L`` query rows from ``q0 + i q_step``
attending ``S`` keys from ``k0 + i k_step``, one kernel call as a strided view; the bool mask or None."""


def _runs(bm: BlockMask) -> tuple[list[int], list[int]] | None:
    """Per query block the first and end key block of its one run, or None when some run has a gap."""
    kv, ei = bm.kv_indices[0, 0], bm.elem_index[0, 0]  # (nQ, K)
    n = (ei > 0).sum(-1)  # (nQ,)
    ar = torch.arange(kv.shape[1], device=kv.device)
    if not bool(((kv - kv[:, :1] == ar) | (ar >= n[:, None])).all()):
        return None
    return kv[:, 0].tolist(), (kv[:, 0] + n).tolist()


def _groups(starts: list[int], ends: list[int]) -> list[tuple[int, int, int, int]]:
    """Consecutive query blocks merged while their common span wastes little: ``(i0, i1, s, e)`` blocks."""
    out: list[tuple[int, int, int, int]] = []
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if out:
            i0, _, gs, ge = out[-1]
            own = sum(ends[j] - starts[j] for j in range(i0, i + 1))
            ns, ne = min(gs, s), max(ge, e)
            if i + 1 - i0 <= _MAX_GROUP and (i + 1 - i0) * (ne - ns) <= _WASTE * own:
                out[-1] = (i0, i + 1, ns, ne)
                continue
        out.append((i, i + 1, s, e))
    return out


def _block_index(bm: BlockMask, g: tuple[int, int, int, int], starts: list[int], ends: list[int]) -> Tensor:
    """The group's blocks as indices into ``bm.elements`` (0 empty, 1 full). Shape: ``(query blocks, key blocks)``."""
    i0, i1, s, e = g
    idx = torch.zeros(i1 - i0, e - s, dtype=torch.long, device=bm.device)
    for r, i in enumerate(range(i0, i1)):
        idx[r, starts[i] - s: ends[i] - s] = bm.elem_index[0, 0, i, : ends[i] - starts[i]]
    return idx


def _allowed(bm: BlockMask, g: tuple[int, int, int, int], idx: Tensor) -> Tensor:
    """The group's bool mask over its span, from the stored blocks. Shape: ``(rows, cols)``."""
    i0, i1, s, e = g
    bs = bm.block_size
    allowed = bm.elements[idx].transpose(1, 2).reshape((i1 - i0) * bs, (e - s) * bs)
    tq, tk = bm.shape[2], bm.shape[3]
    return allowed[: min(i1 * bs, tq) - i0 * bs, : min(e * bs, tk) - s * bs]


def _batched(groups: list[tuple[int, int, int, int, Tensor | None]]) -> list[Call]:
    """Consecutive groups of one shape, evenly spaced and with one mask, batched into one call."""
    calls: list[Call] = []
    for q0, q1, k0, k1, a in groups:
        if calls:
            c0, qs, lq, d0, ks, sk, n, ca = calls[-1]
            nqs, nks = (q0 - c0, k0 - d0) if n == 1 else (qs, ks)
            same = (ca is None and a is None) or (ca is not None and a is not None and ca.shape == a.shape
                                                 and bool(torch.equal(ca, a)))
            if (q1 - q0, k1 - k0) == (lq, sk) and same and q0 == c0 + n * nqs and k0 == d0 + n * nks \
                    and nks > 0 and sk % nks == 0:
                calls[-1] = (c0, nqs, lq, d0, nks, sk, n + 1, ca)
                continue
        calls.append((q0, q1 - q0, q1 - q0, k0, k1 - k0, k1 - k0, 1, a))
    return calls


def run_plan(bm: BlockMask) -> list[Call] | None:
    """The kernel calls of the contiguous path, or None when it does not apply (found once, kept).

    None when the mask depends on the batch or head, when some query block's
    key blocks have a gap, or when some query row keeps no key.
    """
    return bm.cached(("runs",), lambda: _find_plan(bm))


def _find_plan(bm: BlockMask) -> list[Call] | None:
    runs = _runs(bm) if bm.kv_indices.shape[:2] == (1, 1) else None
    if runs is None:
        return None
    starts, ends = runs
    groups: list[tuple[int, int, int, int, Tensor | None]] = []
    bs, tq, tk = bm.block_size, bm.shape[2], bm.shape[3]
    for g in _groups(starts, ends):
        idx = _block_index(bm, g, starts, ends)
        full = idx == 1
        if bool(full.all()):  # every block full: no mask, every row keeps a key
            groups.append((g[0] * bs, min(g[1] * bs, tq), g[2] * bs, min(g[3] * bs, tk), None))
            continue
        allowed = _allowed(bm, g, idx)
        open_rows = ~full.any(1).repeat_interleave(bs)[: allowed.shape[0]]  # rows of blocks with no full block
        if bool(open_rows.any()) and not bool(rows_with_keys(allowed[open_rows]).all()):
            return None  # a row with no key: the gather path zeroes it
        every = not bool((idx == 0).any()) and bool(allowed.all())  # an empty block holds a refused entry
        groups.append((g[0] * bs, min(g[1] * bs, tq), g[2] * bs, min(g[3] * bs, tk), None if every else allowed))
    return _batched(groups)


@functools.cache
def native_gqa() -> bool:
    """Whether torch's CPU flash kernel (forward and backward) takes fewer key heads than query heads."""
    try:
        q, k = torch.ones(1, 2, 2, 1), torch.ones(1, 1, 2, 1)
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, k, scale=1.0)
        gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            torch.ones_like(o), q, k, k, o, lse, 0.0, False, scale=1.0)
    except (RuntimeError, TypeError, ValueError):
        return False
    return o.shape == q.shape and gq.shape == q.shape and gk.shape == k.shape and gv.shape == k.shape


def usable(q: Tensor, k: Tensor, v: Tensor, bm: BlockMask) -> bool:
    """Whether :func:`runs_attention` can run this call (eager, CPU, contiguous runs; GQA allowed)."""
    return (not torch.compiler.is_compiling() and q.device.type == "cpu" and q.shape[1] % k.shape[1] == 0
            and v.shape[1] == k.shape[1] and v.shape[-1] == q.shape[-1]
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward")
            and run_plan(bm) is not None)


def neg_inf_where(blocked: Tensor, dtype: torch.dtype) -> Tensor:
    """An additive mask: ``-inf`` where ``blocked``, ``0`` elsewhere, in ``dtype``."""
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill_(blocked, float("-inf"))


def kept_masks(bm: BlockMask, key: tuple[Any, ...], make: Callable[[], list[Tensor | None]]
               ) -> list[Tensor | None]:
    """``make()``'s masks, kept on the BlockMask under ``key`` when small (:meth:`BlockMask.cached`)."""
    return bm.cached(key, make, keep=lambda masks: sum(0 if m is None else m.numel() for m in masks)
                     <= _CACHED_MASK_ELEMENTS)


def _additive(bm: BlockMask, plan: list[Call], dtype: torch.dtype) -> list[Tensor | None]:
    """Each call's mask as ``0`` / ``-inf`` in ``dtype``; kept on the BlockMask when small."""
    return kept_masks(bm, ("runs-additive", dtype),
                      lambda: [None if a is None else neg_inf_where(~a, dtype) for *_, a in plan])


def _view(x: Tensor, b: int, start: int, step: int, length: int, n: int) -> Tensor:
    """``n`` windows of ``length`` positions from ``start`` every ``step`` of example ``b``, no copy.

    Shape:
        x ``(B, H, T, D)`` or ``(B, H, T)``; returns ``(n, H, length, D)`` or ``(n, H, length)``.
    """
    st = x.stride()
    return x.as_strided((n, x.shape[1], length, *x.shape[3:]), (step * st[2], st[1], *st[2:]),
                        x.storage_offset() + b * st[0] + start * st[2])


class _Runs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, plan: list[Call], masks: list[Tensor | None],
                scale: float) -> Tensor:
        b, h, tq, dh = q.shape
        out = torch.empty(b, tq, h, dh, dtype=q.dtype, device=q.device).transpose(1, 2)  # token-major
        lse = torch.empty(b, h, tq, dtype=torch.promote_types(q.dtype, torch.float32), device=q.device)
        for (q0, qs, lq, k0, ks, sk, n, _), m in zip(plan, masks, strict=True):
            for i in range(b):
                o, ls = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    _view(q, i, q0, qs, lq, n), _view(k, i, k0, ks, sk, n), _view(v, i, k0, ks, sk, n),
                    attn_mask=m, scale=scale)
                _view(out, i, q0, qs, lq, n).copy_(o)
                _view(lse, i, q0, qs, lq, n).copy_(ls)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (plan, masks, scale)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        plan, masks, scale = ctx.args
        if grad.stride(-1) != 1 or 0 in grad.stride():
            grad = grad.contiguous()  # the kernel reads any layout with unit-stride rows (token-major too)
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for (q0, qs, lq, k0, ks, sk, n, _), m in zip(plan, masks, strict=True):
            for i in range(q.shape[0]):
                gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    _view(grad, i, q0, qs, lq, n), _view(q, i, q0, qs, lq, n), _view(k, i, k0, ks, sk, n),
                    _view(v, i, k0, ks, sk, n), _view(out, i, q0, qs, lq, n), _view(lse, i, q0, qs, lq, n),
                    0.0, False, attn_mask=m, scale=scale)
                _view(dq, i, q0, qs, lq, n).copy_(gq)
                step = ks if n > 1 else sk
                for j in range(0, sk, step):  # overlapping windows added in non-overlapping strides
                    _view(dk, i, k0 + j, ks, step, n).add_(gk[:, :, j:j + step])
                    _view(dv, i, k0 + j, ks, step, n).add_(gv[:, :, j:j + step])
        return dq, dk, dv, None, None, None


def runs_attention(q: Tensor, k: Tensor, v: Tensor, bm: BlockMask, *, scale: float) -> Tensor:
    """Attention over ``bm``'s contiguous key runs as views; call only where :func:`usable` says so.

    Grouped-query keys and values (``Hkv`` dividing ``H``) go to torch's kernel as they are, no copy
    per query head, where that kernel takes them (:func:`native_gqa`).

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dh)``; returns ``(B, H, Tq, Dh)``.
    """
    plan = run_plan(bm)
    assert plan is not None
    if not native_gqa():
        k, v = expand_heads(q.shape[1], k, v)
    out: Tensor = _Runs.apply(q, k, v, plan, _additive(bm, plan, q.dtype), scale)
    return out
