"""The position-wise feed-forward network (Vaswani et al., 2017, eq. 2).

    FFN(x) = W_2 act(W_1 x + b_1) + b_2

applied to every position independently: attention mixes information *across*
positions, the FFN transforms each position *on its own*. Gated variants
(Shazeer, 2020) such as SwiGLU multiply two projections:
``W_2 (swish(W_1 x) * (W_3 x))``.

Try this: do the same test on example 04's ``MultiHeadAttention`` (self-
attention): change position 0 and compare the other positions' outputs.
(Answer: they all change: attention mixes positions, the FFN does not.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit.blocks.feed_forward import ACTIVATIONS, FeedForward

OUTPUTS = ["05_feed_forward.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, t, d, d_ff = 2, 5, 16, 64
    x = torch.randn(b, t, d)  # (B, T, D)
    lines = [f"registered activations: {sorted(ACTIVATIONS)}"]
    print(lines[0])
    for activation in ("relu", "gelu", "swiglu"):
        ffn = FeedForward(d, d_ff, activation=activation).eval()
        y = ffn(x)  # (B, T, D)
        params = sum(p.numel() for p in ffn.parameters())
        show(f"{activation} output", y)
        lines.append(f"{activation}: output {tuple(y.shape)}, parameters {params}")
        print(lines[-1])

        # Position-wise: changing position 0 leaves every other position untouched.
        x2 = x.clone()
        x2[:, 0] += 1.0
        unchanged = torch.allclose(ffn(x2)[:, 1:], y[:, 1:])
        assert unchanged
    lines.append("each position is transformed independently: verified")
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
