"""Multi-head attention (Vaswani et al., 2017, section 3.2.2).

    head_i = Attention(X W_i^Q, X W_i^K, X W_i^V),   MHA(X) = [head_1; ...; head_H] W^O

Each head projects the input into its own small subspace (Dh = D / H) and can
learn a different pattern; the heads' outputs are concatenated and mixed.
:class:`attnkit.MultiHeadAttention` does the projections and
calls :func:`attnkit.attention`; ``split_heads``/``merge_heads`` are the reshapes.
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit.functional import merge_heads, split_heads
from attnkit import MultiHeadAttention
from attnkit.viz.plots import plot_heads

OUTPUTS = ["04_heads.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, t, d, heads = 2, 7, 32, 4
    x = torch.randn(b, t, d)  # (B, T, D)

    split = split_heads(x, heads)  # (B, H, T, Dh)
    show("x", x)
    show("split_heads(x, 4)", split)
    show("merge_heads(...)", merge_heads(split))
    assert torch.equal(merge_heads(split), x)

    mha = MultiHeadAttention(d, heads).eval()
    y, weights = mha(x, return_weights=True)  # self-attention: key = value = query
    show("output", y)
    show("weights", weights)
    assert weights.shape == (b, heads, t, t)
    print("parameters:", sum(p.numel() for p in mha.parameters()), "(4 D x D projections + biases)")

    # Grouped-query attention: 4 query heads share 2 key/value heads (smaller KV cache).
    gqa = MultiHeadAttention(d, heads, kv_heads=2).eval()
    show("GQA output", gqa(x))
    print("GQA parameters:", sum(p.numel() for p in gqa.parameters()))

    tokens = ["attention", "is", "all", "you", "need", "to", "read"]
    plot_heads(weights[0], tokens, title="Four heads of an untrained layer", path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
