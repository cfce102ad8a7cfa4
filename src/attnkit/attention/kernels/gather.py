"""Programmable attention: the block-sparse path for a :class:`~attnkit.block_mask.BlockMask`,
and ``score_mod`` on it or on the readable path.

:func:`attnkit.attention` sends here a call whose mask is a ``BlockMask`` or
that has a ``score_mod``. With a ``BlockMask`` the queries are cut into blocks
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

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit import block_runs as _runs
from attnkit import masks as _masks
from attnkit import tiled_attention as _tiled
from attnkit.block_mask import BlockMask

__all__ = ["ScoreMod", "MaskArg", "dispatch", "block_sparse_attention", "dense_attention"]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled logits."""
MaskArg = Tensor | BlockMask | None
"""What ``attention(mask=...)`` takes: a bool tensor, a BlockMask or ``None``."""
_HALF = (torch.float16, torch.bfloat16)


def _softmax(scores: Tensor, fill: Tensor | None) -> Tensor:
    """Softmax with the ``fill`` entries at ``-inf``; ``fill`` leaves rows without a key open.

    Those rows (no NaN forward or backward) are zeroed by the caller, on the
    output, which zeroes their gradients too.
    """
    return torch.softmax(scores if fill is None else scores.masked_fill(fill, float("-inf")), dim=-1)


