"""The Transformer encoder layer (Vaswani et al., 2017, section 3.1).

    h = LN(x + MHA(x))          # every position gathers from the others
    y = LN(h + FFN(h))          # then each is transformed on its own

(post-norm, as in the paper; ``norm_first=True`` gives the pre-norm form).
A stack of such layers, :class:`TransformerEncoder`, is the body of BERT and
of the document classifier in example 14. This script builds one from
PyTorch's own ``nn.TransformerEncoderLayer`` (weights copied) and checks the
two agree, shows that padding never leaks into real positions, and collects
every layer's weights.

Try this: build PyTorch's layer with ``norm_first=True`` and copy it. Does
the parity still hold? (Answer: yes, ``from_torch`` copies the norm placement:
the difference is 0.)
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show
from torch import nn

from attnkit import masks
from attnkit.blocks.config import TransformerLayerConfig
from attnkit.blocks.encoder import TransformerEncoder, TransformerEncoderLayer
from attnkit.viz.plots import plot_layers_heads

OUTPUTS = ["13_encoder_weights.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    b, t, d, heads = 2, 6, 32, 4
    x = torch.randn(b, t, d)  # (B, T, D)
    lengths = torch.tensor([6, 4])
    keep = masks.from_lengths(lengths, t)  # (B, 1, 1, T), True = real token

    theirs = nn.TransformerEncoderLayer(d, heads, 64, dropout=0.0, batch_first=True).eval()
    ours = TransformerEncoderLayer.from_torch(theirs)
    # PyTorch's padding mask says True = ignore; attnkit's mask says True = may attend.
    padding = ~keep.view(b, t)
    with torch.no_grad():
        y_theirs = theirs(x, src_key_padding_mask=padding)
        y_ours, weights = ours(x, mask=keep, return_weights=True)
    show("x", x)
    show("encoder layer output", y_ours)
    show("weights", weights)
    real = keep.view(b, t)
    print(f"max |attnkit - torch| on real positions = {(y_ours - y_theirs)[real].abs().max():.2e}")
    assert torch.allclose(y_ours[real], y_theirs[real], atol=1e-5)

    # Padding never reaches real positions: change it and nothing real moves.
    x2 = x.clone()
    x2[1, 4:] = 100.0
    with torch.no_grad():
        assert torch.allclose(ours(x2, mask=keep)[1, :4], y_ours[1, :4], atol=1e-5)
    print("changing the padded positions leaves the real ones unchanged: verified")

    # A stack of 3 pre-norm layers from one config; weights come back as a list per layer.
    config = TransformerLayerConfig(d_model=d, num_heads=heads, d_ff=64, norm_first=True)
    stack = TransformerEncoder(config, 3).eval()
    with torch.no_grad():
        h, per_layer = stack(x, mask=keep, return_weights=True)
    show("stack output", h)
    print("weights per layer:", [tuple(w.shape) for w in per_layer])
    plot_layers_heads(torch.stack([w[0] for w in per_layer]).numpy(),
                      title="3-layer encoder (untrained): layer x head", path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
