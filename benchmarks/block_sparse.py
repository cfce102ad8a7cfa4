"""Block-sparse attention against dense masks and a precomputed bias, forward+backward.

Usage::

    python benchmarks/block_sparse.py [--quick]

Three cases, each side timed in the same run, interleaved
(:func:`attnkit.bench.timing.time_pair`), medians:

* causal sliding window 256, B=1 H=8 T=8192 Dh=64: ``attention(mask=BlockMask)``
  against ``attention(mask=<the equivalent dense bool mask>)`` (target >= 10x faster);
* 16 packed documents of 512 tokens in T=8192: the same comparison (>= 10x);
* ALiBi as a ``score_mod`` on a causal BlockMask at T=4096 against
  ``F.scaled_dot_product_attention`` with a precomputed (T, T) bias holding the
  ALiBi slopes and the causal ``-inf`` (target <= 1.3x the time).

``--quick`` divides the lengths by 4 (the targets are for the full sizes).
Building the BlockMask is done once, outside the timed calls, as a model
builds it once per batch layout.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnkit import masks
from attnkit.bench.timing import time_pair
from attnkit.functional import attention, last_backend


def _qkv(h: int, t: int, dh: int = 64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, h, t, dh, generator=g).requires_grad_() for _ in range(3)]


def _step(fn: Callable[[], torch.Tensor], xs: list[torch.Tensor]) -> Callable[[], None]:
    def run() -> None:
        for x in xs:
            x.grad = None
        fn().sum().backward()

    return run


def _report(name: str, a: float, b: float, target: str, ok: bool) -> str:
    return f"| {name} | {a * 1e3:.0f} ms | {b * 1e3:.0f} ms | {a / b:.3f}x ({b / a:.1f}x faster) | {target} | {'PASS' if ok else 'MISS'} |"


def masked_case(name: str, mod: masks.MaskMod, t: int, repeats: int) -> str:
    bm = masks.create_block_mask(mod, None, None, t, t)
    dense = bm.to_dense()  # (1, 1, T, T)
    xs = _qkv(8, t)
    q, k, v = xs
    sparse_step = _step(lambda: attention(q, k, v, mask=bm), xs)
    sparse_step()
    why = last_backend()
    dense_step = _step(lambda: attention(q, k, v, mask=dense), xs)
    ta, tb = time_pair(sparse_step, dense_step, warmup=1, repeats=repeats)
    print(f"  {name}: {bm!r}; path: {why}", file=sys.stderr)
    return _report(name, ta, tb, ">= 10x faster", tb / ta >= 10)


def alibi_case(t: int, repeats: int) -> str:
    h = 8
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)])

    def alibi(score: torch.Tensor, b: torch.Tensor, hi: torch.Tensor, qi: torch.Tensor,
              ki: torch.Tensor) -> torch.Tensor:
        return score + slopes[hi] * (ki - qi)

    bm = masks.create_block_mask(masks.causal_mod, None, None, t, t)
    pos = torch.arange(t)
    rel = (pos.view(1, t) - pos.view(t, 1)).float()
    bias = (slopes.view(h, 1, 1) * rel).masked_fill(rel > 0, float("-inf"))[None]  # (1, H, T, T)
    xs = _qkv(h, t)
    q, k, v = xs
    flex_step = _step(lambda: attention(q, k, v, mask=bm, score_mod=alibi), xs)
    sdpa_step = _step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias), xs)
    ta, tb = time_pair(flex_step, sdpa_step, warmup=1, repeats=repeats)
    return _report(f"ALiBi score_mod, causal, T={t}, vs SDPA with a (T, T) bias", ta, tb,
                   "<= 1.3x the time", ta / tb <= 1.3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lengths / 4, fewer repeats")
    args = parser.parse_args(argv)
    t = 2048 if args.quick else 8192
    repeats = 3 if args.quick else 5
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}; fwd+bwd, B=1 H=8 Dh=64, block_size=128")
    print("| case | BlockMask | baseline | ratio | target | |")
    print("|---|---|---|---|---|---|")
    window = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(256))
    print(masked_case(f"causal sliding window 256, T={t}, vs dense bool mask", window, t, repeats),
          flush=True)
    ids = torch.arange(t) // (t // 16)
    print(masked_case(f"16 packed documents of {t // 16} in T={t}, vs dense bool mask",
                      masks.document_mod(ids), t, repeats), flush=True)
    print(alibi_case(t // 2, repeats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
