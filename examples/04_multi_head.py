"""Multi-head attention (Vaswani et al., 2017, section 3.2.2).

    head_i = Attention(X W_i^Q, X W_i^K, X W_i^V),   MHA(X) = [head_1; ...; head_H] W^O

Each head projects the input into its own small subspace (Dh = D / H) and can
learn a different pattern; the heads' outputs are concatenated and mixed.
:class:`attnkit.MultiHeadAttention` does the projections and
calls :func:`attnkit.attention`; ``split_heads``/``merge_heads`` are the reshapes.

An untrained layer's heads are noise, so the figure shows four heads whose
query and key projections are *set by hand* on one-hot position inputs: each
looks at a different relative position (the previous token, itself, the next
token, the first token), which is the kind of division of labour trained heads
show (example 12 finds a previous-token head in a real BERT). A query whose
target lies outside the sentence (the first word's previous token) has no key
that matches and spreads its weight evenly.

Try this: change head 0's offset from -1 to -2. Which key does query 5 look at
now? (Answer: key 3.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import MultiHeadAttention
from attnkit.functional import merge_heads, split_heads
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

    # Four heads set by hand. Input: one-hot positions; head h's query for position i is the
    # one-hot of the position it should look at, its key for position j the one-hot of j.
    dh = d // heads
    offsets = {"previous token": -1, "same token": 0, "next token": +1, "first token": None}
    hand = MultiHeadAttention(d, heads).eval()
    with torch.no_grad():
        for proj in (hand.q_proj, hand.k_proj, hand.v_proj, hand.out_proj):
            proj.weight.zero_()
            proj.bias.zero_()
        hand.v_proj.weight.copy_(torch.eye(d))
        hand.out_proj.weight.copy_(torch.eye(d))
        sharp = 4.0 * dh**0.5  # score 16 for the chosen key, 0 for the others
        for h, offset in enumerate(offsets.values()):
            for i in range(t):
                target = 0 if offset is None else i + offset
                hand.k_proj.weight[h * dh + i, i] = 1.0  # key of position i: one-hot i
                if 0 <= target < t:
                    hand.q_proj.weight[h * dh + target, i] = sharp  # query of i: one-hot of its target
        positions = torch.eye(t, d).unsqueeze(0)  # (1, T, D): row i is the one-hot of position i
        _, hand_weights = hand(positions, return_weights=True)  # (1, H, T, T)
    for h, name in enumerate(offsets):
        print(f"head {h} ({name}): query i looks at key", hand_weights[0, h].argmax(-1).tolist())
    assert hand_weights[0, 0, 5].argmax() == 4 and hand_weights[0, 3, 5].argmax() == 0

    tokens = ["attention", "is", "all", "you", "need", "to", "read"]
    plot_heads(hand_weights[0], tokens, title="Four heads set by hand: " + ", ".join(offsets),
               path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
