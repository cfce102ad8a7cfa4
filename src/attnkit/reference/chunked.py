"""Chunked attention with an online softmax, forward and backward (FlashAttention style).

The ``(Tq, Tk)`` score matrix is never stored. Queries go through in blocks of
``block_q``; for each block the keys stream by in blocks of ``block_k`` and a
running maximum ``m``, running sum ``l`` and running output ``acc`` are
rescaled as each key block arrives (Milakov & Gimelshein, 2018; Dao et al., 2022)::

    m' = max(m, rowmax S_j),   P_j = exp(S_j - m'),   alpha = exp(m - m')
    l' = alpha l + rowsum P_j,  acc' = alpha acc + P_j V_j,   O = acc / l

The forward keeps only ``O`` and the row log-sum-exp ``L = m + log l``. The
backward recomputes each block's probabilities from ``L`` (``P = exp(S - L)``)
and, with ``D = rowsum(dO * O)``::

    dV_j += P^T dO,  dP = dO V_j^T,  dS = P * (dP - D),
    dQ += scale dS K_j,  dK_j += scale dS^T Q

so extra memory is ``O(block_q * block_k)`` plus ``O(T)``: linear in the length.
Rows with no key (``l = 0``) give zeros and zero gradients, as in the plain
path. Mask, bias and causal rules are those of
:func:`attnkit.reference.attention.attention_forward`: an additive ``bias``
(ALiBi, relative positions) is read tile by tile from a broadcast view, and its
gradient ``dbias = dS`` is summed tile by tile into the bias's own shape.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk lengths, Dh/Dv head widths.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from attnkit._checks import attention_scale
from attnkit.reference.attention import check_qkv
from attnkit.reference.block_sparse import BlockLayout, block_sparse_backward, block_sparse_forward
from attnkit.reference.functional import check_bias, check_mask
from attnkit.reference.module import Module, check_positive

__all__ = ["chunked_attention_forward", "chunked_attention_backward", "ChunkedAttention"]

Array = np.ndarray


def _block_mask(mask4: Array | None, causal: bool, b: int, h: int, qs: slice, ks: slice,
                offset: int) -> Array | None:
    """The allowed entries of one (query block, key block) tile, or None when all are allowed."""
    allowed = None if mask4 is None else mask4[b, h, qs, ks]  # (bq, bk) view
    if causal:
        i = np.arange(qs.start, qs.stop)[:, None]
        j = np.arange(ks.start, ks.stop)[None, :]
        if ks.stop - 1 > qs.start + offset:  # some entry of the tile lies above the diagonal
            tri = j <= i + offset
            allowed = tri if allowed is None else allowed & tri
    return allowed


def _prepare(q: Array, k: Array, v: Array, mask: Array | None, bias: Array | None, scale: float | None,
             block_q: int, block_k: int) -> tuple[Array | None, Array | None, float]:
    check_qkv(q, k, v)
    check_positive("block_q", block_q)
    check_positive("block_k", block_k)
    b, h, tq, dh = q.shape
    target = (b, h, tq, k.shape[2])
    mask4 = bias4 = None
    if mask is not None:
        check_mask(mask, target)
        mask4 = np.broadcast_to(mask, target)  # a view: no (Tq, Tk) copy is made
    if bias is not None:
        check_bias(bias, target)
        bias4 = np.broadcast_to(bias, target)
    return mask4, bias4, attention_scale(scale, dh)


_BAND = 60.0  # |logit| below this: exp() neither overflows nor underflows a whole row in float32


def _forward_head(q: Array, kh: Array, v1: Array, out: Array, lse: Array, mask4: Array | None,
                  bias4: Array | None, causal: bool, scale: float, b: int, h: int, block_q: int,
                  block_k: int) -> None:
    """One (batch, head): fill ``out[b, h]`` and ``lse[b, h]``; ``v1`` is ``[V | 1]``."""
    tq, tk, dv = q.shape[2], kh.shape[0], v1.shape[1] - 1
    offset = tk - tq
    for q0 in range(0, tq, block_q):
        qs = slice(q0, min(q0 + block_q, tq))
        qb = q[b, h, qs] * q.dtype.type(scale)  # (bq, Dh)
        m = np.full((qb.shape[0], 1), -np.inf, dtype=q.dtype)  # running shift
        acc = np.zeros((qb.shape[0], dv + 1), dtype=q.dtype)  # [running output | running sum]
        # causal: keys past the block's last query never count
        k_end = min(tk, qs.stop + offset) if causal else tk
        for k0 in range(0, max(k_end, 0), block_k):
            ks = slice(k0, min(k0 + block_k, k_end))
            s = qb @ kh[ks].T  # (bq, bk)
            if bias4 is not None:
                s += bias4[b, h, qs, ks]
            allowed = _block_mask(mask4, causal, b, h, qs, ks, offset)
            if allowed is not None:
                np.putmask(s, ~allowed, -np.inf)
            row_max = s.max(axis=1, keepdims=True)
            if np.all(np.abs(row_max) <= _BAND) and np.all((m == 0) | (m == -np.inf)):
                # Any shift works as long as exp() stays finite and nonzero; with small
                # logits the shift 0 saves a pass over the tile.
                m_new = np.zeros_like(m)
            else:
                m_new = np.maximum(m, row_max)
                m_new = np.where(np.isfinite(m_new), m_new, 0.0).astype(q.dtype)
                np.subtract(s, m_new, out=s)
            np.exp(s, out=s)  # P_j * exp(-shift), zero where masked
            if k0:
                acc *= np.exp(m - m_new)  # 0 while m is -inf
            acc += s @ v1[ks]
            m = m_new
        row_sum = acc[:, dv:]
        ok = row_sum > 0
        out[b, h, qs] = acc[:, :dv] / np.where(ok, row_sum, 1.0)
        lse[b, h, qs] = np.where(ok, m + np.log(np.where(ok, row_sum, 1.0)), np.inf)[:, 0]


def chunked_attention_forward(
    q: Array, k: Array, v: Array, *, mask: Array | None = None, bias: Array | None = None,
    causal: bool = False, scale: float | None = None, block_q: int = 256, block_k: int = 4096,
    workers: int = 1, blocks: BlockLayout | None = None,
) -> tuple[Array, Array]:
    """Attention output and row log-sum-exp, computed tile by tile.

    Returns ``(out, lse)``; ``lse`` is ``+inf`` on rows with no key. The running
    shift is the row maximum, or 0 while every logit stays in ``[-60, 60]``
    (the online softmax is exact for any shift that keeps ``exp`` finite).
    ``workers > 1`` spreads the (batch, head) pairs over threads (NumPy and
    BLAS release the GIL), useful with a single-threaded BLAS. ``blocks`` (a
    :class:`~attnkit.reference.block_sparse.BlockLayout`, instead of mask,
    bias and causal) computes only its non-empty blocks, one query block at a time.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        out ``(B, H, Tq, Dv)``, lse ``(B, H, Tq)``.
    """
    if blocks is not None:
        _only_blocks(mask, bias, causal)
        return block_sparse_forward(q, k, v, blocks, scale=scale)
    mask4, bias4, scale_f = _prepare(q, k, v, mask, bias, scale, block_q, block_k)
    check_positive("workers", workers)
    bsz, heads, tq, _ = q.shape
    hkv, tk, dv = k.shape[1], k.shape[2], v.shape[-1]
    group = heads // hkv
    out = np.empty((bsz, heads, tq, dv), dtype=q.dtype)
    lse = np.empty((bsz, heads, tq), dtype=q.dtype)
    ones = np.ones((tk, 1), dtype=v.dtype)

    def run(bh: tuple[int, int]) -> None:
        b, h = bh
        # A column of ones after V makes P_j @ [V | 1] return the row sums with the
        # output, saving one pass over each tile.
        v1 = np.concatenate([v[b, h // group], ones], axis=1)  # (Tk, Dv+1)
        _forward_head(q, k[b, h // group], v1, out, lse, mask4, bias4, causal, scale_f, b, h, block_q, block_k)

    pairs = [(b, h) for b in range(bsz) for h in range(heads)]
    if workers == 1:
        for bh in pairs:
            run(bh)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(run, pairs))
    return out, lse


def chunked_attention_backward(
    grad: Array, q: Array, k: Array, v: Array, out: Array, lse: Array, *,
    mask: Array | None = None, bias: Array | None = None, causal: bool = False,
    scale: float | None = None, block_q: int = 256, block_k: int = 4096, blocks: BlockLayout | None = None,
) -> tuple[Array, Array, Array, Array | None]:
    """Gradients ``(dq, dk, dv, dbias)`` recomputed tile by tile from ``out`` and ``lse``.

    Pass the ``mask``, ``bias``, ``causal``, ``scale`` and ``blocks`` of the forward call.
    ``dbias`` has the shape of ``bias`` (summed over its broadcast axes), or
    is ``None`` without a bias, as in :func:`~attnkit.reference.attention.attention_backward`.

    Shape:
        grad and out ``(B, H, Tq, Dv)``, lse ``(B, H, Tq)``; returns the shapes
        of q, k, v and bias.
    """
    if blocks is not None:
        _only_blocks(mask, bias, causal)
        return (*block_sparse_backward(grad, q, k, v, out, lse, blocks, scale=scale), None)
    mask4, bias4, scale_f = _prepare(q, k, v, mask, bias, scale, block_q, block_k)
    dbias4 = None
    if bias is not None:
        shape4 = (1,) * (4 - bias.ndim) + bias.shape
        dbias4 = np.zeros(shape4, dtype=np.result_type(bias.dtype, q.dtype))
    bsz, heads, tq, _ = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group, offset = heads // hkv, tk - tq
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    delta = np.sum(grad * out, axis=-1)  # (B, H, Tq)
    for b in range(bsz):
        for h in range(heads):
            hk = h // group
            kh, vh = k[b, hk], v[b, hk]
            for q0 in range(0, tq, block_q):
                qs = slice(q0, min(q0 + block_q, tq))
                qb = q[b, h, qs]  # (bq, Dh)
                gb = grad[b, h, qs]  # (bq, Dv)
                lb = lse[b, h, qs][:, None]  # (bq, 1)
                db = delta[b, h, qs][:, None]
                k_end = min(tk, qs.stop + offset) if causal else tk
                for k0 in range(0, max(k_end, 0), block_k):
                    ks = slice(k0, min(k0 + block_k, k_end))
                    s = (qb * q.dtype.type(scale_f)) @ kh[ks].T  # (bq, bk)
                    if bias4 is not None:
                        s += bias4[b, h, qs, ks]
                    allowed = _block_mask(mask4, causal, b, h, qs, ks, offset)
                    if allowed is not None:
                        np.putmask(s, ~allowed, -np.inf)
                    np.subtract(s, lb, out=s)
                    p = np.exp(s, out=s)  # exactly 0 where masked or on empty rows (lse = +inf)
                    dv[b, hk, ks] += p.T @ gb
                    dp = gb @ vh[ks].T  # (bq, bk)
                    dp -= db
                    dp *= p  # dS
                    dq[b, h, qs] += (dp @ kh[ks]) * scale_f
                    dk[b, hk, ks] += (dp.T @ qb) * scale_f
                    if dbias4 is not None:
                        _add_bias_grad(dbias4, dp, b, h, qs, ks)
    dbias = None if dbias4 is None or bias is None else dbias4.reshape(bias.shape)
    return dq, dk, dv, dbias


def _only_blocks(mask: Array | None, bias: Array | None, causal: bool) -> None:
    if mask is not None or bias is not None or causal:
        raise ValueError("blocks= takes neither mask=, bias= nor causal=True: build them into the BlockLayout")


def _add_bias_grad(dbias4: Array, ds: Array, b: int, h: int, qs: slice, ks: slice) -> None:
    """Add one tile's ``dS`` into the bias gradient, summing over the bias's broadcast axes."""
    _, _, n_q, n_k = dbias4.shape
    if n_q == 1:
        ds, qs = ds.sum(axis=0, keepdims=True), slice(0, 1)
    if n_k == 1:
        ds, ks = ds.sum(axis=1, keepdims=True), slice(0, 1)
    dbias4[b if dbias4.shape[0] > 1 else 0, h if dbias4.shape[1] > 1 else 0, qs, ks] += ds


class ChunkedAttention(Module):
    """Chunked attention as a layer: ``forward(q, k, v, ...)``, ``backward(grad) -> (dq, dk, dv)``.

    Keeps ``q, k, v``, the output and the log-sum-exp for the backward pass:
    memory linear in the sequence length (plus the bias, when one is passed).
    The bias gradient of the last backward, if a bias was passed, is kept in
    ``bias_grad``.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        output ``(B, H, Tq, Dv)``.
    """

    def __init__(self, block_q: int = 256, block_k: int = 4096) -> None:
        super().__init__()
        self.block_q = check_positive("block_q", block_q)
        self.block_k = check_positive("block_k", block_k)
        self.bias_grad: Array | None = None

    def forward(self, q: Array, k: Array, v: Array, *, mask: Array | None = None,
                bias: Array | None = None, causal: bool = False, scale: float | None = None,
                blocks: BlockLayout | None = None) -> Array:
        out, lse = chunked_attention_forward(
            q, k, v, mask=mask, bias=bias, causal=causal, scale=scale, block_q=self.block_q,
            block_k=self.block_k, blocks=blocks,
        )
        self._saved = (q, k, v, out, lse, mask, bias, causal, scale, blocks)
        return out

    def backward(self, grad: Array) -> tuple[Array, Array, Array]:
        q, k, v, out, lse, mask, bias, causal, scale, blocks = self._saved
        dq, dk, dv, self.bias_grad = chunked_attention_backward(
            grad, q, k, v, out, lse, mask=mask, bias=bias, causal=causal, scale=scale,
            block_q=self.block_q, block_k=self.block_k, blocks=blocks,
        )
        return dq, dk, dv
