"""Speed and memory of the NumPy twin against torch, printed as ratios from one run.

1. Attention forward throughput, float32, B=1 H=8 T=4096 Dh=64: NumPy chunked
   attention vs ``torch.nn.functional.scaled_dot_product_attention``
   (target: NumPy >= 50% of torch's throughput).
2. Peak memory of a chunked forward at T=32768 H=8 Dh=64, measured in a
   fresh subprocess with ``ru_maxrss`` (target: < 2 GB; the plain path would
   need 8*32768^2*4 bytes = 32 GiB for the scores alone).
3. One training step (forward, backward, AdamW) of the NumPy Transformer
   classifier vs the identical torch model (attnkit DocumentClassifier, same
   weights, same batch) (target: NumPy <= 2x torch's time).

Both libraries use the same number of threads (``--threads``, default 1: the
machine is shared, and a spinning BLAS thread on a busy core distorts timings);
NumPy gets its threads as chunked-attention ``workers`` over heads, with a
single-threaded BLAS.

    nice -n 10 .venv/bin/python benchmarks/bench_reference.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ARGS = argparse.ArgumentParser(description="NumPy twin vs torch")
ARGS.add_argument("--threads", type=int, default=1)
ARGS.add_argument("--repeats", type=int, default=3)
ARGS.add_argument("--long-t", type=int, default=32768)
ARGS.add_argument("--block-q", type=int, default=128)
ARGS.add_argument("--block-k", type=int, default=4096)
ARGS.add_argument("--child-long", action="store_true", help=argparse.SUPPRESS)
OPTS = ARGS.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = str(OPTS.threads)

import numpy as np  # noqa: E402


def best_time(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def child_long() -> None:
    """Run in a fresh process: one chunked forward at length T, then report peak RSS."""
    import resource

    from attnkit.reference.chunked import chunked_attention_forward

    t = OPTS.long_t
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, t, 64), dtype=np.float32) for _ in range(3))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    out, _ = chunked_attention_forward(q, k, v, block_q=OPTS.block_q, block_k=OPTS.block_k, workers=OPTS.threads)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    assert np.isfinite(out).all()
    print(f"{peak / 2**20:.3f} {base / 2**20:.3f} {elapsed:.1f}")


def attention_throughput() -> float:
    import torch
    import torch.nn.functional as F

    from attnkit.reference.chunked import chunked_attention_forward

    torch.set_num_threads(OPTS.threads)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 4096, 64), dtype=np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    with torch.inference_mode():
        t_torch = best_time(lambda: F.scaled_dot_product_attention(tq, tk, tv), OPTS.repeats)
        ref = F.scaled_dot_product_attention(tq, tk, tv).numpy()
    t_np = best_time(lambda: chunked_attention_forward(q, k, v, block_q=OPTS.block_q, block_k=OPTS.block_k,
                                                       workers=OPTS.threads),
                     OPTS.repeats)
    out, _ = chunked_attention_forward(q, k, v, block_q=OPTS.block_q, block_k=OPTS.block_k, workers=OPTS.threads)
    flops = 4 * 8 * 4096 * 4096 * 64
    print(f"[1] attention forward B=1 H=8 T=4096 Dh=64 float32 (max |diff| {np.abs(out - ref).max():.1e})")
    print(f"    torch SDPA   {t_torch * 1e3:8.1f} ms  {flops / t_torch / 1e9:6.1f} GFLOP/s")
    print(f"    NumPy chunked{t_np * 1e3:8.1f} ms  {flops / t_np / 1e9:6.1f} GFLOP/s  "
          f"(block_q={OPTS.block_q}, block_k={OPTS.block_k}, workers={OPTS.threads})")
    ratio = t_torch / t_np
    print(f"    RATIO NumPy/torch throughput = {ratio:.2f}  (target >= 0.50)")
    return ratio


def long_memory() -> float:
    cmd = [sys.executable, __file__, "--child-long", "--threads", str(OPTS.threads),
           "--long-t", str(OPTS.long_t), "--block-q", str(OPTS.block_q), "--block-k", str(OPTS.block_k)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    peak, base, elapsed = (float(x) for x in done.stdout.split()[-3:])
    print(f"[2] chunked forward T={OPTS.long_t} H=8 Dh=64 float32 in a subprocess: "
          f"peak RSS {peak:.2f} GiB (inputs allocated: {base:.2f} GiB), {elapsed:.0f} s")
    print(f"    PEAK {peak:.2f} GiB  (target < 2 GB)")
    return peak


def training_step() -> float:
    import torch

    from attnkit.blocks import TransformerLayerConfig
    from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
    from attnkit.reference.losses import SoftmaxCrossEntropy
    from attnkit.reference.models import ClassifierConfig, TransformerClassifier
    from attnkit.reference.optim import AdamW

    torch.set_num_threads(OPTS.threads)
    cfg = ClassifierConfig(vocab_size=9000, layer=TransformerLayerConfig(64, 4, 128, dropout=0.1), num_layers=1)
    ours = TransformerClassifier(cfg)
    theirs = DocumentClassifier(DocumentClassifierConfig(
        vocab_size=9000, num_classes=2, layer=cfg.layer, num_layers=1,
        pooling="mean", positional="sinusoidal"))
    theirs.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ours.parameters().items()})
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 40, size=32)
    ids = np.zeros((32, int(lengths.max())), dtype=np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1, 9000, size=n)
    labels = rng.integers(0, 2, size=32)
    opt = AdamW(ours.parameters(), ours.gradients(), lr=1e-3)
    loss = SoftmaxCrossEntropy()

    def np_step() -> None:
        ours.zero_grad()
        logits = ours.forward(ids)
        loss.forward(logits, labels)
        ours.backward(loss.backward().astype(np.float32))
        opt.step()

    topt = torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    tids, tlen, tlab = torch.from_numpy(ids), torch.from_numpy(lengths), torch.from_numpy(labels)

    def torch_step() -> None:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(theirs(tids, tlen), tlab).backward()
        topt.step()

    reps = max(OPTS.repeats, 10)
    t_np = best_time(np_step, reps)
    t_torch = best_time(torch_step, reps)
    print(f"[3] training step, Transformer classifier (1 layer, D=64, vocab 9000), batch 32 x {ids.shape[1]}")
    print(f"    torch {t_torch * 1e3:7.1f} ms   NumPy {t_np * 1e3:7.1f} ms")
    print(f"    RATIO NumPy/torch time = {t_np / t_torch:.2f}  (target <= 2.0)")
    return t_np / t_torch


def main() -> None:
    print(f"threads {OPTS.threads}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    attention_throughput()
    training_step()
    long_memory()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    if OPTS.child_long:
        child_long()
    else:
        main()
