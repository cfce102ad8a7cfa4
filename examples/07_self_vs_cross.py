"""Self-attention versus cross-attention.

* Self-attention: queries, keys and values all come from the same sequence
  (``mha(x)``); the weights are ``(B, H, T, T)``.
* Cross-attention: queries come from one sequence (a decoder's target words),
  keys and values from another (the encoder's source words): ``mha(y, x, x)``;
  the weights are ``(B, H, Tq, Tk)`` with Tq = target length, Tk = source length.
  This is how a translation model "looks up" the source while writing.

An untrained layer's cross-attention is noise, so the figure shows one
*constructed* by hand: each source word gets a random key vector, and each
target word's query is the key of the source word it translates (times a
sharpness factor). The weights then pick out the alignment, and "im" and
"park", which no target word translates, get little; a trained translation
model learns such queries itself (example 17).

Try this: lower ``sharpness`` from 1 to 0.1. What happens to the rows?
(Answer: they flatten towards uniform, about 1/6 per source word.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import MultiHeadAttention, attention
from attnkit.viz.explain import plot_alignment

OUTPUTS = ["07_cross_attention.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    d, heads = 32, 4
    source = ["ein", "hund", "läuft", "im", "park", "."]
    target = ["a", "dog", "runs", "."]
    x = torch.randn(1, len(source), d)  # (B, Ts, D) encoder states
    y = torch.randn(1, len(target), d)  # (B, Tt, D) decoder states

    self_attn = MultiHeadAttention(d, heads).eval()
    cross_attn = MultiHeadAttention(d, heads).eval()
    h_self, w_self = self_attn(x, return_weights=True)
    h_cross, w_cross = cross_attn(y, x, x, return_weights=True)
    show("self-attention out", h_self)
    show("self-attention weights", w_self)
    show("cross-attention out", h_cross)
    show("cross-attention weights", w_cross)
    assert w_self.shape == (1, heads, len(source), len(source))
    assert w_cross.shape == (1, heads, len(target), len(source))

    # The output of cross-attention has one row per *query* (target) position,
    # and each row is a mix of source values only.
    # A decoder additionally masks its self-attention causally: see 03_masks.py.

    # Constructed cross-attention: target word t queries with the key of the source word it translates.
    aligned = {"a": "ein", "dog": "hund", "runs": "läuft", ".": "."}
    keys = torch.nn.functional.normalize(torch.randn(len(source), d), dim=-1) * d**0.5  # (Ts, D), |k| = sqrt(D)
    sharpness = 1.0
    queries = sharpness * keys[[source.index(aligned[w]) for w in target]]  # (Tt, D)
    _, w_built = attention(queries[None, None], keys[None, None], keys[None, None], return_weights=True)
    w_built = w_built[0, 0]  # (Tt, Ts)
    for i, word in enumerate(target):
        print(f"{word!r:>7} attends most to {source[int(w_built[i].argmax())]!r} ({w_built[i].max():.2f})")
    assert [source[int(j)] for j in w_built.argmax(-1)] == [aligned[w] for w in target]
    plot_alignment(w_built, source, target,
                   title="Cross-attention constructed from a word alignment", path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
