"""Cases for programmable attention: block-sparse FLOP rate, ALiBi as a score_mod, FlexAttention.

* ``block-sparse``: a causal sliding window of 256 through a BlockMask, forward
  and backward, its FLOP rate on the allowed entries against dense SDPA's rate
  on all entries (target >= 0.4); ALiBi as :func:`~attnkit.core.score_mods.alibi_mod`
  on a causal BlockMask against SDPA with a precomputed ``(1, H, T, T)`` bias,
  forward+backward time (target <= 1.3x) and peak memory (target <= 0.25x;
  the bias path's figure includes building its bias).
* :func:`flex_forward` (``benchmarks/block_sparse.py``): the forward against a
  compiled ``torch.nn.attention.flex_attention`` with the same block mask, and
  whether flex's backward runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.bench.result import Result, judge
from attnkit.bench.timing import MEMORY_METHOD, TIMING_METHOD, peak_memory_mib, time_pair
from attnkit.core import masks
from attnkit.core.functional import attention
from attnkit.core.score_mods import alibi_mod, alibi_slopes

__all__ = ["block_sparse", "window_mask", "alibi_bias", "qkv", "train_step", "flex_forward", "FLOPS_PER_ENTRY"]

FLOPS_PER_ENTRY = 12
"""Forward+backward FLOPs per (query, key) entry and head width: ``Q K^T`` and ``P V`` forward,
``dV``, ``dP``, ``dQ``, ``dK`` backward, 2 per multiply-add."""


def qkv(h: int, t: int, dh: int = 64, grad: bool = True) -> list[Tensor]:
    """Seeded q, k, v ``(1, H, T, Dh)`` that require gradients."""
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, h, t, dh, generator=g).requires_grad_(grad) for _ in range(3)]


def train_step(fn: Callable[[], Tensor], xs: list[Tensor]) -> Callable[[], None]:
    """Forward, ``out.sum()``, backward, with the inputs' gradients cleared first."""

    def run() -> None:
        for x in xs:
            x.grad = None
        fn().sum().backward()

    return run


def window_mask(t: int, window: int = 256, block_size: int = 128) -> masks.BlockMask:
    """The causal sliding window's BlockMask."""
    mod = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(window))
    return masks.create_block_mask(mod, None, None, t, t, block_size=block_size)


def alibi_bias(h: int, t: int, causal: bool = True) -> Tensor:
    """ALiBi's slopes times ``kv_idx - q_idx``, ``-inf`` above the diagonal when causal.

    Shape:
        returns ``(1, H, T, T)``.
    """
    pos = torch.arange(t)
    rel = (pos.view(1, t) - pos.view(t, 1)).float()
    bias = alibi_slopes(h).view(h, 1, 1) * rel
    return (bias.masked_fill(rel > 0, float("-inf")) if causal else bias)[None]


def _method(warmup: int, repeats: int, extra: str) -> str:
    return TIMING_METHOD.format(warmup=warmup, repeats=repeats, threads=torch.get_num_threads()) + "; " + extra


def _flop_rate(quick: bool) -> Result:
    h, t, window = 8, (2048 if quick else 8192), 256
    bm = window_mask(t, window)
    allowed = int(bm.to_dense().sum()) * h
    xs = qkv(h, t)
    q, k, v = xs
    warmup, repeats = 1, 3
    ta, tb = time_pair(train_step(lambda: attention(q, k, v, mask=bm), xs),
                       train_step(lambda: F.scaled_dot_product_attention(q, k, v), xs), warmup=warmup,
                       repeats=repeats)
    rate_a = FLOPS_PER_ENTRY * 64 * allowed / ta / 1e9
    rate_b = FLOPS_PER_ENTRY * 64 * h * t * t / tb / 1e9
    return judge("block-sparse", "forward+backward FLOP rate on the allowed entries",
                 f"attention(mask=BlockMask), causal window {window}", rate_a,
                 "F.scaled_dot_product_attention, no mask (all T² entries)", rate_b, unit="GFLOP/s",
                 sense=">=", bound=0.4, params={"B": 1, "H": h, "T": t, "Dh": 64, "block_size": 128},
                 method=_method(warmup, repeats, f"12·Dh FLOPs per entry; BlockMask {ta * 1e3:.0f} ms, "
                                f"SDPA {tb * 1e3:.0f} ms; allowed entries {allowed / (h * t * t):.2%} of T²"))


