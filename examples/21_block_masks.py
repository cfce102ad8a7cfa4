"""Block masks and score mods: attention that skips masked work, ALiBi and soft-capping.

A dense mask still pays for every (query, key) pair, allowed or not. A
*block mask* cuts the ``(Tq, Tk)`` grid into tiles of ``block_size`` and
records which tiles are

* **empty**: no query of the tile may see any key of it: skipped entirely;
* **full**: every pair allowed: computed without any element mask;
* **partial**: some pairs allowed: computed, and the element mask kept.

:func:`attnkit.masks.create_block_mask` builds it from a *mask mod*, a
function ``mask_mod(b, h, q_idx, kv_idx)`` returning True where a query may
attend a key. Here: causal attention within a sliding window, so most tiles
are empty. The script prints the tile counts, the equality with the same mask
passed densely, and the time each takes.

A *score mod* ``score_mod(score, b, h, q_idx, kv_idx)`` rewrites the scaled
scores tile by tile, so no ``(Tq, Tk)`` bias is ever built:

* ALiBi (Press et al., 2022) adds ``slope_h * (kv_idx - q_idx)``: a penalty
  growing with distance, a different slope per head, no position embedding;
* soft-capping (Gemma 2) replaces a score ``s`` by ``cap * tanh(s / cap)``:
  no score exceeds ``cap``, so no single key can take all the weight.

Each is checked against the formula written out by hand.

Try this: double the window. How does the share of skipped tiles change, and
does the block-mask time follow? (Answer: fewer tiles are empty, so the share
skipped falls and the time grows with the number of non-empty tiles.)
"""

from __future__ import annotations

import time

import torch
from _common import output_dir, saved, show, small
from matplotlib.figure import Figure

from attnkit import attention, masks, score_mods

OUTPUTS = ["21_block_mask.png", "21_block_mask.txt"]


def tile_kinds(block_mask: masks.BlockMask) -> torch.Tensor:
    """``(nQ, nK)``: 0 empty, 1 full, 2 partial, for the first (b, h) stored."""
    kv, kind = block_mask.kv_indices[0, 0], block_mask.elem_index[0, 0]  # (nQ, K) each
    _, _, tq, tk = block_mask.shape
    bs = block_mask.block_size
    grid = torch.zeros(-(-tq // bs), -(-tk // bs), dtype=torch.long)
    for i in range(grid.shape[0]):
        for j, e in zip(kv[i].tolist(), kind[i].tolist(), strict=True):
            if e > 0:
                grid[i, j] = 1 if e == 1 else 2
    return grid


def best_ms(fn: object, repeats: int = 3) -> float:
    assert callable(fn)
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t, bs, window = (512, 64, 160) if small() else (4096, 128, 320)
    h, dh = 4, 32
    q, k, v = (torch.randn(1, h, t, dh) for _ in range(3))  # (B, H, T, Dh)
    lines = []

    mod = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(window))
    block_mask = masks.create_block_mask(mod, None, None, t, t, block_size=bs)
    dense = block_mask.to_dense()  # (1, 1, T, T) bool: the same mask, element by element
    show("q, k, v", q)
    show("dense mask", dense)
    kinds = tile_kinds(block_mask)
    c = block_mask.counts
    lines.append(f"T={t}, tiles of {bs}: {c['empty']} empty (skipped), {c['partial']} partial, {c['full']} full "
                 f"= {100 * block_mask.sparsity():.0f}% skipped")
    with torch.no_grad():
        out_blocks = attention(q, k, v, mask=block_mask)
        out_dense = attention(q, k, v, mask=dense)
        lines.append(f"max |block mask - dense mask| = {(out_blocks - out_dense).abs().max():.1e}")
        lines.append(f"time: dense mask {best_ms(lambda: attention(q, k, v, mask=dense)):.1f} ms, "
                     f"block mask {best_ms(lambda: attention(q, k, v, mask=block_mask)):.1f} ms")

        # ALiBi: by hand, the bias is slope_h * (j - i) added to the scaled scores.
        slopes = torch.tensor([2.0 ** -(i + 1) for i in range(h)])
        with_alibi = attention(q, k, v, mask=block_mask, score_mod=score_mods.alibi_mod(slopes))
        idx = torch.arange(t)
        bias = slopes[:, None, None] * (idx[None, None, :] - idx[None, :, None])  # (H, T, T)
        scores = q @ k.transpose(-2, -1) / dh**0.5  # (B, H, T, T)
        by_hand = (scores + bias).masked_fill(~dense, float("-inf")).softmax(-1) @ v
        lines.append(f"ALiBi score mod vs by hand: max difference {(with_alibi - by_hand).abs().max():.1e}")

        # Soft-capping: cap * tanh(s / cap), then the softmax.
        cap = 2.0
        capped = attention(q, k, v, mask=block_mask, score_mod=score_mods.soft_cap_mod(cap))
        by_hand = (cap * torch.tanh(scores / cap)).masked_fill(~dense, float("-inf")).softmax(-1) @ v
        lines.append(f"soft-capping (cap {cap}) vs by hand: max difference {(capped - by_hand).abs().max():.1e}; "
                     f"largest score {scores.max():.2f} before, {cap * torch.tanh(scores.max() / cap):.2f} after")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    fig = Figure(figsize=(12, 4))
    axes = fig.subplots(1, 3)
    axes[0].imshow(kinds.numpy(), cmap="Greys", vmin=0, vmax=2)
    axes[0].set_title("tiles: white empty (skipped),\ngrey full, black partial", fontsize=9)
    axes[0].set_xlabel(f"key tile ({bs} keys)")
    axes[0].set_ylabel(f"query tile ({bs} queries)")
    axes[1].imshow(dense[0, 0].numpy(), cmap="Greys", vmin=0, vmax=1)
    axes[1].set_title(f"the mask: causal, window {window}", fontsize=9)
    axes[1].set_xlabel("key position")
    axes[1].set_ylabel("query position")
    shown = min(t, 64)
    image = axes[2].imshow(bias[0, :shown, :shown].masked_fill(~dense[0, 0, :shown, :shown], float("nan")).numpy())
    axes[2].set_title(f"ALiBi bias of head 0 (slope {slopes[0]:.2f}),\nfirst {shown} positions", fontsize=9)
    axes[2].set_xlabel("key position")
    axes[2].set_ylabel("query position")
    fig.colorbar(image, ax=axes[2])
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
