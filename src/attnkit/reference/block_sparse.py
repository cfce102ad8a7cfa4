"""Block-sparse chunked attention in NumPy: the twin of attention over a torch ``BlockMask``.

A :class:`BlockLayout` holds what :class:`attnkit.core.block_mask.BlockMask`
records, as NumPy arrays: for every (query block, key block) pair its kind
(0 empty, 1 full, ``2 + i`` partial block ``i``) and the element masks of the
partial blocks (True = may attend). Build it from a torch ``BlockMask``
(:meth:`BlockLayout.from_arrays` with ``attnkit.core.kernels.tiles.block_kinds(bm)``
and ``bm.elements``) or from a mask mod written with element-wise operations
that NumPy arrays support (:func:`block_layout`, e.g. ``lambda b, h, q, k: k <= q``).

Each query block gathers only its non-empty key blocks; the softmax runs over
them, the element mask only where a block is partial. The forward keeps the
output and the row log-sum-exp ``L``; the backward recomputes each query
block's probabilities from ``L`` (as :mod:`attnkit.reference.chunked` does)::

    P = exp(S - L),  dV += P^T dO,  dS = P * (dO V^T - rowsum(dO * O)),
    dQ = scale dS K,  dK += scale dS^T Q

A query with no key gives zeros and zero gradients.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk lengths,
Dh/Dv head widths, bs block size, nQ/nK query/key blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from attnkit._checks import attention_scale
from attnkit.reference.attention import check_qkv
from attnkit.reference.module import check_positive

__all__ = ["BlockLayout", "block_layout", "block_sparse_forward", "block_sparse_backward"]

Array = np.ndarray


@dataclass(frozen=True)
class BlockLayout:
    """Per (query block, key block) kinds and the partial blocks' element masks.

    Attributes:
        block_size: rows and columns of a block.
        shape: ``(Tq, Tk)`` the layout is for.
        kinds: ``(Bm, Hm, nQ, nK)`` int, 0 empty, 1 full, ``2 + i`` partial
            block ``i``; ``Bm``/``Hm`` are 1 where the layout broadcasts.
        elements: ``(2 + P, bs, bs)`` bool: an empty block, a full block,
            then the ``P`` partial blocks' masks.

    Shape:
        see the attributes.
    """

    block_size: int
    shape: tuple[int, int]
    kinds: Array
    elements: Array

    @classmethod
    def from_arrays(cls, block_size: int, shape: tuple[int, int], kinds: Array, elements: Array) -> BlockLayout:
        """Check and wrap the arrays (e.g. a torch BlockMask's, through ``.numpy()``)."""
        bs = check_positive("block_size", block_size)
        tq, tk = shape
        kinds, elements = np.asarray(kinds), np.asarray(elements)
        want = (-(-tq // bs), -(-tk // bs))
        if kinds.ndim != 4 or kinds.shape[2:] != want or not np.issubdtype(kinds.dtype, np.integer):
            raise ValueError(f"kinds must be (Bm, Hm, nQ, nK) = (., ., {want[0]}, {want[1]}) integers for "
                             f"(Tq, Tk) = {shape} and block size {bs}, got {kinds.dtype} {kinds.shape}")
        if elements.dtype != np.bool_ or elements.ndim != 3 or elements.shape[1:] != (bs, bs):
            raise ValueError(f"elements must be (2 + P, {bs}, {bs}) bool, got {elements.dtype} {elements.shape}")
        if kinds.size and (kinds.min() < 0 or kinds.max() >= elements.shape[0]):
            raise ValueError(f"kinds must lie in [0, {elements.shape[0]}), got [{kinds.min()}, {kinds.max()}]")
        return cls(bs, (tq, tk), kinds, elements)

    def to_dense(self) -> Array:
        """The dense mask, True where a query may attend.

        Shape:
            returns ``(Bm, Hm, Tq, Tk)`` bool.
        """
        bm, hm, nq, nk = self.kinds.shape
        bs = self.block_size
        dense = self.elements[self.kinds].transpose(0, 1, 2, 4, 3, 5).reshape(bm, hm, nq * bs, nk * bs)
        return dense[:, :, : self.shape[0], : self.shape[1]]


def block_layout(mask_mod: Callable[[Array, Array, Array, Array], Array], B: int | None, H: int | None,
                 Tq: int, Tk: int, *, block_size: int = 128) -> BlockLayout:
    """Evaluate a NumPy-friendly mask mod and record its blocks, as ``create_block_mask`` does.

    Shape:
        ``mask_mod`` maps broadcast index arrays to a bool array of their shape.
    """
    b, h = B or 1, H or 1
    bs = check_positive("block_size", block_size)
    nq, nk = -(-Tq // bs), -(-Tk // bs)
    qi = np.arange(nq * bs).reshape(1, 1, -1, 1)
    ki = np.arange(nk * bs).reshape(1, 1, 1, -1)
    m = np.asarray(mask_mod(np.arange(b).reshape(-1, 1, 1, 1), np.arange(h).reshape(1, -1, 1, 1),
                            np.minimum(qi, Tq - 1), np.minimum(ki, Tk - 1)))
    if m.dtype != np.bool_:
        raise TypeError(f"mask_mod must return a bool array (True = may attend), got {m.dtype}")
    m = np.broadcast_to(m, (b, h, nq * bs, nk * bs)) & (qi < Tq) & (ki < Tk)
    blocks = m.reshape(b, h, nq, bs, nk, bs).transpose(0, 1, 2, 4, 3, 5)  # (B, H, nQ, nK, bs, bs)
    any_, all_ = blocks.any(axis=(4, 5)), blocks.all(axis=(4, 5))
    part = any_ & ~all_
    kinds: Array = np.asarray(all_, dtype=np.int64)
    kinds[part] = 2 + np.arange(int(part.sum()))
    elements = np.concatenate([np.zeros((1, bs, bs), bool), np.ones((1, bs, bs), bool), blocks[part]])
    return BlockLayout.from_arrays(bs, (Tq, Tk), kinds, elements)


def _query_blocks(layout: BlockLayout, b: int, h: int, tk: int) -> Iterator[tuple[slice, Array, Array | None]]:
    """For one (b, h): per query block, its rows, key indices and element mask (None: all allowed)."""
    kinds = layout.kinds[b % layout.kinds.shape[0], h % layout.kinds.shape[1]]  # (nQ, nK)
    bs = layout.block_size
    for i in range(kinds.shape[0]):
        js = np.nonzero(kinds[i])[0]
        if js.size == 0:
            continue  # an empty row of blocks: skipped, its output stays zero
        keys = (js[:, None] * bs + np.arange(bs)).reshape(-1)
        keep = keys < tk
        allowed = None
        if not np.all(kinds[i, js] == 1):
            allowed = layout.elements[kinds[i, js]].transpose(1, 0, 2).reshape(bs, -1)[:, keep]
        rows = slice(i * bs, min((i + 1) * bs, layout.shape[0]))
        yield rows, keys[keep], None if allowed is None else allowed[: rows.stop - rows.start]


def _check(q: Array, k: Array, v: Array, layout: BlockLayout, scale: float | None) -> float:
    check_qkv(q, k, v)
    if not isinstance(layout, BlockLayout):
        raise TypeError(f"layout must be a BlockLayout, got {type(layout).__name__}")
    b, h, tq, dh = q.shape
    bm, hm = layout.kinds.shape[:2]
    if layout.shape != (tq, k.shape[2]) or bm not in (1, b) or hm not in (1, h):
        raise ValueError(f"BlockLayout for (Bm, Hm, Tq, Tk) = {(bm, hm, *layout.shape)} cannot be used with "
                         f"(B, H, Tq, Tk) = {(b, h, tq, k.shape[2])}")
    return attention_scale(scale, dh)


def block_sparse_forward(q: Array, k: Array, v: Array, layout: BlockLayout, *, scale: float | None = None
                         ) -> tuple[Array, Array]:
    """Attention over the non-empty blocks of ``layout``; returns ``(out, lse)``, lse ``+inf`` on empty rows.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        out ``(B, H, Tq, Dv)``, lse ``(B, H, Tq)``.
    """
    scale_f = _check(q, k, v, layout, scale)
    bsz, heads, tq, _ = q.shape
    group = heads // k.shape[1]
    out = np.zeros((bsz, heads, tq, v.shape[-1]), dtype=q.dtype)
    lse = np.full((bsz, heads, tq), np.inf, dtype=q.dtype)
    for b in range(bsz):
        for h in range(heads):
            kh, vh = k[b, h // group], v[b, h // group]
            for rows, keys, allowed in _query_blocks(layout, b, h, k.shape[2]):
                s = (q[b, h, rows] * q.dtype.type(scale_f)) @ kh[keys].T  # (bs, K*bs)
                if allowed is not None:
                    s = np.where(allowed, s, -np.inf)
                m = s.max(axis=1, keepdims=True)
                ok = np.isfinite(m)
                p = np.exp(s - np.where(ok, m, 0.0))
                total = p.sum(axis=1, keepdims=True)
                safe = np.where(ok, total, 1.0)
                out[b, h, rows] = np.where(ok, (p @ vh[keys]) / safe, 0.0)
                lse[b, h, rows] = np.where(ok, m + np.log(safe), np.inf)[:, 0]
    return out, lse


def block_sparse_backward(grad: Array, q: Array, k: Array, v: Array, out: Array, lse: Array,
                          layout: BlockLayout, *, scale: float | None = None) -> tuple[Array, Array, Array]:
    """Gradients ``(dq, dk, dv)`` recomputed per query block from ``out`` and ``lse``.

    Shape:
        grad and out ``(B, H, Tq, Dv)``, lse ``(B, H, Tq)``; returns the shapes of q, k and v.
    """
    scale_f = _check(q, k, v, layout, scale)
    bsz, heads = q.shape[:2]
    group = heads // k.shape[1]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    delta = np.sum(grad * out, axis=-1)  # (B, H, Tq)
    for b in range(bsz):
        for h in range(heads):
            hk = h // group
            kh, vh = k[b, hk], v[b, hk]
            for rows, keys, allowed in _query_blocks(layout, b, h, k.shape[2]):
                qb, gb = q[b, h, rows], grad[b, h, rows]
                s = (qb * q.dtype.type(scale_f)) @ kh[keys].T
                if allowed is not None:
                    s = np.where(allowed, s, -np.inf)
                p = np.exp(s - lse[b, h, rows][:, None])  # 0 where blocked or on rows without a key
                dv[b, hk, keys] += p.T @ gb  # a query block's keys are distinct
                ds = p * (gb @ vh[keys].T - delta[b, h, rows][:, None])
                dq[b, h, rows] += (ds @ kh[keys]) * scale_f
                dk[b, hk, keys] += (ds.T @ qb) * scale_f
    return dq, dk, dv
