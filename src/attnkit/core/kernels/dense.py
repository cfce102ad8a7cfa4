"""Dense kernels: the whole ``(Tq, Tk)`` problem at once.

* **fused** — ``torch.nn.functional.scaled_dot_product_attention``, which picks
  a fused kernel (FlashAttention on CPU and GPU, memory-efficient or cuDNN on
  GPU) and never materialises the ``(Tq, Tk)`` weights.
* **math** — the readable formula, written out step by step: the weights
  (:func:`attention_weights`), then ``weights @ V``; with a ``score_mod``,
  :func:`score_mod_attention`.

A query row with no key gives zero output, weights and gradients; a query
holding NaN or an infinity gives a NaN row on both (:func:`nan_rows`).
Softmax runs in float32 for float16 and bfloat16 inputs.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width, Dv value head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core import masks as _masks
from attnkit.core.score_mods import apply_score_mod
from attnkit.core.types import ScoreMod

__all__ = ["apply_dropout", "safe_softmax", "attention_weights", "math_output", "fused_output", "nan_rows",
           "score_mod_attention", "kernel_name", "zero_rows", "expand_heads", "HALF"]

HALF = (torch.float16, torch.bfloat16)
"""The half-precision dtypes, whose logits and softmax run in float32."""


def apply_dropout(x: Tensor, p: float) -> Tensor:
    """``F.dropout(x, p)``, the dropout of every kernel and of :class:`attnkit.layers.multi_head.Dropout`, with masks
    about 3x faster on a CPU: one 64-bit draw gives four 16-bit uniform numbers where ``bernoulli_`` draws one per
    element (``p`` to the nearest 1/65536, the scale that of the rate taken; seeded by ``torch.manual_seed``)."""
    cut = round(p * 65536)
    if cut <= 0 or cut >= 65536:
        return x if cut <= 0 else x * 0.0
    bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= cut - 32768
    return x.masked_fill(~keep, 0.0) * (65536 / (65536 - cut))


def safe_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """The masked softmax of attnkit: every layer and reader that masks a softmax calls this one.

    Softmax over ``dim`` (one fused ``torch.softmax``, in float32 for half
    inputs) with an all-zero row, and zero gradient, where no entry is allowed.
    ``mask`` is boolean, True where an entry may take weight; entries equal to
    ``-inf`` in ``scores`` are treated as masked too. A row holding NaN gives
    NaN. The result has the dtype of ``scores``.

    Shape:
        scores ``(..., Tk)``; mask broadcastable to it; returns the shape of scores.
    """
    work = scores.float() if scores.dtype in HALF else scores
    if mask is not None:
        work = work.masked_fill(~mask, float("-inf"))
    # A row with nothing allowed has max -inf (NaN keeps a NaN row): it is softmaxed over
    # zeros (no -inf - -inf NaN, forward or backward) and then zeroed, which zeroes its gradient.
    empty = torch.isneginf(work.detach().amax(dim=dim, keepdim=True))
    if work.device.type != "cpu" or torch.compiler.is_compiling() or bool(empty.any()):
        return torch.softmax(work.masked_fill(empty, 0.0), dim=dim).masked_fill(empty, 0.0).to(scores.dtype)
    return torch.softmax(work, dim=dim).to(scores.dtype)


def full_mask(
    mask: Tensor | None, causal: bool, tq: int, tk: int, device: torch.device
) -> Tensor | None:
    if not causal:
        return mask
    return _masks.combine(mask, _masks.causal(tq, tk, device=device))


def kernel_name(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                 scale: float, gqa: bool) -> str | None:
    try:
        from torch.nn.attention import SDPBackend

        index = torch._fused_sdp_choice(  # type: ignore[attr-defined]
            q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal=is_causal, scale=scale,
            enable_gqa=gqa,
        )
        return SDPBackend(index).name
    except Exception:  # private API: absent or different in other torch versions
        return None


def _tracks_grad(*tensors: Tensor) -> bool:
    """Whether autograd records an op on these tensors (a graph would need the inputs kept)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _softmax_in_place(scores: Tensor) -> Tensor:
    """``torch.softmax(scores, -1)`` written over ``scores`` (no second ``(B, H, Tq, Tk)`` buffer).

    Only for a tensor no graph holds. The kernel reads each entry of a row
    before it writes the same entry, so the result is bit-for-bit the
    allocating softmax's.
    """
    return torch.ops.aten._softmax.out(scores, -1, False, out=scores)  # type: ignore[no-any-return]


