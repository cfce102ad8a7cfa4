"""Scaled dot-product attention (Vaswani et al., 2017, eq. 1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(Dh)) V

Dividing by sqrt(Dh) keeps the scores' variance near 1 whatever the head width,
so the softmax does not saturate into a one-hot. This script writes the formula
by hand, checks it against :func:`attnkit.attention` (which uses torch's fused
kernel when it can) and shows why the scale matters.

Shape: q ``(B, H, Tq, Dh)``, k ``(B, H, Tk, Dh)``, v ``(B, H, Tk, Dv)``;
out ``(B, H, Tq, Dv)``, weights ``(B, H, Tq, Tk)``.
"""

from __future__ import annotations

import math

import torch
from _common import output_dir, saved, show, small

from attnkit.attention.functional import attention, last_backend

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

    # Without the scale, larger heads give sharper (near one-hot) weights.
    lines = []
    widths = (4, 64) if small() else (4, 16, 64, 256, 1024)
    for width in widths:
        qw, kw = torch.randn(1, 1, 1, width), torch.randn(1, 1, 256, width)
        raw = (qw @ kw.transpose(-2, -1)).softmax(-1).max().item()
        scaled = (qw @ kw.transpose(-2, -1) / math.sqrt(width)).softmax(-1).max().item()
        lines.append(f"Dh={width:>5}: largest weight unscaled {raw:.3f}, scaled {scaled:.3f}")
        print(lines[-1])
    path = out / OUTPUTS[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    saved(path)


if __name__ == "__main__":
    main()
