"""Masks: which keys each query may see (True = MAY attend).

* causal: query i sees keys 0..i — a language model cannot peek at the future.
* padding: batches pad short sequences; nobody may attend to the padding.
* combined: both at once; :func:`attnkit.masks.combine` is a logical AND.

How a mask acts: the scores of forbidden keys are set to -inf *before* the
softmax, so ``exp(-inf) = 0`` gives them exactly zero weight and the other
weights of the row still sum to 1. A query with no key left at all would get
``softmax([-inf, ..., -inf]) = 0/0 = NaN``; attnkit returns a row of zeros
instead (zero output, zero weights). The script prints both steps and that
row. Masks broadcast to ``(B, H, Tq, Tk)``.

Try this: build ``masks.causal(3, 5)`` and ``masks.causal(3, 5, align="top_left")``
and print them; which one lets the last query see every key? (Answer: the
default, bottom-right alignment: the 3 queries are the last 3 of the 5 keys.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import attention, masks
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

    # The fill before the softmax, written out for query 1 of the padded sequence (head 0).
    scores = x[1, 0] @ x[1, 0].T / dh**0.5  # (Tq, Tk)
    filled = scores.masked_fill(~both[1, 0], float("-inf"))  # (Tq, Tk): forbidden keys -> -inf
    print("query 1 scores:        ", [round(v, 2) for v in scores[1].tolist()])
    print("after the -inf fill:   ", [round(v, 2) for v in filled[1].tolist()])
    print("softmax of the filled: ", [round(v, 3) for v in filled[1].softmax(-1).tolist()])
    assert torch.allclose(filled.softmax(-1), w_both[1, 0], atol=1e-6)

    # A query with no key at all: plain softmax gives NaN, attnkit a row of zeros.
    none_for_row_0 = causal.clone()
    none_for_row_0[0] = False  # query 0 may attend nothing
    out_empty, w_empty = attention(x, x, x, mask=none_for_row_0, return_weights=True)
    naive = x[0, 0] @ x[0, 0].T
    print("plain softmax of a fully masked row:", naive[0].masked_fill(~none_for_row_0[0], float("-inf"))
          .softmax(-1)[:3].tolist(), "...")
    print("attnkit, fully masked query 0: output", [round(v, 3) for v in out_empty[0, 0, 0, :4].tolist()],
          "... weights", w_empty[0, 0, 0].tolist())
    assert (out_empty[:, :, 0] == 0).all() and (w_empty[:, :, 0] == 0).all()
    assert torch.isfinite(out_empty).all()

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