def _alibi(quick: bool) -> list[Result]:
    h, t = 8, (1024 if quick else 4096)
    p: dict[str, Any] = {"B": 1, "H": h, "T": t, "Dh": 64, "causal": True}
    bm = masks.create_block_mask(masks.causal_mod, None, None, t, t)
    held = [alibi_bias(h, t)]  # (1, H, T, T), released before the memory runs
    xs = qkv(h, t)
    q, k, v = xs
    mod = alibi_mod(h)
    warmup, repeats = 1, 3
    ta, tb = time_pair(train_step(lambda: attention(q, k, v, mask=bm, score_mod=mod), xs),
                       train_step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=held[0]), xs),
                       warmup=warmup, repeats=repeats)
    held.clear()
    mem_a, _ = peak_memory_mib("alibi-score-mod", p)
    mem_b, _ = peak_memory_mib("alibi-bias", p)
    a_label = "attention(mask=causal BlockMask, score_mod=alibi_mod(8))"
    b_label = "F.scaled_dot_product_attention(attn_mask=(1, H, T, T) ALiBi bias)"
    return [
        judge("block-sparse", "ALiBi score_mod forward+backward time", a_label, ta, b_label, tb, unit="s",
              sense="<=", bound=1.3, params=p, method=_method(warmup, repeats, "bias precomputed, untimed")),
        judge("block-sparse", "ALiBi score_mod forward+backward peak memory", a_label, mem_a,
              b_label + " incl. building it", mem_b, unit="MiB", sense="<=", bound=0.25, params=p,
              method=MEMORY_METHOD),
    ]


def block_sparse(quick: bool) -> list[Result]:
    """The sliding window's FLOP rate against dense SDPA; ALiBi as a score_mod: time and memory."""
    return [_flop_rate(quick), *_alibi(quick)]


def flex_forward(bm_mod: Callable[..., Tensor], t: int, h: int = 8, repeats: int = 3) -> dict[str, Any]:
    """Our forward against compiled ``flex_attention`` with the same mask; flex's backward tried.

    Returns the times, the compile time, and flex's backward error (``None`` when it ran).
    """
    from torch.nn.attention import flex_attention as fa

    q, k, v = qkv(h, t, grad=False)
    ours_bm = masks.create_block_mask(bm_mod, None, None, t, t)
    flex_bm = fa.create_block_mask(bm_mod, None, None, t, t, device="cpu")
    compiled = torch.compile(fa.flex_attention)
    start = time.perf_counter()
    with torch.no_grad():
        want = compiled(q, k, v, block_mask=flex_bm)
    compile_s = time.perf_counter() - start
    got = attention(q, k, v, mask=ours_bm)
    err = float((got - want).abs().max())

    def ours() -> None:
        with torch.no_grad():
            attention(q, k, v, mask=ours_bm)

    def flex() -> None:
        with torch.no_grad():
            compiled(q, k, v, block_mask=flex_bm)

    ta, tb = time_pair(ours, flex, warmup=1, repeats=repeats)
    backward_error: str | None = None
    qg, kg, vg = qkv(h, t)
    try:
        compiled(qg, kg, vg, block_mask=flex_bm).sum().backward()
    except Exception as exc:  # flex's CPU backward raises; report what it said
        backward_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    attention(qg, kg, vg, mask=ours_bm).sum().backward()
    return {"ours_s": ta, "flex_s": tb, "compile_s": compile_s, "max_abs_diff": err,
            "flex_backward_error": backward_error, "ours_backward_ok": qg.grad is not None}
