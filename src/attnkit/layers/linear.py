"""Efficient (linear) attention of Shen et al. (2021), "Efficient Attention: Attention with Linear Complexities".

Softmax attention ``softmax(Q K^T) V`` costs ``O(T^2)``. Efficient attention
normalises queries and keys separately, so the product can be re-associated::

    out = softmax_D(Q) (softmax_T(K)^T V)

``softmax_D`` runs over each query's Dh features, ``softmax_T`` over the key
positions of each feature. ``softmax_T(K)^T V`` is a ``(Dh, Dv)`` context —
``Dh`` global "templates", each a weighted average of the values — and every
query mixes the templates with its feature weights. Cost ``O(T Dh Dv)``.
The implied weights ``W = softmax_D(Q) softmax_T(K)^T`` are a proper
attention matrix: non-negative rows summing to one.

**Causal form.** ``softmax_T`` over *all* positions would let query ``i`` see
later keys through the normaliser. Here each query normalises over its own
prefix, feature by feature::

    c_i[d]  = Σ_{j<=i} exp(k_jd) v_j / Σ_{j<=i} exp(k_jd)       # (Dh, Dv) per query
    out_i   = Σ_d softmax_D(q_i)[d] c_i[d]

so ``W_ij = Σ_d softmax_D(q_i)[d] exp(k_jd) / Σ_{j'<=i} exp(k_j'd)`` for
``j <= i`` and 0 after: rows still sum to one, and position ``i`` depends only
on positions ``<= i``. The prefix sums are computed by a **chunked scan**:
inside a chunk of ``C`` positions a small ``(C, C)`` masked product, across
chunks a running state ``(S, z) = (Σ exp(k) v^T, Σ exp(k))`` of size
``Dh x Dv``. Time ``O(T (C + Dh) Dv)``, memory ``O(C^2 + C Dh + Dh Dv)`` per
head — linear in ``T``, no ``(T, T)`` matrix. For stability ``exp(k)`` is
shifted by the running per-feature maximum, updated once per chunk (the state
is rescaled when it grows); results are exact up to rounding unless a
feature's keys within one chunk span more than ~80 (float32), where the
earliest terms underflow.

**Key masks.** Masked keys contribute nothing: they are dropped from
``softmax_T`` (and from the causal prefix sums). A query with no key left
gets zero output and zero weights. Only key masks make sense here — the
method never forms per-pair weights — so a mask, read by the rule of every
layer (:func:`attnkit.masks.read_mask`), must come out ``(B, 1, 1, Tk)``:
the same for every head and query.

Shape legend: B batch, H heads, T/Tq/Tk lengths, D model width, Dh key width, Dv value width.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnkit._checks import positive_int
from attnkit.core.functional import merge_heads, safe_softmax, split_heads
from attnkit.core.masks import AttentionMask, BlockMask, MaskLike, as_attention_mask, four_axes, read_mask
from attnkit.layers.multi_head import (
    check_sequence,
    refuse_block_mask,
    resolve_key_value,
    zero_rows_without_key,
)

__all__ = ["LinearAttention", "linear_attention", "linear_attention_weights"]

CHUNK = 64  # positions per scan step: small enough for the (C, C) product, large enough to batch
_CONTEXT_CHUNK = 512  # positions per step of the non-causal context sum (measured fastest on CPU)


def _key_mask(mask: MaskLike, target: tuple[int, int, int, int], name: str) -> Tensor | None:
    """The ``(B|1, 1, Tk)`` key mask (True = may attend) of ``mask``, read by :func:`attnkit.masks.read_mask`.

    Linear attention never forms per-pair weights, so a mask must be the same for
    every query and head: ``(B|1, 1, 1, Tk)`` once read.
    """
    if isinstance(mask, BlockMask) or (isinstance(mask, AttentionMask) and mask.is_block):
        raise TypeError(f"{name} cannot be a BlockMask: linear attention applies key-padding masks only")
    pairs = read_mask(mask, target, name=name)
    if pairs is None:
        return None
    assert not isinstance(pairs, BlockMask)
    pairs = four_axes(pairs)
    if pairs.shape[1] != 1 or pairs.shape[2] != 1:
        raise ValueError(
            f"{name} must be a key-padding mask (B, Tk) or (B, 1, 1, Tk) with (B, Tk) = "
            f"{(target[0], target[3])}; got shape {tuple(pairs.shape)} (linear attention cannot apply "
            "per-query or per-head masks)"
        )
    return pairs[:, 0]  # (B|1, 1, Tk)


def _check(q: object, k: object, v: object, causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, T, Dh), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}")
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "q (B, H, Tq, Dh), k (B, H, Tk, Dh) and v (B, H, Tk, Dv) must agree; got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(
            f"causal linear attention needs Tq == Tk, got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def _causal_scan(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, chunk: int) -> Tensor:
    """Chunked prefix-sum scan of the causal form (``softmax_D(q)`` is taken chunk by chunk)."""
    b, h, t, dh = k.shape
    dv = v.shape[-1]
    state = k.new_zeros(b, h, dh, dv)  # S = Σ exp(k - m) v^T     (B, H, Dh, Dv)
    norm = k.new_zeros(b, h, 1, dh)  # z = Σ exp(k - m)            (B, H, 1, Dh)
    run_max = k.new_full((b, h, 1, dh), float("-inf"))  # m        (B, H, 1, Dh)
    tril = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril()
    out = v.new_empty(b, h, t, dv)  # (B, H, T, Dv), filled chunk by chunk
    for start in range(0, t, chunk):
        end = min(t, start + chunk)
        kc, vc = k[:, :, start:end], v[:, :, start:end]  # (B, H, C, Dh), (B, H, C, Dv)
        qc = safe_softmax(q[:, :, start:end])  # (B, H, C, Dh)
        if keep is not None:
            kc = kc.masked_fill(~keep[:, :, start:end, None], float("-inf"))
        new_max = torch.maximum(run_max, kc.amax(dim=2, keepdim=True)).detach()  # (B, H, 1, Dh)
        new_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        rescale = torch.exp(run_max - new_max)  # exp(-inf) = 0 before the first valid key
        state = state * rescale.transpose(-1, -2)
        norm = norm * rescale
        e = torch.exp(kc - new_max)  # (B, H, C, Dh); masked keys give exactly 0
        den = norm + e.cumsum(dim=2)  # (B, H, C, Dh): Σ_{j<=i} exp(k_j - m)
        a = qc / torch.where(den > 0, den, torch.ones_like(den)) * (den > 0)  # (B, H, C, Dh)
        c = end - start
        local = (a @ e.transpose(-1, -2)).masked_fill(~tril[:c, :c], 0.0)  # (B, H, C, C)
        out[:, :, start:end] = a @ state + local @ vc  # (B, H, C, Dv)
        state = state + e.transpose(-1, -2) @ vc
        norm = den[:, :, -1:]
        run_max = new_max
    return out


def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, mask: MaskLike = None,
    chunk: int = CHUNK,
) -> Tensor:
    """Efficient attention ``softmax_D(Q) (softmax_T(K)^T V)`` (Shen et al., 2021), linear in T.

    Args:
        q: queries, split into heads.
        k: keys, split into heads.
        v: values, split into heads.
        causal: prefix-normalised causal form (see the module docstring); needs ``Tq == Tk``.
        mask: a key mask, True where a key may be attended, read by
            :func:`attnkit.masks.read_mask`: ``(B, Tk)``, ``(B, 1, 1, Tk)``, or an
            ``AttentionMask`` holding one.
        chunk: positions per step of the causal scan.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)``, v ``(B, H, Tk, Dv)``; returns ``(B, H, Tq, Dv)``.
    """
    _check(q, k, v, causal)
    positive_int("chunk", chunk)
    keep = _key_mask(mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]), "linear_attention mask")
    if keep is not None:
        keep = keep.expand(k.shape[0], 1, k.shape[2])  # (B, 1, Tk)
    if causal:
        return _causal_scan(q, k, v, keep, chunk)
    context = _global_context(k, v, keep)  # (B, H, Dh, Dv)
    out = v.new_empty(*q.shape[:3], v.shape[-1])  # (B, H, Tq, Dv)
    for start in range(0, q.shape[2], _CONTEXT_CHUNK):
        stop = start + _CONTEXT_CHUNK
        out[:, :, start:stop] = safe_softmax(q[:, :, start:stop]) @ context
    return out


def _global_context(k: Tensor, v: Tensor, keep: Tensor | None) -> Tensor:
    """``softmax_T(K)^T V``, accumulated over chunks of positions so each pass stays in cache."""
    b, h, t, dh = k.shape
    if keep is not None:
        k = k.masked_fill(~keep[..., None], float("-inf"))  # masked keys: exp gives exactly 0
    shift = k.amax(dim=2, keepdim=True).detach()  # (B, H, 1, Dh)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    context = k.new_zeros(b, h, dh, v.shape[-1])  # Σ_j exp(k_j - m) v_j^T   (B, H, Dh, Dv)
    norm = k.new_zeros(b, h, dh, 1)  # Σ_j exp(k_j - m)                       (B, H, Dh, 1)
    for start in range(0, t, _CONTEXT_CHUNK):
        e = torch.exp(k[:, :, start : start + _CONTEXT_CHUNK] - shift)  # (B, H, C, Dh)
        norm = norm + e.sum(dim=2).unsqueeze(-1)
        context = context + e.transpose(-1, -2) @ v[:, :, start : start + _CONTEXT_CHUNK]
    # No key left: zero context, hence zero output.
    return context / torch.where(norm > 0, norm, torch.ones_like(norm)) * (norm > 0)


def linear_attention_weights(
    q: Tensor, k: Tensor, *, causal: bool = False, mask: MaskLike = None,
) -> Tensor:
    """The ``(Tq, Tk)`` weights that :func:`linear_attention` applies implicitly.

    ``W_ij = Σ_d softmax_D(q_i)[d] · n_ijd`` where ``n`` is ``softmax_T(K)``, or
    its prefix-normalised causal form. Quadratic in time and memory: for
    inspection and plots only; the output path never builds it.

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)``; returns ``(B, H, Tq, Tk)``.
    """
    _check(q, k, k, causal)
    b, h, tq, _ = q.shape
    tk = k.shape[2]
    keep = _key_mask(mask, (b, h, tq, tk), "linear_attention_weights mask")
    if keep is not None:
        keep = keep.expand(b, 1, tk)  # (B, 1, Tk)
    qf = safe_softmax(q, dim=-1)  # (B, H, Tq, Dh)
    if not causal:
        kf = safe_softmax(k.transpose(-1, -2), keep.unsqueeze(1) if keep is not None else None)
        return qf @ kf  # (B, H, Tq, Tk)
    kk = k if keep is None else k.masked_fill(~keep[..., None], float("-inf"))
    shift = kk.amax(dim=2, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift)).detach()
    e = torch.exp(kk - shift)  # (B, H, Tk, Dh)
    den = e.cumsum(dim=2)  # (B, H, Tq, Dh)
    a = qf / torch.where(den > 0, den, torch.ones_like(den)) * (den > 0)
    return (a @ e.transpose(-1, -2)).tril()  # (B, H, Tq, Tk)


class LinearAttention(nn.Module):
    """Multi-head efficient attention (Shen et al., 2021) with linear cost in the length.

    Args:
        d_model: model width D; divisible by ``num_heads``.
        num_heads: heads H.
        causal: use the prefix-normalised causal form (self-attention only).
        bias: add biases to the projections.

    Shape:
        query ``(B, Tq, D)``; optional key/value ``(B, Tk, D)`` (default: query); returns ``(B, Tq, D)``
        and, on request, the implied weights ``(B, H, Tq, Tk)`` — computed
        explicitly, quadratic in the length, for inspection only.
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool = False, *, bias: bool = True) -> None:
        super().__init__()
        positive_int("d_model", d_model)
        positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} must be divisible by num_heads={num_heads} "
                f"(each head gets d_model / num_heads features)"
            )
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.d_model, self.num_heads, self.causal = d_model, num_heads, causal
        self.head_dim = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., *,
        mask: MaskLike = ..., return_weights: Literal[False] = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., *,
        mask: MaskLike = ..., return_weights: Literal[True],
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
        mask: MaskLike = None, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query`` to itself (or to ``key``/``value``).

        ``mask`` is a boolean key mask, True where a key may be attended, read
        by :func:`attnkit.masks.read_mask`: ``(B, Tk)`` or ``(B, 1, 1, Tk)``
        (e.g. :func:`attnkit.masks.from_lengths`), or the model's
        ``AttentionMask`` holding one. A BlockMask is refused
        (``TypeError``): the layer applies key masks only. A query with no key
        gets a zero output.
        """
        refuse_block_mask("LinearAttention", mask, "it applies key-padding masks only")
        check_sequence("query", query, self.d_model)
        key, value = resolve_key_value(query, key, value, self.d_model)
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, Tq, Dh)
        k = split_heads(self.k_proj(key), self.num_heads)  # (B, H, Tk, Dh)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, H, Tk, Dh)
        target = (q.shape[0], self.num_heads, q.shape[2], k.shape[2])
        keys = _key_mask(mask, target, "LinearAttention mask")  # (B|1, 1, Tk)
        # the model's AttentionMask keeps its rows; a plain mask is built once from the key mask read
        read = mask if isinstance(mask, AttentionMask) or keys is None else as_attention_mask(keys[:, None], target)
        out = self.out_proj(merge_heads(linear_attention(q, k, v, causal=self.causal, mask=read)))
        out = zero_rows_without_key(out, read, k.shape[2], causal=self.causal)
        if return_weights:
            return out, linear_attention_weights(q, k, causal=self.causal, mask=read)
        return out  # (B, Tq, D)
