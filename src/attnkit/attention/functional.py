"""Pure attention math: :func:`attention`, a safe softmax, and the backend choice.

Scaled dot-product attention (Vaswani et al., 2017)::

    Attention(Q, K, V) = softmax(Q K^T * scale + bias, masked) V,   scale = 1 / sqrt(Dh)

Two paths compute it:

* **fused** — ``torch.nn.functional.scaled_dot_product_attention``, which picks
  a fused kernel (FlashAttention on CPU and GPU, memory-efficient or cuDNN on
  GPU) and never materialises the ``(Tq, Tk)`` weights. Used whenever possible.
* **math** — the readable formula below, written out step by step. Used when a
  caller asks for it (``backend="math"``); tests hold both paths equal.

Asking for the weights (``return_weights=True``) never changes how the output
is computed: the output still comes from the chosen path, bit for bit what it
would be without weights, and the weights are computed beside it.

A query row with no key to attend to (a fully masked row, or a query before
the first key under bottom-right causal alignment) returns zero output, zero
weights and zero gradients, in every path and dtype. Softmax runs in float32
for float16 and bfloat16 inputs.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width, Dv value head width.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit import block_sparse as _bs
from attnkit import masks as _masks
from attnkit.block_mask import BlockMask
from attnkit.block_sparse import MaskArg, ScoreMod

__all__ = ["attention", "attention_weights", "safe_softmax", "choose_backend", "BackendChoice",
           "last_backend", "split_heads", "merge_heads"]

logger = logging.getLogger("attnkit.attention")
Backend = Literal["auto", "fused", "math"]
_HALF = (torch.float16, torch.bfloat16)
_last = threading.local()


@dataclass(frozen=True)
class BackendChoice:
    """Which path computes attention, and why.

    ``name`` is ``"fused"``, ``"math"`` or ``"block-sparse"``; ``kernel`` names the kernel torch
    picked inside the fused path (``"FLASH_ATTENTION"``, ``"EFFICIENT_ATTENTION"``,
    ``"MATH"``...) when torch can tell; ``reason`` says why this path ran.
    """

    name: Literal["fused", "math", "block-sparse"]
    reason: str
    kernel: str | None = None


def last_backend() -> BackendChoice | None:
    """The :class:`BackendChoice` of the most recent :func:`attention` call in this thread."""
    return getattr(_last, "choice", None)


def _remember(choice: BackendChoice) -> None:
    if not torch.compiler.is_compiling():  # a thread-local write breaks a compiled graph
        _last.choice = choice


def safe_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax that subtracts the row maximum, runs in float32 for half inputs, and returns
    an all-zero row (with zero gradient) where no entry is allowed.

    ``mask`` is boolean, True where an entry may take weight. Entries equal to
    ``-inf`` in ``scores`` are treated as masked too. The result has the dtype
    of ``scores``.

    Shape:
        scores ``(..., Tk)``; mask broadcastable to it; returns the shape of scores.
    """
    work = scores.float() if scores.dtype in _HALF else scores
    if mask is not None:
        work = work.masked_fill(~mask, float("-inf"))
    row_max = work.amax(dim=dim, keepdim=True)
    # A row with nothing allowed has max -inf; shift it by 0 so exp gives 0, not NaN.
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    exp = torch.exp(work - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    weights = exp / torch.where(total > 0, total, torch.ones_like(total))
    return weights.to(scores.dtype)


def _check_inputs(q: object, k: object, v: object) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            legend = "(B, H, Tq, Dh)" if name == "q" else "(B, Hkv, Tk, Dh)"
            raise ValueError(
                f"{name} must be 4-D {legend}, got shape {tuple(t.shape)}; "
                "split heads first, e.g. x.view(B, T, H, Dh).transpose(1, 2)"
            )
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}")
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k and v must share the batch size B, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(
            f"k and v must share heads Hkv and length Tk, got k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k head widths differ: q Dh={q.shape[-1]} {tuple(q.shape)}, "
            f"k Dh={k.shape[-1]} {tuple(k.shape)}"
        )
    if q.shape[-1] == 0:
        raise ValueError(
            f"q and k head width Dh must be positive (the logit scale is 1 / sqrt(Dh)), got q {tuple(q.shape)}"
        )
    h, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or h % hkv != 0:
        raise ValueError(
            f"key/value heads Hkv={hkv} must divide query heads H={h} (grouped-query attention); "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def _full_mask(
    mask: Tensor | None, causal: bool, tq: int, tk: int, device: torch.device
) -> Tensor | None:
    if not causal:
        return mask
    return _masks.combine(mask, _masks.causal(tq, tk, device=device))


def _kernel_name(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
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


def choose_backend(
    q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
    causal: bool = False, backend: Backend = "auto", probe_kernel: bool = True,
) -> BackendChoice:
    """Say which path :func:`attention` takes for these arguments, and why.

    The fused path is taken whenever ``backend`` allows it; it supports every
    mask, bias, causal setting, grouped-query layout and dtype that attention
    accepts. The readable math path runs when ``backend="math"`` is asked for.
    ``probe_kernel`` asks torch which fused kernel it would pick (a small cost,
    paid by :func:`attention` only when debug logging is on).
    """
    if backend not in ("auto", "fused", "math"):
        raise ValueError(f"backend must be one of 'auto', 'fused', 'math', got {backend!r}")
    if backend == "math":
        return BackendChoice("math", "requested with backend='math'")
    tq, tk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    is_causal = causal and mask is None and bias is None and tq == tk
    attn_mask = bias if bias is not None else mask
    gqa = q.shape[1] != k.shape[1]
    kernel = _kernel_name(q, k, v, attn_mask, is_causal, scale, gqa) if probe_kernel else None
    why = "requested with backend='fused'" if backend == "fused" else "arguments allow the fused kernel"
    return BackendChoice("fused", why, kernel)


def _scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """Scaled logits ``Q K^T * scale`` with key/value heads shared across query-head groups."""
    b, h, tq, dh = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = h // hkv
    if q.dtype in _HALF:
        # float16 logits overflow past 65504; compute them in float32 like the fused kernels do.
        q, k = q.float(), k.float()
    if group == 1:
        # Plain batched matmul: its backward needs no copy of the (B, H, Tq, Tk) gradient.
        return (q * scale) @ k.transpose(-1, -2)  # (B, H, Tq, Tk)
    qg = (q * scale).reshape(b, hkv, group, tq, dh)  # (B, Hkv, G, Tq, Dh)
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
    full = _full_mask(mask, causal, tq, tk, q.device)
    if bias is not None:
        # -inf in the bias masks entries too (assumed when compiled: a graph cannot branch on data)
        if torch.compiler.is_compiling() or torch.isneginf(bias).any():
            return safe_softmax(scores + bias.to(scores.dtype), full).to(q.dtype)
        scores = scores + bias.to(scores.dtype)
    return _masked_softmax(scores, full).to(q.dtype)


def _masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """:func:`safe_softmax` for scores without ``-inf``, through ``torch.softmax``.

    ``torch.softmax`` is one fused kernel forward and one backward, where the
    step-by-step formula makes several passes over the ``(B, H, Tq, Tk)``
    tensor each way. A row with no allowed key is let attend everywhere (so
    no ``-inf - -inf`` NaN arises, forward or backward) and then zeroed, which
    also zeroes its gradient.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    row_ok = _masks.rows_with_keys(mask)  # (..., Tq, 1)
    allowed = mask | ~row_ok
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights.masked_fill(~row_ok, 0.0)


def _math_output(weights: Tensor, v: Tensor, dropout: float) -> Tensor:
    b, h, tq, tk = weights.shape
    hkv, dv = v.shape[1], v.shape[-1]
    if dropout > 0.0:
        weights = F.dropout(weights, p=dropout, training=True)
    wg = weights.to(v.dtype).reshape(b, hkv, h // hkv, tq, tk)  # (B, Hkv, G, Tq, Tk)
    out = wg @ v.unsqueeze(2)  # (B, Hkv, G, Tq, Dv)
    return out.reshape(b, h, tq, dv)  # (B, H, Tq, Dv)


def _fused_output(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, causal: bool,
    dropout: float, scale: float,
) -> Tensor:
    tq, tk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if causal and mask is None and bias is None and tq == tk:
        return nan_rows(F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scale, enable_gqa=gqa
        ), q, None)
    full = _full_mask(mask, causal, tq, tk, q.device)
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
    bad = ~torch.isfinite(q).all(dim=-1, keepdim=True)  # (B, H, Tq, 1)
    out = out.masked_fill(bad, float("nan"))
    return out if row_ok is None else out.masked_fill(~row_ok, 0.0)


@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: Literal[False] = ..., backend: Backend = ...,
) -> Tensor: ...
@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: Literal[True], backend: Backend = ...,
) -> tuple[Tensor, Tensor]: ...
@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: bool = ..., backend: Backend = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = None, bias: Tensor | None = None,
    causal: bool = False, dropout: float = 0.0, scale: float | None = None,
    score_mod: ScoreMod | None = None, return_weights: bool = False, backend: Backend = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention with one mask rule and safe numerics.

    ``softmax(Q K^T * scale + bias) V`` where ``mask`` is False (Vaswani et al., 2017).

    Args:
        q: queries. Grouped-query attention (Ainslie et al., 2023) when ``Hkv``
            divides ``H``: query head ``h`` uses key/value head ``h // (H // Hkv)``.
        k: keys.
        v: values.
        mask: boolean, True where a query MAY attend to a key; broadcast to
            ``(B, H, Tq, Tk)``. Build it with :mod:`attnkit.masks`. A
            :class:`~attnkit.block_mask.BlockMask` runs the block-sparse path.
        bias: float additive bias broadcast to ``(B, H, Tq, Tk)`` (ALiBi,
            relative positions). Keep it finite: masking is done with ``mask``.
        causal: forbid attention to later keys, aligned bottom-right (the
            ``Tq`` queries are the last ``Tq`` positions of the keys); for
            top-left alignment pass ``mask=masks.causal(tq, tk, align="top_left")``.
        dropout: probability of dropping an attention weight; apply it only in
            training (layers pass 0 in eval mode).
        scale: logit scale, default ``1 / sqrt(Dh)``.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites the
            scaled logits (:mod:`attnkit.block_sparse`); dense masks take the math path.
        return_weights: also return the attention probabilities (before
            dropout). The output is the same either way.
        backend: ``"auto"`` (fused when possible), ``"fused"`` or ``"math"``.
            :func:`last_backend` and :func:`choose_backend` say which ran, and why.

    Returns:
        ``output``, or ``(output, weights)`` when ``return_weights``.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``;
        output ``(B, H, Tq, Dv)``; weights ``(B, H, Tq, Tk)``.
    """
    _check_inputs(q, k, v)
    b, h, tq, _ = q.shape
    tk = k.shape[2]
    target = (b, h, tq, tk)
    if mask is not None and not isinstance(mask, BlockMask):
        _masks.check_mask(mask, target)
    if bias is not None:
        _masks.check_bias(bias, target)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
    if scale is not None and (not isinstance(scale, (int, float)) or not scale > 0):
        raise ValueError(f"scale must be a positive float or None, got {scale!r}")
    scale_f = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if isinstance(mask, BlockMask) or score_mod is not None:
        name, why, result = _bs.dispatch(q, k, v, mask, bias=bias, causal=causal, dropout=float(dropout),
                                         scale=scale_f, score_mod=score_mod,
                                         return_weights=return_weights, backend=backend)
        _remember(BackendChoice(name, why))  # type: ignore[arg-type]
        return result

    # Compiled (torch.compile, torch.export): the same path, without the record, the logging
    # check and the kernel probe, each of which would break the graph.
    debug = not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG)
    choice = choose_backend(
        q, k, v, mask=mask, bias=bias, causal=causal, backend=backend, probe_kernel=debug
    )
    _remember(choice)
    if debug:
        logger.debug("attention backend %s (%s), kernel %s", choice.name, choice.reason, choice.kernel)

    if choice.name == "math":
        weights = attention_weights(q, k, mask=mask, bias=bias, causal=causal, scale=scale_f)
        out = _math_output(weights, v, float(dropout))
        return (out, weights) if return_weights else out

    out = _fused_output(q, k, v, mask, bias, causal, float(dropout), scale_f)
    if not return_weights:
        return out
    weights = attention_weights(q, k, mask=mask, bias=bias, causal=causal, scale=scale_f)
    return out, weights


def split_heads(x: Tensor, heads: int) -> Tensor:
    """Split the feature axis into heads.

    Shape:
        x ``(B, T, heads * Dh)``; returns ``(B, heads, T, Dh)`` (a view when possible).
    """
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)  # (B, H, T, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """Inverse of :func:`split_heads`.

    Shape:
        x ``(B, H, T, Dh)``; returns ``(B, T, H * Dh)``.
    """
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, H*Dh)