def _scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """Scaled logits ``Q K^T * scale`` with key/value heads shared across query-head groups."""
    b, h, tq, dh = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = h // hkv
    if q.dtype in HALF:
        # float16 logits overflow past 65504; compute them in float32 like the fused kernels do.
        q, k = q.float(), k.float()
    elif not _tracks_grad(q, k) and not torch.compiler.is_compiling():
        # Nothing to differentiate: scale q straight into a contiguous buffer (one pass, where
        # ``(q * scale) @ k^T`` on a head-transposed view writes q scaled, then matmul copies it).
        q = torch.mul(q, scale, out=torch.empty(q.shape, dtype=q.dtype, device=q.device))
        scale = 1.0
    if group == 1:
        # Plain batched matmul: its backward needs no copy of the (B, H, Tq, Tk) gradient.
        return (q if scale == 1.0 else q * scale) @ k.transpose(-1, -2)  # (B, H, Tq, Tk)
    qg = (q if scale == 1.0 else q * scale).reshape(b, hkv, group, tq, dh)  # (B, Hkv, G, Tq, Dh)
    scores = qg @ k.unsqueeze(2).transpose(-1, -2)  # (B, Hkv, G, Tq, Tk)
    return scores.reshape(b, h, tq, tk)  # (B, H, Tq, Tk)


def attention_weights(
    q: Tensor, k: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
    causal: bool = False, scale: float | None = None,
) -> Tensor:
    """The attention probabilities ``softmax(Q K^T * scale + bias)`` under the mask.

    Rows sum to 1, or are all zero where a query has no key. Arguments follow
    :func:`attention`.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``; returns ``(B, H, Tq, Tk)``.
    """
    tq, tk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _scores(q, k, scale)  # (B, H, Tq, Tk), float32 for half inputs
    full = full_mask(mask, causal, tq, tk, q.device)
    if bias is not None:
        # -inf in the bias masks entries too (assumed when compiled: a graph cannot branch on data)
        if torch.compiler.is_compiling() or torch.isneginf(bias).any():
            return safe_softmax(scores + bias.to(scores.dtype), full).to(q.dtype)
        scores = scores.add_(bias) if not _tracks_grad(scores, bias) and scores.dtype == bias.dtype \
            and scores.shape == torch.broadcast_shapes(scores.shape, bias.shape) else scores + bias.to(scores.dtype)
    return _masked_softmax(scores, full).to(q.dtype)


def _masked_softmax(scores: Tensor, mask: Tensor | None, own: bool = True) -> Tensor:
    """:func:`safe_softmax` for scores without ``-inf``, through ``torch.softmax``.

    ``torch.softmax`` is one fused kernel forward and one backward, where the
    step-by-step formula makes several passes over the ``(B, H, Tq, Tk)``
    tensor each way. A row with no allowed key is let attend everywhere (so
    no ``-inf - -inf`` NaN arises, forward or backward) and then zeroed, which
    also zeroes its gradient. With ``own`` (nothing else holds ``scores``) and
    no graph, the weights are written over ``scores``.
    """
    fresh = own and not _tracks_grad(scores) and scores.is_contiguous() and not torch.compiler.is_compiling()
    if mask is None:
        return _softmax_in_place(scores) if fresh else torch.softmax(scores, dim=-1)
    row_ok = _masks.rows_with_keys(mask)  # (..., Tq, 1)
    allowed = mask | ~row_ok
    if fresh and torch.broadcast_shapes(scores.shape, mask.shape) == scores.shape:  # no graph: in its own buffer
        return _softmax_in_place(scores.masked_fill_(~allowed, float("-inf"))).masked_fill_(~row_ok, 0.0)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights.masked_fill(~row_ok, 0.0)


