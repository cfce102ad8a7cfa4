"""2-D self-attention over an image (SAGAN, Zhang et al., 2019).

A convolution sees a 3x3 neighbourhood; a self-attention block lets every
position of a feature map ``(B, C, H, W)`` gather from all ``N = H*W``
positions:

    beta_{j,i} = softmax_i(f(x_i)^T g(x_j)),   o_j = sum_i beta_{j,i} h(x_i),   y = x + gamma o

with 1x1 convolutions f, g, h and a learned scalar gamma that starts at 0 (the
block begins as the identity and lets attention in as training finds it useful).

We train a tiny classifier (conv, :class:`SelfAttention2d`, pooling) on
scikit-learn's real 8x8 handwritten digits, then lay the attention of one
query pixel over the digit.

Try this: print ``model.attn.gamma`` before training. What is the block's
output then? (Answer: gamma is 0, so ``y = x``: the block starts as the
identity and lets attention in as training raises gamma.)
"""

from __future__ import annotations

import numpy as np
import torch
from _common import output_dir, quick_mode, saved, show, small
from sklearn.datasets import load_digits
from torch import Tensor, nn

from attnkit.layers.image import SelfAttention2d
from attnkit.viz.explain import plot_image_attention

OUTPUTS = ["11_digit_attention.png"]


class DigitNet(nn.Module):
    """two 3x3 convs -> SAGAN attention -> linear over the whole feature map."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU())
        self.attn = SelfAttention2d(channels, reduction=4)
        self.head = nn.Linear(channels * 64, 10)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(images)  # (B, C, 8, 8)
        x, weights = self.attn(x, return_weights=True)  # (B, C, 8, 8), (B, 64, 64)
        return self.head(x.flatten(1)), weights  # (B, 10)


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8)
    labels = torch.tensor(digits.target)
    order = torch.randperm(len(labels))
    train, test = order[:1400], order[1400:]
    if small():
        train = train[:400]
    quick_mode("400 digits, 1 epoch: test accuracy about 0.6 and gamma near 0, so the attention is untrained: "
               "the query pixel's share on ink is about the share of inked pixels (chance); the full run "
               "(1400 digits x 10 epochs) reaches about 0.97, gamma 0.2, and puts 0.98 of it on ink")
    show("images", images)

    model = DigitNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    epochs = 1 if small() else 10
    for epoch in range(epochs):
        model.train()
        for batch in train[torch.randperm(len(train))].split(64):
            logits, _ = model(images[batch])
            loss = nn.functional.cross_entropy(logits, labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits, weights = model(images[test])
        accuracy = (logits.argmax(-1) == labels[test]).float().mean().item()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}  test accuracy {accuracy:.3f}  "
              f"gamma {model.attn.gamma.item():+.3f}")
    show("attention weights", weights)
    assert weights.shape == (len(test), 64, 64)

    # Where does the centre pixel (row 4, column 3) look in the first test digit?
    query = 4 * 8 + 3
    image = images[test[0], 0].numpy()
    attention_map = weights[0, query].reshape(8, 8).numpy()  # (h, w)
    print(f"digit {int(labels[test[0]])}: query pixel (4, 3) puts "
          f"{attention_map[image > 0.25].sum():.2f} of its attention on inked pixels "
          f"({(image > 0.25).mean():.2f} of the pixels are inked)")
    assert np.isclose(attention_map.sum(), 1.0, atol=1e-5)
    plot_image_attention(image, attention_map, title=f"Attention of pixel (4, 3), digit {int(labels[test[0]])}",
                         path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])


if __name__ == "__main__":
    main()
