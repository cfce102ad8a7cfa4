"""What ``attnkit.inspect.capture`` costs: a forward pass with the capture against one without.

Usage::

    python benchmarks/capture_overhead.py [--length 512] [--batch 2] [--repeats 9] [--threads 2]

A 6-layer ``nn.TransformerEncoder`` (d_model 512, 8 heads, feed-forward 2048,
eval mode, no grad: PyTorch's fused fast path, on a nested tensor when a batch
is padded) runs on padded batches of ``T`` tokens, with and without a capture
open, timed back to back in pairs (alternating which goes first) after one
warm-up of each. The capture records every layer's
``(B, 8, T, T)`` weights. Prints the median times, the median of the pairwise ratios (target <= 1.5)
and whether the outputs were bit-for-bit equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from attnkit.inspect import capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True)
    model = nn.TransformerEncoder(layer, 6).eval()
    x = torch.randn(args.batch, args.length, 512)  # (B, T, D)
    lengths = torch.linspace(args.length // 2, args.length, args.batch).long()
    padding = torch.arange(args.length)[None, :] >= lengths[:, None]

    def plain() -> torch.Tensor:
        return model(x, src_key_padding_mask=padding)

    def captured() -> torch.Tensor:
        with capture(model) as cap:
            out = model(x, src_key_padding_mask=padding)
        assert len(cap.weights) == 6
        return out

    with torch.no_grad():
        same = torch.equal(plain(), captured())  # also the warm-up of each side
        plain_t, capture_t, ratios = [], [], []
        for i in range(args.repeats):  # back to back, alternating which goes first: load hits both alike
            first, second = (plain, captured) if i % 2 == 0 else (captured, plain)
            t0 = time.perf_counter()
            first()
            t1 = time.perf_counter()
            second()
            t2 = time.perf_counter()
            tp, tc = (t1 - t0, t2 - t1) if i % 2 == 0 else (t2 - t1, t1 - t0)
            plain_t.append(tp)
            capture_t.append(tc)
            ratios.append(tc / tp)
    print(f"nn.TransformerEncoder 6 x (512, 8 heads), B={args.batch}, T={args.length}, "
          f"{torch.get_num_threads()} threads; outputs bit-for-bit equal: {same}")
    print(f"  forward                {statistics.median(plain_t) * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"  forward with capture   {statistics.median(capture_t) * 1e3:8.1f} ms")
    print(f"  ratio (median of the {args.repeats} back-to-back pairs) {statistics.median(ratios):.2f} "
          f"(pairs: {min(ratios):.2f} .. {max(ratios):.2f}; target <= 1.5)")


if __name__ == "__main__":
    main()
