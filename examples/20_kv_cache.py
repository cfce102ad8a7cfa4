"""Decoding with a key/value cache, step by step; rolling and attention-sink caches.

A decoder writes one token at a time, and token ``t`` attends to tokens
``0..t``. The keys and values of the earlier tokens never change, so instead
of recomputing them at every step, :class:`attnkit.KVCache` keeps them: step
``t`` projects only the new token, appends its key and value, and attends
with one query. The cache grows by one position per step, and the outputs are
those of full recomputation (a causal pass over the whole prefix), which the
script prints, with the time each way takes.

On a long stream the cache itself grows without end. Two bounded caches keep
it flat:

* :class:`~attnkit.layers.kv_cache.RollingKVCache` (``window=w``): each query
  sees itself and the ``w`` positions before it, and the cache keeps those
  ``w`` between steps: a sliding-window attention (Mistral);
* :class:`~attnkit.layers.kv_cache.AttentionSinkCache` (``sinks=s, window=w``):
  the first ``s`` positions as well (StreamingLLM, Xiao et al., 2023): the
  first tokens collect a large share of attention whatever they hold, and a
  window that drops them upsets the softmax.

Each equals full recomputation under its own mask (``cache.mask_mod()``),
printed too; the figure draws which keys each query sees and the cache size.

Try this: with ``window=4`` and ``sinks=2``, how many positions does the sink
cache hold between steps after 40 steps? (Answer: 2 + 4 = 6: the two sinks
and the last four positions.)
"""

from __future__ import annotations

import time

import torch
from _common import output_dir, saved, show, small
from matplotlib.figure import Figure

from attnkit import KVCache, MultiHeadAttention
from attnkit.layers.kv_cache import AttentionSinkCache, RollingKVCache

OUTPUTS = ["20_kv_cache.png", "20_kv_cache.txt"]


def decode(mha: MultiHeadAttention, x: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, list[int]]:
    """Feed ``x`` one position at a time through ``cache``; the outputs ``(B, T, D)`` and the cache sizes."""
    outputs, sizes = [], []
    for t in range(x.shape[1]):
        outputs.append(mha(x[:, t : t + 1], cache=cache))  # (B, 1, D): one new query
        sizes.append(len(cache))
    return torch.cat(outputs, dim=1), sizes


def dense(mask_mod: object, t: int) -> torch.Tensor:
    """A mask mod evaluated on every (query, key) pair: ``(T, T)`` bool."""
    assert callable(mask_mod)
    idx = torch.arange(t)
    return mask_mod(None, None, idx[:, None], idx[None, :])


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d, heads, t = 32, 4, 40
    mha = MultiHeadAttention(d, heads).eval()
    x = torch.randn(1, t, d)  # (B, T, D): the decoder's inputs, one per step
    lines = []
    with torch.no_grad():
        full = mha(x, causal=True)  # (B, T, D): every step recomputed at once
        cached, sizes = decode(mha, x, KVCache())
        show("full recomputation", full)
        show("step by step with the cache", cached)
        lines.append(f"cache size after steps 1, 2, 10, {t}: {sizes[0]}, {sizes[1]}, {sizes[9]}, {sizes[-1]}")
        lines.append(f"max |cached - full recomputation| = {(cached - full).abs().max():.1e}")

        # The time saved: recompute the whole prefix at every step, or project one token and reuse the rest.
        n = 128 if small() else 512
        long = torch.randn(1, n, d)
        start = time.perf_counter()
        for step in range(n):
            mha(long[:, : step + 1], causal=True)[:, -1:]  # (B, 1, D): the newest output, prefix redone
        recompute = time.perf_counter() - start
        start = time.perf_counter()
        decode(mha, long, KVCache())
        with_cache = time.perf_counter() - start
        lines.append(f"{n} steps: recomputing the prefix {1000 * recompute:.0f} ms, "
                     f"with the cache {1000 * with_cache:.0f} ms")

        caches = {"rolling (window 8)": RollingKVCache(window=8),
                  "sinks (2 sinks + window 8)": AttentionSinkCache(sinks=2, window=8)}
        seen = {"full cache": torch.ones(t, t, dtype=torch.bool).tril()}
        all_sizes = {"full cache": sizes}
        for name, cache in caches.items():
            mask = dense(cache.mask_mod(), t)  # (T, T): the keys each query may see
            bounded, bounded_sizes = decode(mha, x, cache)
            reference = mha(x, mask=mask)  # (B, T, D): full recomputation under the cache's mask
            lines.append(f"{name}: cache size at most {max(bounded_sizes)}, "
                         f"max |cached - recomputation under its mask| = {(bounded - reference).abs().max():.1e}")
            seen[name], all_sizes[name] = mask, bounded_sizes
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    fig = Figure(figsize=(12, 3.4))
    axes = fig.subplots(1, 4)
    for axis, (name, mask) in zip(axes, seen.items(), strict=False):
        axis.imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1)
        axis.set_title(f"{name}:\nkeys each query sees", fontsize=9)
        axis.set_xlabel("key position")
        axis.set_ylabel("query position (decoding step)")
    for name, values in all_sizes.items():
        axes[3].plot(range(1, t + 1), values, label=name)
    axes[3].set_xlabel("decoding step")
    axes[3].set_ylabel("positions in the cache")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
