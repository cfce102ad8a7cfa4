"""Visual attention classifier: a convolutional stem, 2-D self-attention blocks, a linear head.

Convolutions see a 3x3 neighbourhood; each :class:`SelfAttention2d` block
(SAGAN, Zhang et al., 2019) lets every position of the feature map gather
evidence from every other, so a stroke at the top of a digit can inform the
reading of one at the bottom. Global average pooling then feeds the classifier::

    x = stem(image)                                   (B, C, H, W)
    x = conv_i(SelfAttention2d_i(x))  for each block  (B, C, H, W)
    logits = W mean_HW(x) + b                         (B, num_classes)

The attention maps over the image come back on request, one ``(B, H*W, H*W)``
tensor per block: row ``j`` says where position ``j`` looked.

Shape legend: B batch, C channels, H x W spatial size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnkit.layers.image import SelfAttention2d
from attnkit.models.config import ModelConfig, check_fraction, check_positive_int

__all__ = ["VisualAttentionConfig", "VisualAttentionClassifier"]


@dataclass(frozen=True)
class VisualAttentionConfig(ModelConfig):
    """Configuration of :class:`VisualAttentionClassifier`."""

    in_channels: int = 1
    num_classes: int = 10
    channels: int = 32
    num_blocks: int = 2
    reduction: int = 4
    num_heads: int = 1
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("in_channels", "num_classes", "channels", "num_blocks", "reduction", "num_heads"):
            check_positive_int(name, getattr(self, name))
        check_fraction("dropout", self.dropout)
        if self.channels % self.reduction or (self.channels // self.reduction) % self.num_heads:
            raise ValueError(
                f"channels={self.channels} must be divisible by reduction={self.reduction}, and "
                f"channels/reduction by num_heads={self.num_heads}"
            )


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class VisualAttentionClassifier(nn.Module):
    """Image classifier with 2-D self-attention; attention maps on request.

    Shape:
        images ``(B, in_channels, H, W)``; returns logits ``(B, num_classes)``
        [and a list of ``num_blocks`` weights ``(B, H*W, H*W)``].
    """

    def __init__(self, config: VisualAttentionConfig) -> None:
        super().__init__()
        self.config = config
        c = config.channels
        self.stem = _conv_block(config.in_channels, c)
        self.attention = nn.ModuleList(
            SelfAttention2d(c, reduction=config.reduction, num_heads=config.num_heads)
            for _ in range(config.num_blocks)
        )
        self.convs = nn.ModuleList(_conv_block(c, c) for _ in range(config.num_blocks))
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(c, config.num_classes)

    def forward(
        self, images: Tensor, *, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Classify images; with ``return_weights`` also return each block's attention map."""
        if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != self.config.in_channels:
            raise ValueError(
                f"images must be (B, {self.config.in_channels}, H, W), got "
                f"{tuple(getattr(images, 'shape', ())) or type(images).__name__}"
            )
        x = self.stem(images)  # (B, C, H, W)
        maps: list[Tensor] = []
        for attend, conv in zip(self.attention, self.convs, strict=True):
            if return_weights:
                x, w = attend(x, return_weights=True)  # w: (B, H*W, H*W)
                maps.append(w)
            else:
                x = attend(x)
            x = conv(x)  # (B, C, H, W)
        logits = self.classifier(self.dropout(x.mean(dim=(2, 3))))  # (B, num_classes)
        return (logits, maps) if return_weights else logits
