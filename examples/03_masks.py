"""Masks: which keys each query may see (True = MAY attend).

* causal: query i sees keys 0..i — a language model cannot peek at the future.
* padding: batches pad short sequences; nobody may attend to the padding.
* combined: both at once; :func:`attnkit.masks.combine` is a logical AND.

Masked keys get exactly zero weight, and a query with no key left at all gets a
row of zeros (not NaN). Masks broadcast to ``(B, H, Tq, Tk)``.
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import masks
from attnkit.attention.functional import attention
from attnkit.viz.plots import plot_masked_attention

OUTPUTS = ["03_causal.png", "03_padding_causal.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, h, t, dh = 2, 2, 6, 8
    lengths = torch.tensor([6, 4])  # the second sequence has 2 padding positions
    x = torch.randn(b, h, t, dh)  # (B, H, T, Dh), self-attention: q = k = v

    causal = masks.causal(t, t)  # (Tq, Tk)
    padding = masks.from_lengths(lengths, t)  # (B, 1, 1, Tk)
    both = masks.combine(causal, padding)  # (B, 1, Tq, Tk)
    assert both is not None
    show("causal mask", causal)
    show("padding mask", padding)
    show("combined mask", both)
    print("causal mask (1 = may attend):")
    print(causal.int())

    _, w_causal = attention(x, x, x, causal=True, return_weights=True)  # (B, H, Tq, Tk)
    _, w_both = attention(x, x, x, mask=both, return_weights=True)  # (B, H, Tq, Tk)
    show("weights", w_both)
    # Future keys and padded keys receive exactly zero weight.
    assert (w_causal[..., ~causal] == 0).all()
    assert (w_both[1, :, :, 4:] == 0).all()
    print("row sums of the padded sequence (head 0):", [round(s, 4) for s in w_both[1, 0].sum(-1).tolist()])

    # PyTorch's key_padding_mask says True = IGNORE; convert it, never pass it as is.
    torch_style = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    assert torch.equal(masks.from_key_padding_mask(torch_style).squeeze(), padding.squeeze())

    tokens = ["the", "cat", "sat", "on", "the", "mat"]
    plot_masked_attention(w_causal[0, 0], causal, tokens, title="Causal self-attention",
                                path=out / OUTPUTS[0])
    plot_masked_attention(w_both[1, 0], both[1, 0], tokens[:4] + ["[PAD]", "[PAD]"],
                                 title="Causal + padding", path=out / OUTPUTS[1])
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
