"""Flash-style tiling with the NumPy twin: the online softmax, and why memory is linear.

Plain attention stores the ``(Tq, Tk)`` scores: memory grows with ``T^2``.
FlashAttention (Dao et al., 2022) never stores them. The keys arrive in
blocks ``S_j`` of a query row's scores, and three running quantities are
rescaled as each block comes (Milakov & Gimelshein, 2018):

    m' = max(m, rowmax S_j),   alpha = exp(m - m'),   P_j = exp(S_j - m')
    l' = alpha l + rowsum P_j,   acc' = alpha acc + P_j V_j,   O = acc / l

Multiplying by ``alpha`` moves what was summed with the old maximum ``m`` onto
the new one ``m'``, so at the end ``acc / l`` is exactly ``softmax(S) V``, and
no exponent is ever positive (no overflow). The script walks one query row
through four key blocks by hand, printing ``m``, ``alpha`` and ``l`` at each;
then compares :func:`attnkit.reference.chunked_attention_forward` (tiles of
64 x 64) and its backward, which recomputes each tile from the saved row
log-sum-exp, with the plain twin; and measures the peak memory of each as T
grows (``tracemalloc``: NumPy reports its arrays to it). NumPy only.

Try this: in the walk-through, give the last key block a score 100 larger
than the others. Which ``alpha`` becomes 0, and is the result still exact?
(Answer: the last step's alpha is about exp(-100) = 0: everything before is
forgotten, correctly, since those keys get weight ~0; the result still
matches the plain softmax.)
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from _common import output_dir, saved, show, small
from matplotlib.figure import Figure

from attnkit.reference import attention_backward, attention_forward
from attnkit.reference.chunked import chunked_attention_backward, chunked_attention_forward

OUTPUTS = ["22_flash_tiling.png", "22_flash_tiling.txt"]


def peak_bytes(fn: object) -> int:
    """The peak of the memory NumPy allocates while ``fn()`` runs."""
    assert callable(fn)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    out = output_dir(__doc__)
    rng = np.random.default_rng(0)
    lines = []

    # 1. One query row, four key blocks, by hand.
    t, dh, block = 16, 8, 4
    q1 = rng.normal(size=dh)  # (Dh,)
    k1, v1 = rng.normal(size=(t, dh)), rng.normal(size=(t, dh))  # (T, Dh)
    s = k1 @ q1 / np.sqrt(dh)  # (T,): this row's scores; only one block is looked at at a time
    m, row_sum, acc = -np.inf, 0.0, np.zeros(dh)  # m, l and acc of the formula
    for j in range(0, t, block):
        s_j = s[j : j + block]  # (block,)
        m_new = max(m, float(s_j.max()))
        alpha = np.exp(m - m_new)  # 0 on the first block (m = -inf)
        p_j = np.exp(s_j - m_new)  # every exponent <= 0
        row_sum = alpha * row_sum + p_j.sum()
        acc = alpha * acc + p_j @ v1[j : j + block]
        lines.append(f"keys {j:>2}-{j + block - 1:>2}: m = {m_new:+.3f}, alpha = {alpha:.3f}, l = {row_sum:.3f}")
        m = m_new
    plain = np.exp(s - s.max()) / np.exp(s - s.max()).sum() @ v1  # (Dh,)
    lines.append(f"one row: max |acc / l - softmax(s) v| = {np.abs(acc / row_sum - plain).max():.1e}")

    # 2. The chunked twin against the plain twin, forward and backward.
    b, h, n = 1, 2, 256
    q, k, v = (rng.normal(size=(b, h, n, 32)).astype(np.float32) for _ in range(3))  # (B, H, T, Dh)
    out_plain, cache = attention_forward(q, k, v, causal=True)
    out_tiles, lse = chunked_attention_forward(q, k, v, causal=True, block_q=64, block_k=64)
    show("output (tiles)", out_tiles)
    show("row log-sum-exp", lse)
    grad = rng.normal(size=out_plain.shape).astype(np.float32)
    plain_grads = attention_backward(grad, cache)[:3]
    tile_grads = chunked_attention_backward(grad, q, k, v, out_tiles, lse, causal=True, block_q=64, block_k=64)[:3]
    lines.append(f"T={n}, tiles of 64: max |tiles - plain| output {np.abs(out_tiles - out_plain).max():.1e}, "
                 "gradients " + ", ".join(f"{name} {np.abs(a - g).max():.1e}"
                                          for name, a, g in zip("qkv", tile_grads, plain_grads, strict=True)))

    # 3. Peak memory as T grows: plain is quadratic, tiles linear.
    lengths = [256, 512, 1024] if small() else [256, 512, 1024, 2048, 4096]
    plain_mb, tiles_mb = [], []
    for n in lengths:
        q, k, v = (rng.normal(size=(1, 1, n, 32)).astype(np.float32) for _ in range(3))
        plain_mb.append(peak_bytes(lambda: attention_forward(q, k, v)) / 2**20)  # noqa: B023
        tiles_mb.append(peak_bytes(lambda: chunked_attention_forward(q, k, v, block_q=64, block_k=64)) / 2**20)  # noqa: B023
        lines.append(f"T={n:>5}: peak memory plain {plain_mb[-1]:7.2f} MiB, tiles {tiles_mb[-1]:6.2f} MiB")
    lines.append(f"T x{lengths[-1] // lengths[0]}: plain memory x{plain_mb[-1] / plain_mb[0]:.0f}, "
                 f"tiles x{tiles_mb[-1] / tiles_mb[0]:.0f}")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    ax.loglog(lengths, plain_mb, "o-", label="plain: stores the (T, T) scores")
    ax.loglog(lengths, tiles_mb, "s-", label="tiles of 64 x 64: online softmax")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("peak memory of the forward (MiB)")
    ax.set_title("NumPy twin, one head, Dh = 32")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
