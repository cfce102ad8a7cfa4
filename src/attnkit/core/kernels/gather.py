"""Block-sparse attention by gathering: the kernel for any :class:`~attnkit.core.block_mask.BlockMask`.

With a ``BlockMask`` the queries are cut into blocks
of ``block_size`` rows; each query block gathers only its non-empty key and
value blocks, the element mask is applied only where a block is partial, and
the ``(Tq, Tk)`` scores are never built. Backward runs through autograd over
the same gathered blocks. A ``score_mod(score, b, h, q_idx, kv_idx) -> score``
rewrites the scaled logits (ALiBi, relative-position bias, soft-capping)
before the mask and the softmax; its index tensors broadcast against
``score``. Softmax runs in float32; a query with no key gives zeros.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width, Dv value head width, bs block size, nQ/nK query/key
blocks, K key blocks computed per query block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.block_mask import BlockMask
from attnkit.core.kernels.dense import HALF, apply_dropout, expand_heads, zero_rows
from attnkit.core.kernels.runs import kept_masks, neg_inf_where
from attnkit.core.score_mods import apply_score_mod
from attnkit.core.types import ScoreMod

__all__ = ["block_sparse_attention"]


def _gather_blocks(x: Tensor, idx: Tensor, bs: int, query_major: bool = False) -> Tensor:
    """The key or value blocks each query block computes.

    One row lookup per block (``F.embedding`` over the ``(B * Hx * nK, bs * D)``
    rows): its backward sums the gradients of repeated blocks in one pass, where
    ``index_select`` along the block axis copies element by element.

    Shape:
        x ``(B, Hx, nK * bs, D)``, idx ``(Bm, Hm, nQ, K)`` with Hm in {1, Hx};
        returns ``(B, Hx, nQ, K * bs, D)``, or ``(B, nQ, Hx, K * bs, D)`` with ``query_major``.
    """
    b, hx, t, d = x.shape
    nq, k = idx.shape[2], idx.shape[3]
    nk = t // bs
    rows = torch.arange(b * hx, device=x.device).view(b, hx, 1, 1) * nk + idx  # (B, Hx, nQ, K)
    if query_major:
        rows = rows.transpose(1, 2)  # (B, nQ, Hx, K)
    out = F.embedding(rows.reshape(-1), x.reshape(b * hx * nk, bs * d))  # (B * Hx * nQ * K, bs * D)
    return out.view(b, nq, hx, k * bs, d) if query_major else out.view(b, hx, nq, k * bs, d)


def _pad_to(x: Tensor, length: int) -> Tensor:
    return x if x.shape[2] == length else F.pad(x, (0, 0, 0, length - x.shape[2]))


def _score_index(bm: BlockMask, b: int, h: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The index tensors a score_mod sees on the gathered blocks, each within ``[0, T)``.

    Positions past ``Tq`` or ``Tk`` (the padding of the last blocks) are masked or cut off
    afterwards; they are given the last valid index, so a score_mod that reads a length-T
    tensor never indexes past its end.
    """
    bs = bm.block_size
    nq = bm.kv_indices.shape[2]
    dev = bm.device
    ar = torch.arange(bs, device=dev)
    tq, tk = bm.shape[2], bm.shape[3]
    q_idx = (torch.arange(nq, device=dev)[:, None] * bs + ar).clamp(max=tq - 1).view(1, 1, nq, bs, 1)
    kv_idx = (bm.kv_indices[..., None] * bs + ar).clamp(max=tk - 1).flatten(-2)[:, :, :, None, :]
    return (torch.arange(b, device=dev).view(b, 1, 1, 1, 1), torch.arange(h, device=dev).view(1, h, 1, 1, 1),
            q_idx, kv_idx)


def _pad_tokens(x: Tensor, length: int) -> Tensor:
    """``(B, T, H, D)`` padded with zeros to ``length`` tokens (no copy when it has them)."""
    return x if x.shape[1] == length else F.pad(x, (0, 0, 0, 0, 0, length - x.shape[1]))


def _token_blocks(x: Tensor, rows: Tensor, bs: int, nk: int) -> Tensor:
    """Key or value blocks gathered in token-major memory, the layout split heads already have.

    Shape:
        x ``(B, Hx, Tk, D)``, rows ``(B * nQ * K,)`` into the ``B * nK`` blocks; returns
        ``(B * nQ * K, bs * Hx * D)``, each row one block's ``(bs, Hx, D)``.
    """
    b, hx, _, d = x.shape
    xt = _pad_tokens(x.transpose(1, 2), nk * bs)  # (B, nK*bs, Hx, D)
    tokens = (rows[:, None] * bs + torch.arange(bs, device=x.device)).reshape(-1)  # one row per token
    return F.embedding(tokens, xt.reshape(b * nk * bs, hx * d)).view(-1, bs * hx * d)


