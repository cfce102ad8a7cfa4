"""What ``attnkit.inspect.capture`` costs: a forward pass with the capture against one without.

Usage::

    python benchmarks/capture_overhead.py [--length 512] [--batch 2] [--repeats 9] [--threads 2]

A 6-layer ``nn.TransformerEncoder`` (d_model 512, 8 heads, feed-forward 2048,
eval mode, no grad: PyTorch's fused fast path, on a nested tensor when a batch
is padded) runs on padded batches of ``T`` tokens, with and without a capture
open, interleaved in one process. The capture records every layer's
``(B, 8, T, T)`` weights. Prints the median times, the ratio (target <= 1.5)
and whether the outputs were bit-for-bit equal.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from attnkit.bench.timing import time_one
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
    padding = torch.arange(args.length)[None, :] >= torch.linspace(args.length // 2, args.length, args.batch).long()[:, None]

    def plain() -> torch.Tensor:
        return model(x, src_key_padding_mask=padding)

    def captured() -> torch.Tensor:
        with capture(model) as cap:
            out = model(x, src_key_padding_mask=padding)
        assert len(cap.weights) == 6
        return out

    sides = {"forward": plain, "forward with capture": captured}
    with torch.no_grad():
        same = torch.equal(plain(), captured())
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(3):  # interleaved rounds, so a burst of load hits both sides alike
            for name, fn in sides.items():
                times[name].append(time_one(fn, warmup=1, repeats=max(1, args.repeats // 3)))
    medians = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    base = medians["forward"]
    print(f"nn.TransformerEncoder 6 x (512, 8 heads), B={args.batch}, T={args.length}, "
          f"{torch.get_num_threads()} threads; outputs bit-for-bit equal: {same}")
    for name, seconds in medians.items():
        print(f"  {name:<22} {seconds * 1e3:8.1f} ms   ratio {seconds / base:.2f}")


if __name__ == "__main__":
    main()
