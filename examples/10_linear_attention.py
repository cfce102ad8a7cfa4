"""Linear ("efficient") attention (Shen et al., 2021) and its cost as T grows.

Softmax attention builds the ``(Tq, Tk)`` score matrix: time and memory grow
with ``T^2``. Efficient attention normalises queries and keys separately and
multiplies in the other order,

    E(Q, K, V) = softmax_D(Q) (softmax_T(K)^T V)

where ``softmax_T(K)^T V`` is a small ``(Dh, Dv)`` matrix: the cost is
``O(T Dh^2)``, linear in the length. The weights it applies implicitly can
still be computed (quadratically) for inspection.

This script times both on the same split-head inputs for growing T and plots
the two curves (log-log: slope 2 versus slope 1).

Try this: from ``10_timings.csv``, compute the slope of log(time) against
log(T) between the two largest lengths, for each kind. (Answer: near 2 for
softmax attention, near 1 for linear attention; at small T fixed overheads
flatten both.)
"""

from __future__ import annotations

import time
from functools import partial

import torch
from _common import output_dir, saved, show, small
from matplotlib.figure import Figure

from attnkit import attention
from attnkit.layers.linear import LinearAttention, linear_attention

OUTPUTS = ["10_linear_vs_softmax.png", "10_timings.csv"]


def best_time(fn: object, repeats: int) -> float:
    """Best wall time of ``repeats`` calls, in milliseconds (best = least disturbed)."""
    assert callable(fn)
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    # One thread: timings on a shared machine are steadier, and the comparison is about
    # how the cost grows with T, not about parallel speed-up.
    torch.set_num_threads(1)
    layer = LinearAttention(32, 4).eval()
    x = torch.randn(2, 12, 32)  # (B, T, D)
    with torch.no_grad():
        y, implied = layer(x, return_weights=True)
    show("LinearAttention output", y)
    show("implied weights", implied)
    print("implied weight rows sum to 1:", bool(torch.allclose(implied.sum(-1), torch.ones(2, 4, 12), atol=1e-5)))

    b, h, dh = 1, 4, 32
    lengths = [128, 256, 512] if small() else [256, 512, 1024, 2048, 4096, 8192]
    repeats = 2 if small() else 5
    rows = ["T,softmax_ms,linear_ms"]
    soft_ms, lin_ms = [], []
    with torch.no_grad():
        for t in lengths:
            q, k, v = (torch.randn(b, h, t, dh) for _ in range(3))  # (B, H, T, Dh)
            soft_ms.append(best_time(partial(attention, q, k, v, backend="math"), repeats))
            lin_ms.append(best_time(partial(linear_attention, q, k, v), repeats))
            rows.append(f"{t},{soft_ms[-1]:.3f},{lin_ms[-1]:.3f}")
            print(f"T={t:>5}: softmax (math path) {soft_ms[-1]:8.2f} ms   linear {lin_ms[-1]:8.2f} ms")
    (out / OUTPUTS[1]).write_text("\n".join(rows) + "\n", encoding="utf-8")

    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    ax.loglog(lengths, soft_ms, "o-", label="softmax attention, O(T²)")
    ax.loglog(lengths, lin_ms, "s-", label="linear attention, O(T)")
    ax.set_xticks(lengths, [str(t) for t in lengths])
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("forward time (ms, best of runs)")
    ax.set_title(f"B={b}, H={h}, Dh={dh}, CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
