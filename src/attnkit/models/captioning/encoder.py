"""Image encoders of the captioner: a region grid, not a pooled vector.

``"small"`` is a built-in 3-stage CNN (stride 8) that also sees two
coordinate channels (CoordConv, Liu et al., 2018) so that regions know where
they are; ``"resnet18"`` ... ``"resnet152"`` are torchvision ResNets (stride
32) without their pooling and classifier, imported only when asked for;
``"efficientnet-lite0"``, ``-lite1`` and ``-lite2`` are pretrained-ready, frozen-by-default EfficientNet-Lites
(:mod:`~attnkit.models.captioning.efficientnet`).
Pretrained weights come only from a local file
(:func:`~attnkit.models.captioning.pretrained.load_backbone_weights`).

Shape legend: B batch, S image side, C region width, h·w the region grid.
"""

from __future__ import annotations

import importlib

import torch
from torch import Tensor, nn

from attnkit.models.captioning.efficientnet import (
    EFFICIENTNET_LITE,
    LITE_MEAN,
    LITE_STD,
    EfficientNetLiteEncoder,
)

__all__ = ["BACKBONES", "IMAGENET_MEAN", "IMAGENET_STD", "SmallCNN", "build_encoder", "check_images",
           "normalisation"]

# name -> width of the last feature map (None: the built-in CNN, width from the config).
BACKBONES: dict[str, int | None] = {
    "small": None, "resnet18": 512, "resnet34": 512, "resnet50": 2048, "resnet101": 2048,
    "resnet152": 2048, **{name: 1280 for name in EFFICIENTNET_LITE},
}
"""Image encoders by name, with their feature channels (None: set by the config)."""
IMAGENET_MEAN = (0.485, 0.456, 0.406)
"""Per-channel mean subtracted from RGB images in ``[0, 1]`` before any encoder (ImageNet's)."""
IMAGENET_STD = (0.229, 0.224, 0.225)
"""Per-channel standard deviation images are divided by before any encoder (ImageNet's)."""


class SmallCNN(nn.Module):
    """Three stages of a stride-2 3×3 conv and a ``second_kernel`` conv, each with BatchNorm and
    ReLU; the input is RGB plus x, y coordinate channels.

    The receptive field of a region is 15 pixels with ``second_kernel=1`` (a
    region describes its own neighbourhood) and 43 pixels with 3 (it sees
    most of a 48-pixel image, so the decoder need not look where an object is).

    Shape:
        images ``(B, 3, S, S)``; returns ``(B, C, ⌈S/8⌉, ⌈S/8⌉)`` with ``C = channels[-1]``.
    """

    def __init__(self, channels: tuple[int, ...], second_kernel: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 5  # RGB + two coordinate channels
        k = second_kernel
        for out in channels:
            layers += [nn.Conv2d(width, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out),
                       nn.ReLU(inplace=True), nn.Conv2d(out, out, k, padding=k // 2, bias=False),
                       nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            width = out
        self.body = nn.Sequential(*layers)

    def forward(self, images: Tensor) -> Tensor:
        b, _, s_h, s_w = images.shape
        ys = torch.linspace(-1.0, 1.0, s_h, device=images.device, dtype=images.dtype)
        xs = torch.linspace(-1.0, 1.0, s_w, device=images.device, dtype=images.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")  # (S, S) each
        coords = torch.stack([grid_x, grid_y]).expand(b, 2, s_h, s_w)  # (B, 2, S, S)
        return self.body(torch.cat([images, coords], dim=1))  # (B, C, h, w)


def _resnet(name: str) -> nn.Module:
    """A torchvision ResNet without its average pooling and classifier (random weights)."""
    try:
        models = importlib.import_module("torchvision.models")
    except ImportError:
        raise ImportError(
            f"backbone {name!r} needs torchvision, which is not installed; install torchvision "
            "or use backbone='small'"
        ) from None
    net = getattr(models, name)(weights=None)
    return nn.Sequential(*list(net.children())[:-2])  # (B, C, S/32, S/32)


def build_encoder(backbone: str, channels: tuple[int, ...], second_kernel: int,
                  fine_tune_blocks: int = 0) -> tuple[nn.Module, int]:
    """The encoder named ``backbone`` (one of :data:`BACKBONES`) and its feature width ``C``.

    ``channels`` and ``second_kernel`` configure the built-in ``"small"`` CNN only;
    ``fine_tune_blocks`` the EfficientNet-Lite ones only (how many last blocks train).

    Shape:
        the encoder maps images ``(B, 3, S, S)`` to a grid ``(B, C, h, w)``.
    """
    if backbone not in BACKBONES:
        raise ValueError(f"backbone must be one of {list(BACKBONES)}, got {backbone!r}")
    encoder: nn.Module
    if backbone in EFFICIENTNET_LITE:
        encoder = EfficientNetLiteEncoder(backbone, fine_tune_blocks)
    else:
        encoder = SmallCNN(channels, second_kernel) if backbone == "small" else _resnet(backbone)
    return encoder, BACKBONES[backbone] or channels[-1]


def normalisation(backbone: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The per-channel ``(mean, std)`` that images in ``[0, 1]`` are normalised with before ``backbone``."""
    return (LITE_MEAN, LITE_STD) if backbone in EFFICIENTNET_LITE else (IMAGENET_MEAN, IMAGENET_STD)


def check_images(images: object, size: int) -> Tensor:
    """``images`` if it is a float ``(B, 3, size, size)`` tensor, else a TypeError/ValueError saying what came.

    Shape:
        images ``(B, 3, S, S)`` with ``S = size``.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if not images.dtype.is_floating_point:
        raise TypeError(f"images must be a floating tensor in [0, 1], got dtype {images.dtype}")
    if images.dim() != 4 or images.shape[1:] != (3, size, size):
        raise ValueError(f"images must be (B, 3, {size}, {size}) RGB in [0, 1], got shape "
                         f"{tuple(images.shape)}")
    return images
