"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5).

Attention alone is blind to order: permute the tokens and the outputs are
permuted the same way. Adding a position signal fixes that:

    PE[t, 2i] = sin(t / 10000^(2i/D)),   PE[t, 2i+1] = cos(t / 10000^(2i/D))

Each pair of features is a clock at its own speed. Because
``sin(a + b)`` expands into sines and cosines of ``a`` and ``b``, the encoding
of ``t + k`` is a fixed rotation of the encoding of ``t``: the dot product
``PE[t] · PE[t + k]`` depends on the offset ``k`` only.

The script first *shows* the blindness: it permutes the tokens of a sentence
and prints how far self-attention's output is from the same permutation of
the original output (zero: permutation-equivariant); with the positions added,
the two differ.

Try this: sum the output over positions (a bag-of-words pooling) with and
without positions, and permute the tokens: which sum changes? (Answer: only
the one with positions; without them attention + pooling is blind to order.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show, small

from attnkit import MultiHeadAttention
from attnkit.positional import SinusoidalPositionalEncoding, sinusoidal_table
from attnkit.viz.plots import plot_positional_encoding

OUTPUTS = ["06_sinusoidal.png"]


def main() -> None:
    out = output_dir(__doc__)
    length, d = (32, 32) if small() else (100, 128)
    table = sinusoidal_table(length, d)  # (T, D)
    show("PE table", table)

    # Attention alone is blind to order: permuting the inputs permutes the outputs, nothing else.
    torch.manual_seed(0)
    mha = MultiHeadAttention(d, 4).eval()
    x = torch.randn(1, 8, d)  # (B, T, D): eight "word embeddings"
    perm = torch.randperm(8)
    with torch.no_grad():
        gap_plain = (mha(x[:, perm]) - mha(x)[:, perm]).abs().max().item()
        # With positions, the permuted words sit at new positions and get those positions' encodings.
        gap_pe = (mha(x[:, perm] + table[:8]) - mha(x + table[:8])[:, perm]).abs().max().item()
    print(f"permutation {perm.tolist()}")
    print(f"  without positions: max |attn(permuted x) - permuted attn(x)| = {gap_plain:.1e} (equivariant)")
    print(f"  with positions:    max |attn(permuted x + PE) - permuted attn(x + PE)| = {gap_pe:.2f} (order matters)")
    assert gap_plain < 1e-5 < gap_pe

    # The similarity of two positions depends only on their distance.
    for k in (1, 5):
        dots = [float(table[t] @ table[t + k]) for t in (0, 10, 20)]
        print(f"PE[t] . PE[t+{k}] for t = 0, 10, 20: {[round(x, 4) for x in dots]}")
        assert max(dots) - min(dots) < 1e-3

    encoder = SinusoidalPositionalEncoding(d)
    x = torch.zeros(2, 10, d)  # (B, T, D) word embeddings (zeros: see the table itself)
    y = encoder(x)  # (B, T, D) = x + PE[:T]
    show("x + PE", y)
    assert torch.allclose(y[0], table[:10])
    # offset=3 continues from position 3 (incremental decoding).
    assert torch.allclose(encoder(x[:, :1], offset=3)[0, 0], table[3])

    plot_positional_encoding(table.numpy(), path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
