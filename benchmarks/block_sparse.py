"""Block-sparse attention against dense masks, dense SDPA, a precomputed bias and FlexAttention.

Usage::

    python benchmarks/block_sparse.py [--quick] [--no-flex]

Each figure is a ratio of two sides measured in the same run; times are
medians of interleaved repeats (:func:`attnkit.bench.timing.time_pair`),
forward+backward unless said otherwise:

* causal sliding window 256, B=1 H=8 T=8192 Dh=64: ``attention(mask=BlockMask)``
  against ``attention(mask=<the equivalent dense bool mask>)`` (target >= 10x
  faster), and its FLOP rate on the allowed entries against
  ``F.scaled_dot_product_attention`` without a mask on all T² entries (>= 0.4);
* 16 packed documents of 512 tokens in T=8192: against the dense mask (>= 10x);
* ALiBi at T=4096 on a causal BlockMask, as ``score_mods.alibi_mod`` (a
  ``bias_mod``: the fused kernel per query tile) against SDPA with a
  precomputed (1, H, T, T) bias holding the slopes and the causal ``-inf``
  (<= 1.3x the time; peak memory <= 0.25x, the bias path's including its bias);
  beside it, for context, the same ALiBi written as a plain ``score_mod``
  (step-by-step tiles) and the non-causal form without a mask;
* FlexAttention (``torch.nn.attention.flex_attention``, compiled) with the same
  causal sliding-window block mask at T=4096: our forward against its forward
  (target <= 1x the time), its compile time, and its backward, which raises on
  CPU where ours runs.

``--quick`` divides the lengths by 4 (the targets are for the full sizes).
BlockMasks are built once, outside the timed calls, as a model builds one per
batch layout.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

from attnkit import masks
from attnkit.bench.sparse import (
    FLOPS_PER_ENTRY,
    alibi_bias,
    flex_forward,
    qkv,
    train_step,
    window_mask,
)
from attnkit.bench.timing import peak_memory_mib, time_pair
from attnkit.core.functional import attention, last_backend
from attnkit.core.score_mods import alibi_mod, alibi_slopes


def _row(name: str, a: str, b: str, ratio: str, target: str, ok: bool | None) -> str:
    verdict = "context" if ok is None else ("PASS" if ok else "MISS")
    return f"| {name} | {a} | {b} | {ratio} | {target} | {verdict} |"


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms"


def masked_case(name: str, bm: masks.BlockMask, t: int, repeats: int, flops: bool = False) -> list[str]:
    dense = bm.to_dense()  # (1, 1, T, T)
    xs = qkv(8, t)
    q, k, v = xs
    sparse_step = train_step(lambda: attention(q, k, v, mask=bm), xs)
    sparse_step()
    why = last_backend()
    dense_step = train_step(lambda: attention(q, k, v, mask=dense), xs)
    ta, tb = time_pair(sparse_step, dense_step, warmup=1, repeats=repeats)
    print(f"  {name}: {bm!r}; path: {why}", file=sys.stderr)
    rows = [_row(f"{name}, vs the dense bool mask", _ms(ta), _ms(tb), f"{tb / ta:.1f}x faster", ">= 10x faster",
                 tb / ta >= 10)]
    if flops:
        sdpa_step = train_step(lambda: F.scaled_dot_product_attention(q, k, v), xs)
        ta, tc = time_pair(sparse_step, sdpa_step, warmup=1, repeats=repeats)
        allowed = int(dense.sum()) * 8
        rate_a = FLOPS_PER_ENTRY * 64 * allowed / ta / 1e9
        rate_c = FLOPS_PER_ENTRY * 64 * 8 * t * t / tc / 1e9
        rows.append(_row(f"{name}, FLOP rate on its {allowed / (8 * t * t):.1%} allowed entries vs dense SDPA "
                         f"(no mask, {_ms(tc)})", f"{rate_a:.1f} GFLOP/s", f"{rate_c:.1f} GFLOP/s",
                         f"{rate_a / rate_c:.2f}", ">= 0.40", rate_a / rate_c >= 0.4))
    return rows


def alibi_rows(t: int, repeats: int) -> list[str]:
    h = 8
    slopes = alibi_slopes(h)

    def plain(score: torch.Tensor, b: torch.Tensor, hi: torch.Tensor, qi: torch.Tensor,
              ki: torch.Tensor) -> torch.Tensor:
        return score + slopes[hi] * (ki - qi)

    bm = masks.create_block_mask(masks.causal_mod, None, None, t, t)
    biases = {"causal": alibi_bias(h, t)}  # (1, H, T, T); each dropped after its comparison
    xs = qkv(h, t)
    q, k, v = xs
    sdpa = train_step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=biases['causal']), xs)
    fused = train_step(lambda: attention(q, k, v, mask=bm, score_mod=alibi_mod(h)), xs)
    ta, tb = time_pair(fused, sdpa, warmup=1, repeats=repeats)
    rows = [_row(f"ALiBi `alibi_mod` on a causal BlockMask, T={t}, vs SDPA with a precomputed (1, H, T, T) bias",
                 _ms(ta), _ms(tb), f"{ta / tb:.2f}x the time", "<= 1.3x", ta / tb <= 1.3)]
    tc, td = time_pair(train_step(lambda: attention(q, k, v, mask=bm, score_mod=plain), xs), sdpa, warmup=1,
                       repeats=repeats)
    rows.append(_row(f"ALiBi as a plain `score_mod` (step-by-step tiles), T={t}, same baseline", _ms(tc), _ms(td),
                     f"{tc / td:.2f}x the time", "(no target)", None))
    biases = {"none": alibi_bias(h, t, causal=False)}
    te, tf = time_pair(train_step(lambda: attention(q, k, v, score_mod=alibi_mod(h)), xs),
                       train_step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=biases['none']), xs),
                       warmup=1, repeats=repeats)
    rows.append(_row(f"ALiBi `alibi_mod`, no mask (non-causal), T={t}, vs SDPA with the bias", _ms(te), _ms(tf),
                     f"{te / tf:.2f}x the time", "(no target)", None))
    biases.clear()
    p = {"B": 1, "H": h, "T": t, "Dh": 64, "causal": True}
    mem_a, _ = peak_memory_mib("alibi-score-mod", p)
    mem_b, _ = peak_memory_mib("alibi-bias", p)
    rows.append(_row(f"ALiBi `alibi_mod` peak memory, T={t}, vs building the bias + SDPA (fresh process each)",
                     f"{mem_a:.0f} MiB", f"{mem_b:.0f} MiB", f"{mem_a / mem_b:.2f}x", "<= 0.25x",
                     mem_a / mem_b <= 0.25))
    return rows


def flex_rows(t: int) -> list[str]:
    def mod(b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
        return (ki <= qi) & (qi - ki <= 256)

    r = flex_forward(mod, t)
    print(f"  flex: max |ours - flex| = {r['max_abs_diff']:.2e}; flex backward: {r['flex_backward_error']}",
          file=sys.stderr)
    back = "raises " + str(r["flex_backward_error"]).split(":")[0] if r["flex_backward_error"] else "runs"
    return [
        _row(f"forward, causal window 256, T={t}, vs compiled `flex_attention` (same block mask; compile "
             f"{r['compile_s']:.1f} s)", _ms(r["ours_s"]), _ms(r["flex_s"]),
             f"{r['ours_s'] / r['flex_s']:.2f}x the time", "<= 1x", r["ours_s"] <= r["flex_s"]),
        _row(f"backward, same mask, T={t}", "runs" if r["ours_backward_ok"] else "fails", back,
             "-", "ours runs where flex raises", bool(r["ours_backward_ok"])),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lengths / 4, fewer repeats")
    parser.add_argument("--no-flex", action="store_true", help="skip the FlexAttention comparison (it compiles)")
    args = parser.parse_args(argv)
    t = 2048 if args.quick else 8192
    repeats = 3 if args.quick else 5
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}; fwd+bwd, B=1 H=8 Dh=64, block_size=128")
    print("| case | attnkit | baseline | ratio | target | |")
    print("|---|---|---|---|---|---|")
    for row in masked_case(f"causal sliding window 256, T={t}", window_mask(t), t, repeats, flops=True):
        print(row, flush=True)
    ids = torch.arange(t) // (t // 16)
    bm = masks.create_block_mask(masks.document_mod(ids), None, None, t, t)
    for row in masked_case(f"16 packed documents of {t // 16} in T={t}", bm, t, repeats):
        print(row, flush=True)
    for row in alibi_rows(t // 2, repeats):
        print(row, flush=True)
    if not args.no_flex:
        for row in flex_rows(t // 2):
            print(row, flush=True)
    print(f"# load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
