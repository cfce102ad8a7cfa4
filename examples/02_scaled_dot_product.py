"""Scaled dot-product attention (Vaswani et al., 2017, eq. 1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(Dh)) V

Why the scale: if the entries of q and k are independent with mean 0 and
variance 1, the score ``q · k = sum_i q_i k_i`` sums Dh terms of variance 1,
so its variance is Dh; dividing by sqrt(Dh) brings it back to 1 whatever the
head width, and the softmax does not saturate into a one-hot (whose gradient
is nearly zero). This script writes the formula by hand, checks it against
:func:`attnkit.attention` (which uses torch's fused kernel when it can), then
*measures* the variance over many random draws per width, and the largest
weight a query gives with and without the scale.

Try this: draw q and k with standard deviation 2 instead of 1. What variance
does the scaled score have now, and what scale would bring it back to 1?
(Answer: 16 = 2^2 * 2^2; divide by 4 sqrt(Dh).)

Shape: q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)``, v ``(B, H, Tk, Dv)``;
out ``(B, H, Tq, Dv)``, weights ``(B, H, Tq, Tk)``.
"""

from __future__ import annotations

import math

import torch
from _common import output_dir, saved, show, small

from attnkit import attention, last_backend

OUTPUTS = ["02_scale.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, h, tq, tk, dh = 2, 4, 5, 7, 64
    q = torch.randn(b, h, tq, dh)  # (B, H, Tq, Dh)
    k = torch.randn(b, h, tk, dh)  # (B, H, Tk, Dh)
    v = torch.randn(b, h, tk, dh)  # (B, H, Tk, Dv)

    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, H, Tq, Tk)
    weights_by_hand = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
    out_by_hand = weights_by_hand @ v  # (B, H, Tq, Dv)

    out_fast, weights = attention(q, k, v, return_weights=True)
    show("q", q)
    show("k", k)
    show("v", v)
    show("output", out_fast)
    show("weights", weights)
    print("backend:", last_backend())
    print(f"max |by hand - attnkit| = {(out_by_hand - out_fast).abs().max():.2e}")
    assert torch.allclose(out_by_hand, out_fast, atol=1e-5)

    # The variance of the scores over many draws, and the largest weight, with and without the scale.
    lines = []
    draws = 2000 if small() else 20000
    widths = (4, 64, 1024) if small() else (4, 16, 64, 256, 1024)
    for width in widths:
        qd, kd = torch.randn(draws, width), torch.randn(draws, width)  # one (q, k) pair per draw
        raw_scores = (qd * kd).sum(-1)  # (draws,): q · k
        scaled_var = (raw_scores / math.sqrt(width)).var().item()
        qw, kw = torch.randn(1, 1, 1, width), torch.randn(1, 1, 256, width)  # one query, 256 keys
        raw = (qw @ kw.transpose(-2, -1)).softmax(-1).max().item()
        scaled = (qw @ kw.transpose(-2, -1) / math.sqrt(width)).softmax(-1).max().item()
        lines.append(f"Dh={width:>5}: score variance unscaled {raw_scores.var().item():8.1f}, "
                     f"scaled {scaled_var:.3f}; largest of 256 weights unscaled {raw:.3f}, scaled {scaled:.3f}")
        print(lines[-1])
        assert abs(scaled_var - 1.0) < 0.15, scaled_var
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