def math_output(weights: Tensor, v: Tensor, dropout: float) -> Tensor:
    b, h, tq, tk = weights.shape
    hkv, dv = v.shape[1], v.shape[-1]
    wg = apply_dropout(weights, dropout).to(v.dtype).reshape(b, hkv, h // hkv, tq, tk)  # (B, Hkv, G, Tq, Tk)
    out = wg @ v.unsqueeze(2)  # (B, Hkv, G, Tq, Dv)
    return out.reshape(b, h, tq, dv)  # (B, H, Tq, Dv)


def fused_output(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, causal: bool,
    dropout: float, scale: float,
) -> Tensor:
    tq, tk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if causal and mask is None and bias is None and tq == tk:
        return nan_rows(F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scale, enable_gqa=gqa
        ), q, None)
    full = full_mask(mask, causal, tq, tk, q.device)
    row_ok = None
    if full is not None:
        # Rows with no key: let them attend everywhere inside the kernel (no NaN, no
        # NaN gradient), then zero their output, which also zeroes their gradients.
        row_ok = _masks.rows_with_keys(full)  # (..., Tq, 1)
        full = full | ~row_ok
    attn_mask: Tensor | None = full
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if full is not None:
            attn_mask = attn_mask.masked_fill(~full, float("-inf"))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout, scale=scale, enable_gqa=gqa
    )  # (B, H, Tq, Dv)
    return nan_rows(out, q, row_ok)


def nan_rows(out: Tensor, q: Tensor, row_ok: Tensor | None) -> Tensor:
    """``out`` with NaN in the rows whose query holds NaN or an infinity, zero in rows without a key.

    What the readable path computes (a non-finite query makes its scores and
    softmax NaN), made explicit for the kernels that would return 0 or a
    finite row instead. A row without a key gives zero whatever its query.

    Shape:
        out ``(B, H, Tq, Dv)``, q ``(B, H, Tq, Dh)``, row_ok broadcasting to ``(B, H, Tq, 1)``;
        returns ``(B, H, Tq, Dv)``.
    """
    if q.device.type == "cpu" and not torch.compiler.is_compiling() and bool(torch.isfinite(q.detach().sum())):
        pass  # every query finite (one reduction; on an accelerator the branch-free form avoids a sync)
    else:
        # 0 for a finite row, NaN for one holding NaN or +-inf (0 * inf = NaN); detached: backward pays nothing
        out = out + (q.detach().sum(dim=-1, keepdim=True, dtype=torch.float32) * 0).to(out.dtype)  # (B, H, Tq, 1)
    return out if row_ok is None else out.masked_fill(~row_ok, 0.0)


def expand_heads(h: int, *xs: Tensor) -> tuple[Tensor, ...]:
    """Each of ``xs``, key or value heads ``(B, Hkv, T, D)``, repeated for the ``h`` query heads they serve
    (grouped-query attention): ``(B, H, T, D)``."""
    return tuple(x if x.shape[1] == h else x.repeat_interleave(h // x.shape[1], dim=1) for x in xs)


def zero_rows(x: Tensor, row_ok: Tensor | None) -> Tensor:
    return x if row_ok is None else x.masked_fill(~row_ok, 0.0)


def score_mod_attention(
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
    qf, kf = (q.float(), k.float()) if q.dtype in HALF else (q, k)
    qg = (qf * scale).view(b, hkv, h // hkv, tq, dh)  # (B, Hkv, G, Tq, Dh)
    scores = (qg @ kf.unsqueeze(2).transpose(-1, -2)).view(b, h, tq, tk)  # (B, H, Tq, Tk)
    if bias is not None:
        scores = scores + bias.to(torch.promote_types(bias.dtype, scores.dtype))
    if score_mod is not None:
        dev = q.device
        idx = (torch.arange(b, device=dev).view(b, 1, 1, 1), torch.arange(h, device=dev).view(1, h, 1, 1),
               torch.arange(tq, device=dev).view(1, 1, tq, 1), torch.arange(tk, device=dev).view(1, 1, 1, tk))
        scores = apply_score_mod(score_mod, scores, idx)
    if causal:
        mask = _masks.combine(mask, _masks.causal(tq, tk, device=q.device))
    weights = _masked_softmax(scores, mask, own=score_mod is None)  # (B, H, Tq, Tk): a score_mod's result may be shared
    dropped = apply_dropout(weights, dropout)
    wg = dropped.to(v.dtype).view(b, hkv, h // hkv, tq, tk)
    out = (wg @ v.unsqueeze(2)).view(b, h, tq, v.shape[-1])  # (B, H, Tq, Dv)
    return out, weights.to(q.dtype)
