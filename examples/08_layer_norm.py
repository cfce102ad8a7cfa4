"""Layer normalisation and where to put it (Ba et al., 2016; Xiong et al., 2020).

    LayerNorm(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta

over the feature axis of each position. A Transformer layer wraps each
sub-layer in a residual branch; *post-norm* (the original) normalises after
the sum, ``LN(x + f(x))``, *pre-norm* normalises the branch input,
``x + f(LN(x))``. Pre-norm keeps an untouched residual path from input to
output; its residual stream grows with depth, so stacks end with a final
LayerNorm.

Why post-norm needs a learning-rate warm-up and pre-norm does not (Xiong et
al., 2020, Theorem 1): at initialisation the gradient of the last layers of a
post-norm stack does not shrink with depth, while a pre-norm stack's shrinks
like ``1/sqrt(L)``; large first steps with large gradients throw post-norm off
unless the learning rate starts small. The script *measures* that cause: the
gradient norm of the last layer's parameters at initialisation, for a shallow
and a deep stack of each kind. (The divergence itself shows in translation
runs of thousands of steps, Xiong et al., Fig. 2: beyond a quick example.)

Try this: print the gradient norm of the *first* layer too. Which kind of
stack gives its layers the more even gradients?
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

    # The gradient at initialisation of the last layer, shallow vs deep: post-norm's stays, pre-norm's shrinks.
    deep, ratios = 24, []  # one backward pass each: cheap even in quick mode
    for norm_first in (False, True):
        norms = []
        for layers in (2, deep):
            torch.manual_seed(0)
            stack = nn.ModuleList(TransformerEncoderLayer(d, 4, 4 * d, norm_first=norm_first, dropout=0.0)
                                  for _ in range(layers))
            final = nn.LayerNorm(d) if norm_first else nn.Identity()
            head = nn.Linear(d, 16)
            h = torch.randn(16, t, d)  # (B, T, D)
            for layer in stack:
                h = layer(h)
            targets = torch.randint(0, 16, (16, t))
            nn.functional.cross_entropy(head(final(h)).flatten(0, 1), targets.flatten()).backward()
            norms.append(torch.cat([p.grad.flatten() for p in stack[-1].parameters()]).norm().item())
        name = "pre-norm " if norm_first else "post-norm"
        lines.append(f"{name}: gradient norm of the last layer at initialisation, 2 layers {norms[0]:.2f}, "
                     f"{deep} layers {norms[1]:.2f} (ratio {norms[1] / norms[0]:.2f})")
        print(lines[-1])
        ratios.append(norms[1] / norms[0])
    assert ratios[0] > 1.0 > ratios[1], (
        "post-norm's last-layer gradient should not shrink with depth, pre-norm's should")
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