def _fused_blocks(q: Tensor, k: Tensor, v: Tensor, bm: BlockMask, scale: float, dropout: float) -> Tensor:
    """The gathered blocks through torch's fused kernel, one query block per batch row.

    With one block structure for every head, the blocks are gathered token-major
    (``(B, T, H, D)`` memory, free for split heads), so neither the inputs, the
    output nor the kernel's gradients are copied into another layout.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``; returns ``(B, H, Tq, Dv)``.
    """
    b, h, tq, dh = q.shape
    hkv, tk, dv = k.shape[1], k.shape[2], v.shape[-1]
    bs, (_, bmh, nq, nkb) = bm.block_size, bm.kv_indices.shape
    nk = -(-tk // bs)
    if bmh != 1:  # per-head block structure: every query head gathers its own keys
        (k, v), hkv = expand_heads(h, k, v), h
    fill, row_ok = bm.kept_mask()  # (Bm, Hm, nQ, bs, K*bs), (Bm, Hm, nQ, bs, 1)
    attn_mask = None
    if fill is not None:  # additive, in q's dtype; kept on the BlockMask when small (sparse masks)
        def additive() -> list[Tensor | None]:
            add = neg_inf_where(fill, q.dtype).transpose(1, 2)
            return [add.expand(b, nq, bmh, bs, nkb * bs).reshape(b * nq, bmh, bs, -1)]
        attn_mask = kept_masks(bm, ("sdpa", b, q.dtype), additive)[0]
    if bmh == 1:
        rows = (torch.arange(b, device=q.device).view(b, 1, 1) * nk + bm.kv_indices[:, 0]).reshape(-1)
        kg = _token_blocks(k, rows, bs, nk).view(b * nq, nkb * bs, hkv, dh).transpose(1, 2)
        vg = _token_blocks(v, rows, bs, nk).view(b * nq, nkb * bs, hkv, dv).transpose(1, 2)
        qt = _pad_tokens(q.transpose(1, 2), nq * bs)  # (B, nQ*bs, H, Dh)
        qb = qt.reshape(b * nq, bs, h, dh).transpose(1, 2)  # (B*nQ, H, bs, Dh)
    else:
        kg = _gather_blocks(_pad_to(k, nk * bs), bm.kv_indices, bs, True).flatten(0, 1)  # (B*nQ, Hkv, K*bs, Dh)
        vg = _gather_blocks(_pad_to(v, nk * bs), bm.kv_indices, bs, True).flatten(0, 1)  # (B*nQ, Hkv, K*bs, Dv)
        qb = _pad_to(q, nq * bs).view(b, h, nq, bs, dh).transpose(1, 2).reshape(b * nq, h, bs, dh)
    out = F.scaled_dot_product_attention(
        qb, kg, vg, attn_mask=attn_mask, dropout_p=dropout, scale=scale, enable_gqa=hkv != h,
    ).transpose(1, 2).reshape(b, nq, bs, h, dv)  # (B, nQ, bs, H, Dv)
    if row_ok is not None:
        out = out.masked_fill(~row_ok.permute(0, 2, 3, 1, 4), 0.0)  # (Bm, nQ, bs, Hm, 1)
    return out.reshape(b, nq * bs, h, dv)[:, :tq].transpose(1, 2)  # (B, H, Tq, Dv)


def block_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, bm: BlockMask, *, scale: float, score_mod: ScoreMod | None = None,
    dropout: float = 0.0, return_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention over the non-empty blocks of ``bm`` only; ``(output, dense weights or None)``.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        output ``(B, H, Tq, Dv)``; weights ``(B, H, Tq, Tk)``.
    """
    if score_mod is None and not return_weights:
        return _fused_blocks(q, k, v, bm, scale, dropout), None
    b, h, tq, dh = q.shape
    hkv, tk, dv = k.shape[1], k.shape[2], v.shape[-1]
    bs, (_, bmh, nq, nkb) = bm.block_size, bm.kv_indices.shape
    nk = -(-tk // bs)
    if bmh != 1:  # per-head block structure: every query head gathers its own keys
        (k, v), hkv = expand_heads(h, k, v), h
    group = h // hkv
    qf, kf = (q.float(), k.float()) if q.dtype in HALF else (q, k)
    kg = _gather_blocks(_pad_to(kf, nk * bs), bm.kv_indices, bs)  # (B, Hkv, nQ, K*bs, Dh)
    vg = _gather_blocks(_pad_to(v, nk * bs), bm.kv_indices, bs)  # (B, Hkv, nQ, K*bs, Dv)
    qb = (_pad_to(qf, nq * bs) * scale).view(b, hkv, group, nq, bs, dh)  # (B, Hkv, G, nQ, bs, Dh)
    if group == 1:  # a plain batched matmul: its backward needs no copy of the gradient
        scores = qb.squeeze(2) @ kg.transpose(-1, -2)  # (B, H, nQ, bs, K*bs)
    else:
        scores = (qb @ kg.unsqueeze(2).transpose(-1, -2)).view(b, h, nq, bs, nkb * bs)
    if score_mod is not None:
        scores = apply_score_mod(score_mod, scores, _score_index(bm, b, h))
    fill, row_ok = bm.kept_mask()  # (Bm, Hm, nQ, bs, K*bs), (Bm, Hm, nQ, bs, 1)
    # rows without a key stay open (no NaN forward or backward); their output is zeroed below
    weights = torch.softmax(scores if fill is None else scores.masked_fill(fill, float("-inf")), dim=-1)
    dropped = apply_dropout(weights, dropout)
    if group == 1:
        out = dropped.to(v.dtype) @ vg  # (B, H, nQ, bs, Dv)
    else:
        wg = dropped.to(v.dtype).view(b, hkv, group, nq, bs, nkb * bs)
        out = (wg @ vg.unsqueeze(2)).view(b, h, nq, bs, dv)
    out = zero_rows(out, row_ok).view(b, h, nq * bs, dv)[:, :, :tq]  # (B, H, Tq, Dv)
    if not return_weights:
        return out, None
    blocks = zero_rows(weights, row_ok).view(b, h, nq, bs, nkb, bs)
    index = bm.kv_indices[:, :, :, None, :, None].expand(b, h, nq, bs, nkb, bs)
    dense = torch.zeros(b, h, nq, bs, nk, bs, dtype=weights.dtype, device=q.device)
    dense = dense.scatter_add(4, index, blocks)  # padding blocks hold zeros
    return out, dense.view(b, h, nq * bs, nk * bs)[:, :, :tq, :tk].to(q.dtype)
