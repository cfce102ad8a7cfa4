"""Self-attention versus cross-attention.

* Self-attention: queries, keys and values all come from the same sequence
  (``mha(x)``); the weights are ``(B, H, T, T)``.
* Cross-attention: queries come from one sequence (a decoder's target words),
  keys and values from another (the encoder's source words): ``mha(y, x, x)``;
  the weights are ``(B, H, Tq, Tk)`` with Tq = target length, Tk = source length.
  This is how a translation model "looks up" the source while writing.
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import MultiHeadAttention
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
    plot_alignment(w_cross[0].mean(0), source, target,
                   title="Cross-attention of an untrained layer (mean over heads)", path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
