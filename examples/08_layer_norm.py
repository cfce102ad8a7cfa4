"""Layer normalisation and where to put it (Ba et al., 2016; Xiong et al., 2020).

    LayerNorm(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta

over the feature axis of each position. A Transformer layer wraps each
sub-layer in a residual branch; *post-norm* (the original) normalises after
the sum, ``LN(x + f(x))``, *pre-norm* normalises the branch input,
``x + f(LN(x))``. Pre-norm keeps an untouched residual path from input to
output, which is why deep pre-norm stacks train without warm-up; its
residual stream grows with depth, so stacks end with a final LayerNorm.
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show, small
from torch import nn

from attnkit.blocks.encoder import TransformerEncoderLayer

OUTPUTS = ["08_layer_norm.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, t, d = 2, 6, 32
    x = 3.0 * torch.randn(b, t, d) + 1.0  # (B, T, D), far from zero mean / unit variance

    mean = x.mean(-1, keepdim=True)  # (B, T, 1)
    var = x.var(-1, unbiased=False, keepdim=True)  # (B, T, 1)
    by_hand = (x - mean) / torch.sqrt(var + 1e-5)  # (B, T, D)
    ln = nn.LayerNorm(d)
    show("x", x)
    show("LayerNorm(x)", ln(x))
    assert torch.allclose(ln(x), by_hand, atol=1e-5)
    print(f"per-position mean {ln(x).mean(-1).abs().max():.1e}, std {ln(x).std(-1, unbiased=False).mean():.3f}")

    # Residual-stream size through a deep stack: post-norm resets it every layer,
    # pre-norm lets it grow (hence the final LayerNorm of pre-norm stacks).
    depth = 4 if small() else 24
    lines = []
    with torch.no_grad():
        for norm_first in (False, True):
            h = torch.randn(b, t, d)
            for _ in range(depth):
                h = TransformerEncoderLayer(d, 4, 4 * d, norm_first=norm_first).eval()(h)  # (B, T, D)
            name = "pre-norm " if norm_first else "post-norm"
            lines.append(f"{name}: RMS of the residual stream after {depth} layers = {h.pow(2).mean().sqrt():.2f}")
            print(lines[-1])
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
