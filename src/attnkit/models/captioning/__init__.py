"""Image captioning with soft attention over image regions (Xu et al., 2015,
"Show, Attend and Tell: Neural Image Caption Generation with Visual Attention").

A CNN turns the image into a grid of ``R = h·w`` region vectors ``a_i`` (no
pooling: the grid is what the decoder looks at). An LSTM writes the caption one
word at a time; before each word it scores every region with additive
attention on its state and reads a gated weighted mean of them.

================ ================================================================
module           holds
================ ================================================================
``encoder``      the image encoders (built-in CNN, torchvision ResNets), :data:`BACKBONES`
``efficientnet`` the frozen, pretrained-ready EfficientNet-Lite0/1/2 encoders (``vision`` extra)
``pretrained``   :func:`load_backbone_weights` from a local file
``config``       :class:`CaptionerConfig`, :data:`ATTEND_WITH`
``decoder``      the attending LSTM (the equations)
``generation``   :class:`CaptionGenerator`: greedy and beam search (a mixin), :class:`GeneratedCaption`
``model``        :class:`ImageCaptioner`: encoder + decoder, loss, greedy and beam search
``ensemble``     :class:`CaptionEnsemble`: captioners over one encoder decoding as one
================ ================================================================

Shape legend: B batch, S image side, C region width, R = h·w regions, T caption
length (with ``<bos>``/``<eos>``), V vocabulary, Hd LSTM width.
"""

from __future__ import annotations

from attnkit.models.captioning.config import ATTEND_WITH, CaptionerConfig
from attnkit.models.captioning.decoder import SoftAttentionDecoder
from attnkit.models.captioning.encoder import BACKBONES, SmallCNN, build_encoder
from attnkit.models.captioning.ensemble import CaptionEnsemble
from attnkit.models.captioning.generation import CaptionGenerator, GeneratedCaption
from attnkit.models.captioning.model import CaptionerOutput, ImageCaptioner
from attnkit.models.captioning.pretrained import load_backbone_weights

__all__ = [
    "ATTEND_WITH",
    "BACKBONES",
    "CaptionEnsemble",
    "CaptionGenerator",
    "CaptionerConfig",
    "CaptionerOutput",
    "GeneratedCaption",
    "ImageCaptioner",
    "SmallCNN",
    "SoftAttentionDecoder",
    "build_encoder",
    "load_backbone_weights",
]
