"""The entry of the attention core: :func:`attention`, its weights, and heads split and merged.

Scaled dot-product attention (Vaswani et al., 2017)::

    Attention(Q, K, V) = softmax(Q K^T * scale + bias, masked) V,   scale = 1 / sqrt(Dh)

:func:`attention` checks its arguments, asks :func:`attnkit.core.dispatch.plan`
which kernel of :mod:`attnkit.core.kernels` runs (torch's fused kernel
whenever possible, the readable formula on request, a block-sparse kernel for
a BlockMask or a ``score_mod``), records the choice for :func:`last_backend`
and runs it. Tests hold every path equal to the readable one.

Asking for the weights (``return_weights=True``) never changes how the output
is computed: the output still comes from the chosen path, bit for bit what it
would be without weights, and the weights are computed beside it.

A query row with no key to attend to (a fully masked row, or a query before
the first key under bottom-right causal alignment) returns zero output, zero
weights and zero gradients, in every path and dtype. A query holding NaN or an
infinity gives a NaN row on every path. Softmax runs in float32 for float16 and
bfloat16 inputs.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width, Dv value head width.
"""

from __future__ import annotations

import logging
from typing import Literal, overload

import torch
from torch import Tensor

from attnkit._checks import attention_scale
from attnkit.core import masks as _masks
from attnkit.core.block_mask import BlockMask, with_causal
from attnkit.core.dispatch import (
    Backend,
    BackendChoice,
    choose_backend,
    last_backend,
    plan,
    remember,
    run,
)
from attnkit.core.kernels.dense import attention_weights, safe_softmax
from attnkit.core.masks import MaskLike
from attnkit.core.types import ScoreMod

__all__ = ["attention", "attention_weights", "safe_softmax", "choose_backend", "BackendChoice",
           "last_backend", "split_heads", "merge_heads"]

logger = logging.getLogger("attnkit.attention")


def check_inputs(q: object, k: object, v: object) -> None:
    """Refuse, by name, q, k and v that attention cannot take: not 4-D floating tensors of one dtype, other
    batch sizes, k and v of other heads or lengths, other head widths, Hkv not dividing H.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``, v ``(B, Hkv, Tk, Dv)``.
    """
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


@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: Literal[False] = ..., backend: Backend = ...,
) -> Tensor: ...
@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: Literal[True], backend: Backend = ...,
) -> tuple[Tensor, Tensor]: ...
@overload
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ...,
    causal: bool = ..., dropout: float = ..., scale: float | None = ..., score_mod: ScoreMod | None = ...,
    return_weights: bool = ..., backend: Backend = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...
def attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskLike = None, bias: Tensor | None = None,
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
        mask: boolean, True where a query MAY attend to a key, read by
            :func:`attnkit.masks.read_mask`: ``(B, 1|H, Tq|1, Tk)``, a ``(B, Tk)``
            key-padding mask or ``(Tq, Tk)`` pairs (refused as ambiguous when
            ``B == Tq``). Build it with :mod:`attnkit.masks`. A
            :class:`~attnkit.core.block_mask.BlockMask` runs the block-sparse path;
            an :class:`~attnkit.core.masks.AttentionMask` (what models build
            once and carry) runs the path of the mask it holds.
        bias: float additive bias broadcast to ``(B, H, Tq, Tk)`` (ALiBi,
            relative positions). Keep it finite: masking is done with ``mask``.
        causal: forbid attention to later keys, aligned bottom-right (the
            ``Tq`` queries are the last ``Tq`` positions of the keys); for
            top-left alignment pass ``mask=masks.causal(tq, tk, align="top_left")``.
        dropout: probability of dropping an attention weight; apply it only in
            training (layers pass 0 in eval mode).
        scale: logit scale, default ``1 / sqrt(Dh)``.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites the
            scaled logits (:mod:`attnkit.core.score_mods`); dense masks take the math path.
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
    check_inputs(q, k, v)
    b, h, tq, _ = q.shape
    tk = k.shape[2]
    target = (b, h, tq, tk)
    # the kernels read the pairs, by the one rule of every layer (an AttentionMask's rows come from it too)
    mask = _masks.read_mask(mask, target)
    if causal and isinstance(mask, BlockMask):  # the mask's pairs that are causal too, as a BlockMask
        mask.check(b, h, tq, tk, q.device)
        mask, causal = with_causal(mask), False
    if bias is not None:
        _masks.check_bias(bias, target)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
    scale_f = attention_scale(scale, q.shape[-1])
    # Compiled (torch.compile, torch.export): the same path, without the record, the logging
    # check and the kernel probe, each of which would break the graph.
    debug = not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG)
    choice = plan(q, k, v, mask=mask, bias=bias, causal=causal, dropout=float(dropout), score_mod=score_mod,
                  return_weights=return_weights, backend=backend, probe_kernel=debug)
    remember(choice)
    if debug:
        logger.debug("attention backend %s (%s), kernel %s", choice.name, choice.reason, choice.kernel)
    return run(choice, q, k, v, mask=mask, bias=bias, causal=causal, dropout=float(dropout), scale=scale_f,
               score_mod=score_mod, return_weights=return_weights)


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
