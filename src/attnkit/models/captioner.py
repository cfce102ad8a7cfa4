"""Image captioning with soft attention (Xu et al., 2015): the names of
:mod:`attnkit.models.captioning`, importable from here as they always were.

The captioner lives in :mod:`attnkit.models.captioning`, one concept per
module: ``encoder``, ``pretrained``, ``config``, ``decoder``, ``generation``, ``model`` and ``ensemble``.
"""

from __future__ import annotations

from attnkit.models.captioning import (
    ATTEND_WITH,
    BACKBONES,
    CaptionEnsemble,
    CaptionerConfig,
    CaptionerOutput,
    GeneratedCaption,
    ImageCaptioner,
    SmallCNN,
    load_backbone_weights,
)

__all__ = [
    "ATTEND_WITH",
    "BACKBONES",
    "CaptionEnsemble",
    "CaptionerConfig",
    "CaptionerOutput",
    "GeneratedCaption",
    "ImageCaptioner",
    "SmallCNN",
    "load_backbone_weights",
]
