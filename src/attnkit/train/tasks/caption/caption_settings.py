"""The settings of an image-captioning run: what ``attnkit train --task caption`` reads from its flags.

One frozen dataclass, :class:`CaptionSettings`, shared by the data preparation
(:mod:`attnkit.train.tasks.caption.caption_data`) and the run (:mod:`attnkit.train.tasks.caption.captioning`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnkit.models.captioning import CaptionerConfig

__all__ = ["CaptionSettings", "GENERATE_BATCH"]

GENERATE_BATCH = 128
"""Images :func:`attnkit.train.tasks.caption.captioning.generate` encodes at a time by default (the memory plan
counts them)."""


@dataclass(frozen=True)
class CaptionSettings:
    """Everything a captioning run is trained with: its data, model and training settings.

    A run records them in its config.json (``options``); a resumed run takes
    them all from there. ``data`` (a Flickr8k folder), ``images`` with
    ``captions`` (a caption set), or neither (the generated shapes,
    ``train_size`` and ``val_size`` scenes). ``image_size`` None: the
    backbone's ImageNet size for EfficientNet-Lite, else 48.
    ``time_budget_s`` is in seconds, as everywhere in the library (the command's ``--time-budget``
    takes minutes).
    """

    epochs: int = 12
    seed: int = 0
    images: str | None = None
    captions: str | None = None
    train_size: int = 4000
    val_size: int = 300
    image_size: int | None = None
    backbone: str = "small"
    pretrained: str | None = None
    batch_size: int = 64
    lr: float = 3e-3
    attention_reg: float = 0.0
    attend_with: str = "current_state"
    min_frequency: int = 1
    data: str | None = None
    feature_cache: str | None = None
    fine_tune_blocks: int = 0
    embed_dim: int = 32
    hidden_dim: int = 128
    attention_dim: int = 64
    dropout: float = 0.1
    no_gate: bool = False
    max_len: int = 20
    patience: int = 0
    region_dim: int = 0
    captions_per_image: int = 0
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        if bool(self.images) != bool(self.captions):
            raise ValueError("images and captions go together (a folder and its caption file), got "
                             f"images={self.images!r}, captions={self.captions!r}")
        if self.data and self.images:
            raise ValueError("data (a Flickr8k folder) and images/captions exclude each other")

    def resolved(self) -> CaptionSettings:
        """These settings with ``image_size`` decided (the backbone's own size when None)."""
        if self.image_size is not None:
            return self
        from attnkit.models.captioning.efficientnet import LITE_IMAGE_SIZE

        return dataclasses.replace(self, image_size=LITE_IMAGE_SIZE.get(self.backbone, 48))

    def model_config(self, vocab_size: int, saved: dict[str, Any] | None = None) -> CaptionerConfig:
        """The captioner's config: ``saved`` (a resumed run's) as it is, else built from these settings."""
        from attnkit.models.captioning import CaptionerConfig

        if saved is not None:
            return CaptionerConfig.from_dict(saved)
        assert self.image_size is not None, "resolve the settings first"
        return CaptionerConfig(
            vocab_size=vocab_size, image_size=self.image_size, backbone=self.backbone,
            attention_reg=self.attention_reg, attend_with=self.attend_with, embed_dim=self.embed_dim,
            hidden_dim=self.hidden_dim, attention_dim=self.attention_dim, dropout=self.dropout, gate=not self.no_gate,
            max_len=self.max_len, fine_tune_blocks=self.fine_tune_blocks, region_dim=self.region_dim)
