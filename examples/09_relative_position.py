"""Relative position attention (Shaw et al., 2018).

Instead of adding absolute positions to the input, the layer learns one
vector per *distance* ``j - i`` (clipped to ``[-k, k]``) and adds it to the
keys and values. The tables ``a^K`` and ``a^V`` are ``(2k + 1, Dh)``: one row
per clipped distance, **shared by all heads** (as in Shaw et al., section 3.3;
each head still reads them with its own queries, so the heads' patterns differ):

    e_ij = q_i · (k_j + a^K_{clip(j-i)}) / sqrt(Dh),   z_i = sum_j a_ij (v_j + a^V_{clip(j-i)})

Give every position the same input and plain attention cannot tell them apart
(uniform weights); relative attention's weights then depend on the distance
only: ``w[i, j] / w[i, i]`` is the same for every row ``i`` (each row is then
renormalised over the keys it has, which differ near the edges).

Try this: print ``w[4, 7]``, ``w[4, 8]`` and ``w[4, 9]`` of head 0. Why are
they equal? (Answer: distances 3, 4 and 5 are all clipped to ``k = 3`` and
share one vector.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show

from attnkit import MultiHeadAttention, RelativePositionAttention
from attnkit.viz.plots import plot_attention

OUTPUTS = ["09_relative.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    d, heads, t, k = 32, 4, 10, 3
    same = torch.randn(1, 1, d).expand(1, t, d)  # (B, T, D): one token repeated

    with torch.no_grad():
        _, w_plain = MultiHeadAttention(d, heads).eval()(same, return_weights=True)
    rel = RelativePositionAttention(d, heads, max_relative_position=k).eval()
    with torch.no_grad():
        rel.rel_k.normal_(0.0, 2.0)  # pretend training made distances matter
        y, w_rel = rel(same, return_weights=True)  # (B, T, D), (B, H, T, T)
    show("output", y)
    show("weights", w_rel)
    show("distance table rel_k", rel.rel_k)
    print(f"rel_k is (2k + 1, Dh) = ({2 * k + 1}, {d // heads}): one table for all {heads} heads")
    assert tuple(rel.rel_k.shape) == (2 * k + 1, d // heads)
    print(f"plain attention, spread of weights: {float(w_plain.max() - w_plain.min()):.2e} (uniform)")
    w = w_rel[0, 0]
    # Relative to the diagonal, a weight depends on the distance j - i only.
    ratio_4, ratio_6 = w[4, 5] / w[4, 4], w[6, 7] / w[6, 6]
    assert torch.allclose(ratio_4, ratio_6, rtol=1e-4)
    print(f"relative attention: w[4,5]/w[4,4] = {ratio_4:.4f}, w[6,7]/w[6,6] = {ratio_6:.4f} (same distance)")

    plot_attention(w_rel[0, 0], [f"position {i}" for i in range(t)],
                   title="Relative attention, one token repeated (head 0)", path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