def _zero_rows(x: Tensor, row_ok: Tensor | None) -> Tensor:
    return x if row_ok is None else x.masked_fill(~row_ok, 0.0)


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
    if bmh != 1 and hkv != h:
        k, v = k.repeat_interleave(h // hkv, dim=1), v.repeat_interleave(h // hkv, dim=1)
        hkv = h
    fill, row_ok = bm.kept_mask()  # (Bm, Hm, nQ, bs, K*bs), (Bm, Hm, nQ, bs, 1)
    attn_mask = None
    if fill is not None:  # additive, in q's dtype; kept on the BlockMask when small (sparse masks)
        def additive() -> list[Tensor | None]:
            add = _runs.neg_inf_where(fill, q.dtype).transpose(1, 2)
            return [add.expand(b, nq, bmh, bs, nkb * bs).reshape(b * nq, bmh, bs, -1)]
        attn_mask = _runs.kept_masks(bm, ("sdpa", b, q.dtype), additive)[0]
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
    if bmh != 1 and hkv != h:  # per-head block structure: every query head gathers its own keys
        k, v = k.repeat_interleave(h // hkv, dim=1), v.repeat_interleave(h // hkv, dim=1)
        hkv = h
    group = h // hkv
    qf, kf = (q.float(), k.float()) if q.dtype in _HALF else (q, k)
    kg = _gather_blocks(_pad_to(kf, nk * bs), bm.kv_indices, bs)  # (B, Hkv, nQ, K*bs, Dh)
    vg = _gather_blocks(_pad_to(v, nk * bs), bm.kv_indices, bs)  # (B, Hkv, nQ, K*bs, Dv)
    qb = (_pad_to(qf, nq * bs) * scale).view(b, hkv, group, nq, bs, dh)  # (B, Hkv, G, nQ, bs, Dh)
    if group == 1:  # a plain batched matmul: its backward needs no copy of the gradient
        scores = qb.squeeze(2) @ kg.transpose(-1, -2)  # (B, H, nQ, bs, K*bs)
    else:
        scores = (qb @ kg.unsqueeze(2).transpose(-1, -2)).view(b, h, nq, bs, nkb * bs)
    if score_mod is not None:
        scores = _tiled.apply_score_mod(score_mod, scores, _score_index(bm, b, h))
    fill, row_ok = bm.kept_mask()  # (Bm, Hm, nQ, bs, K*bs), (Bm, Hm, nQ, bs, 1)
    weights = _softmax(scores, fill)  # (B, H, nQ, bs, K*bs), float32
    dropped = F.dropout(weights, p=dropout, training=True) if dropout > 0.0 else weights
    if group == 1:
        out = dropped.to(v.dtype) @ vg  # (B, H, nQ, bs, Dv)
    else:
        wg = dropped.to(v.dtype).view(b, hkv, group, nq, bs, nkb * bs)
        out = (wg @ vg.unsqueeze(2)).view(b, h, nq, bs, dv)
    out = _zero_rows(out, row_ok).view(b, h, nq * bs, dv)[:, :, :tq]  # (B, H, Tq, Dv)
    if not return_weights:
        return out, None
    blocks = _zero_rows(weights, row_ok).view(b, h, nq, bs, nkb, bs)
    index = bm.kv_indices[:, :, :, None, :, None].expand(b, h, nq, bs, nkb, bs)
    dense = torch.zeros(b, h, nq, bs, nk, bs, dtype=weights.dtype, device=q.device)
    dense = dense.scatter_add(4, index, blocks)  # padding blocks hold zeros
    return out, dense.view(b, h, nq * bs, nk * bs)[:, :, :tq, :tk].to(q.dtype)


def dense_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, bias: Tensor | None, causal: bool,
    scale: float, score_mod: ScoreMod | None, dropout: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """The readable path with a ``score_mod``: the full ``(Tq, Tk)`` scores; ``(output, weights)``.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        output ``(B, H, Tq, Dv)``; weights ``(B, H, Tq, Tk)``.
    """
    b, h, tq, dh = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    qf, kf = (q.float(), k.float()) if q.dtype in _HALF else (q, k)
    qg = (qf * scale).view(b, hkv, h // hkv, tq, dh)  # (B, Hkv, G, Tq, Dh)
    scores = (qg @ kf.unsqueeze(2).transpose(-1, -2)).view(b, h, tq, tk)  # (B, H, Tq, Tk)
    if bias is not None:
        scores = scores + bias.float()
    if score_mod is not None:
        dev = q.device
        idx = (torch.arange(b, device=dev).view(b, 1, 1, 1), torch.arange(h, device=dev).view(1, h, 1, 1),
               torch.arange(tq, device=dev).view(1, 1, tq, 1), torch.arange(tk, device=dev).view(1, 1, 1, tk))
        scores = _tiled.apply_score_mod(score_mod, scores, idx)
    if causal:
        mask = _masks.combine(mask, _masks.causal(tq, tk, device=q.device))
    row_ok = _masks.rows_with_keys(mask) if mask is not None else None  # (..., Tq, 1)
    fill = None if mask is None or row_ok is None else ~mask & row_ok
    weights = _zero_rows(_softmax(scores, fill), row_ok)  # (B, H, Tq, Tk), float32
    dropped = F.dropout(weights, p=dropout, training=True) if dropout > 0.0 else weights
    wg = dropped.to(v.dtype).view(b, hkv, h // hkv, tq, tk)
    out = (wg @ v.unsqueeze(2)).view(b, h, tq, v.shape[-1])  # (B, H, Tq, Dv)
    return out, weights.to(q.dtype)


def _tiles_apply(q: Tensor, score_mod: ScoreMod | None, dropout: float, return_weights: bool) -> bool:
    """Whether a score_mod call runs in query tiles (:mod:`attnkit.tiled_attention`).

    Not with dropout or weights asked for, nor when the score_mod mixes in a
    tensor that needs a gradient: those take the blocks through autograd. Nor
    in a compiled graph: the tiles' custom backward is eager code, and the
    compiler fuses the autograd path's score_mod itself.
    """
    return (score_mod is not None and dropout == 0.0 and not return_weights
            and not torch.compiler.is_compiling()
            and not _tiled.captures_gradients(score_mod, q.device))


def dispatch(
    q: Tensor, k: Tensor, v: Tensor, mask: MaskArg, *, bias: Tensor | None, causal: bool, dropout: float,
    scale: float, score_mod: ScoreMod | None, return_weights: bool, backend: str,
) -> tuple[str, str, Tensor | tuple[Tensor, Tensor]]:
    """Run a call with a BlockMask or a score_mod; returns ``(path, reason, result)``.

    Shape:
        as :func:`attnkit.attention`.
    """
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be callable, got {type(score_mod).__name__}")
    b, h, tq, _ = q.shape
    if isinstance(mask, BlockMask):
        mask.check(b, h, tq, k.shape[2], q.device)
        if bias is not None or causal:
            raise ValueError(
                "a BlockMask takes neither bias= nor causal=True: build causality into the mask "
                "(masks.and_mods(masks.causal_mod, ...)) and a bias into score_mod"
            )
        if backend != "math":
            why = f"{100 * mask.sparsity():.0f}% of blocks skipped ({mask.counts['partial']} partial)"
            if score_mod is None and dropout == 0.0 and not return_weights and _runs.usable(q, k, v, mask):
                out = _runs.runs_attention(q, k, v, mask, scale=scale)
                return "block-sparse", why + "; contiguous key runs as views", out
            if _tiles_apply(q, score_mod, dropout, return_weights):
                out = _tiled.tiled_attention(q, k, v, mask, scale=scale, score_mod=score_mod)
                return "block-sparse", why + "; score_mod in query tiles", out
            out, weights = block_sparse_attention(q, k, v, mask, scale=scale, score_mod=score_mod,
                                                  dropout=dropout, return_weights=return_weights)
            return "block-sparse", why, ((out, weights) if weights is not None else out)
        mask = mask.to_dense()
    elif backend == "fused":
        raise ValueError("score_mod needs the readable path or a BlockMask, not backend='fused'")
    elif mask is None and bias is None and not causal and backend == "auto" and _tiles_apply(
            q, score_mod, dropout, return_weights):
        out = _tiled.tiled_attention(q, k, v, None, scale=scale, score_mod=score_mod)
        return "block-sparse", "score_mod in query tiles over every key (no mask)", out
    out, weights = dense_attention(q, k, v, mask, bias=bias, causal=causal, scale=scale,
                                   score_mod=score_mod, dropout=dropout)
    why = "requested with backend='math'" if backend == "math" else "score_mod with a dense mask"
    return "math", why, ((out, weights) if return_weights else out)
