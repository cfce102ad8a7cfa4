"""What ``attnkit predict --explain`` costs: the pooling weights only, against the plain forward.

Usage::

    python benchmarks/explain_weights.py [--batch 64] [--length 256] [--repeats 15]

A DocumentClassifier (default config) runs on a batch of padded documents
three ways, interleaved in one process: the plain forward (logits only), the
explain path (``return_weights="pooling"``: the pooling weights and no encoder
maps) and every weight (``return_weights=True``). Prints the median times and
the ratios to the plain forward.
"""

from __future__ import annotations

import argparse

import torch

from attnkit.bench.timing import time_one
from attnkit.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model("document", {"vocab_size": 20000, "num_classes": 2, "max_len": args.length}).eval()
    ids = torch.randint(2, 20000, (args.batch, args.length))  # (B, T)
    lengths = torch.randint(args.length // 4, args.length + 1, (args.batch,))  # (B,)
    sides = {
        "plain forward (logits)": lambda: model(ids, lengths),
        "explain: return_weights='pooling'": lambda: model(ids, lengths, return_weights="pooling"),
        "every weight: return_weights=True": lambda: model(ids, lengths, return_weights=True),
    }
    with torch.no_grad():
        times = {name: [] for name in sides}
        for _ in range(3):  # interleaved rounds, so a burst of load hits every side alike
            for name, fn in sides.items():
                times[name].append(time_one(fn, warmup=1, repeats=max(1, args.repeats // 3)))
    medians = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    base = medians["plain forward (logits)"]
    print(f"DocumentClassifier, B={args.batch}, T={args.length}, {torch.get_num_threads()} threads")
    for name, seconds in medians.items():
        print(f"  {name:<36} {seconds * 1e3:8.1f} ms   ratio to plain {seconds / base:.2f}")


if __name__ == "__main__":
    main()
