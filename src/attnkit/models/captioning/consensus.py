"""Consensus re-ranking for captions: what people said of the nearest training images.

:class:`NeighbourIndex` keeps, for every training image, its region features
averaged over the regions and L2-normalised (one key ``(C,)`` per image) and
the word ids of its human captions. For a new image it finds the ``k``
training images whose keys have the largest cosine similarity with the
image's own, and hands their captions to
:func:`attnkit.decoding.rerank.consensus_pick` as references: among the beam
search's n-best captions, the one that agrees most with what people wrote
of similar images wins, unless the model's probability says otherwise
(Devlin et al., 2015). :class:`Consensus` holds the index and the two
settings.

An index belongs to one frozen encoder (its keys are that encoder's
features); :meth:`NeighbourIndex.check_features` refuses features of another
width. It is saved with safetensors (``neighbours.safetensors`` in a run).

Shape legend: N training images, M training captions, B batch, R regions, C region width, k neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import torch
from torch import Tensor

from attnkit.decoding.rerank import check_weight
from attnkit.models.config import check_positive_int

__all__ = ["NeighbourIndex", "Consensus", "NEIGHBOURS_FILE"]

NEIGHBOURS_FILE = "neighbours.safetensors"
"""The file name of a run's neighbour index."""


class NeighbourIndex:
    """Pooled, normalised region features of training images and the word ids of their captions.

    Args:
        keys: one row per training image, L2-normalised.
        captions: for each image, its captions as lists of word ids (no ``<bos>``/``<eos>``).

    Shape:
        keys ``(N, C)``; ``len(captions) == N``.
    """

    def __init__(self, keys: Tensor, captions: Sequence[Sequence[Sequence[int]]]) -> None:
        if keys.dim() != 2 or keys.shape[0] == 0:
            raise ValueError(f"keys must be (N, C) with N >= 1, got shape {tuple(keys.shape)}")
        if len(captions) != keys.shape[0]:
            raise ValueError(f"got {keys.shape[0]} keys but captions of {len(captions)} images")
        self.keys = keys.float()
        self.captions = [[list(map(int, c)) for c in caps] for caps in captions]

    @staticmethod
    def pool(features: Tensor) -> Tensor:
        """Region features averaged over the regions and L2-normalised.

        Shape:
            features ``(B, R, C)``; returns ``(B, C)``.
        """
        return torch.nn.functional.normalize(features.float().mean(dim=1), dim=-1)

    @classmethod
    def from_features(cls, features: Tensor, captions: Sequence[Sequence[Sequence[int]]], *,
                      batch_size: int = 512) -> NeighbourIndex:
        """The index of training images given as region features ``(N, R, C)`` (e.g. a feature cache)."""
        if features.dim() != 3:
            raise ValueError(f"features must be (N, R, C), got shape {tuple(features.shape)}")
        keys = torch.cat([cls.pool(chunk) for chunk in features.split(batch_size)])  # (N, C)
        return cls(keys, captions)

    @property
    def width(self) -> int:
        """C, the width of the features the index was built from."""
        return int(self.keys.shape[1])

    def check_features(self, features: Tensor) -> Tensor:
        """``features`` ``(B, R, C)`` of this index's width, else a ValueError naming both widths."""
        if features.dim() != 3 or features.shape[-1] != self.width:
            raise ValueError(f"the neighbour index holds features of width {self.width}; got features of shape "
                             f"{tuple(features.shape)} (another encoder?)")
        return features

    def nearest(self, features: Tensor, k: int) -> Tensor:
        """The ``k`` training images most similar to each input (cosine of the pooled features), nearest first.

        Shape:
            features ``(B, R, C)``; returns indices ``(B, min(k, N))``.
        """
        check_positive_int("k", k)
        query = self.pool(self.check_features(features))  # (B, C)
        return (query @ self.keys.T).topk(min(k, self.keys.shape[0]), dim=1).indices  # (B, k)

    def references(self, features: Tensor, k: int) -> list[list[list[int]]]:
        """For each input, the captions of its ``k`` nearest training images (one flat list per input)."""
        return [[c for i in row for c in self.captions[i]] for row in self.nearest(features, k).tolist()]

    def save(self, path: str | Path) -> None:
        """Write the index to a safetensors file (keys float16, captions as flat ids with offsets)."""
        from safetensors.torch import save_file

        flat = [c for caps in self.captions for c in caps]
        save_file({
            "keys": self.keys.half().contiguous(),
            "tokens": torch.tensor([t for c in flat for t in c], dtype=torch.int32),
            "caption_ends": torch.tensor(list(accumulate(len(c) for c in flat)), dtype=torch.int64),  # (M,)
            # (N,)
            "image_ends": torch.tensor(list(accumulate(len(caps) for caps in self.captions)), dtype=torch.int64),
        }, str(path), metadata={"format": "attnkit-neighbours"})

    @classmethod
    def load(cls, path: str | Path) -> NeighbourIndex:
        """Read an index written by :meth:`save`; a missing or malformed file is a ValueError naming it."""
        from safetensors.torch import load_file

        path = Path(path)
        if not path.is_file():
            raise ValueError(f"neighbour index {path} does not exist")
        try:
            tensors = load_file(str(path))
        except Exception as err:  # safetensors raises its own error type for a damaged header
            raise ValueError(f"{path} is not a neighbour index: it is not a readable safetensors file "
                             f"({err})") from None
        try:
            keys, tokens = tensors["keys"], tensors["tokens"].tolist()
            caption_ends, image_ends = tensors["caption_ends"].tolist(), tensors["image_ends"].tolist()
            flat = [tokens[a:b] for a, b in zip([0, *caption_ends[:-1]], caption_ends, strict=True)]
            captions = [flat[a:b] for a, b in zip([0, *image_ends[:-1]], image_ends, strict=True)]
            if caption_ends[-1:] not in ([len(tokens)], []) or image_ends[-1:] not in ([len(flat)], []):
                raise ValueError("its offsets do not match its tokens")
            return cls(keys, captions)
        except (KeyError, ValueError, IndexError) as err:
            raise ValueError(f"{path} is not a neighbour index: {err}") from None


@dataclass
class Consensus:
    """Consensus re-ranking settings: the index, the ``neighbours`` k whose captions are the references,
    and the ``weight`` of the caption's log-probability beside its consensus (chosen on Flickr8k's dev split)."""

    index: NeighbourIndex
    neighbours: int = 40
    weight: float = 0.005

    def __post_init__(self) -> None:
        if not isinstance(self.index, NeighbourIndex):
            raise TypeError(f"index must be a NeighbourIndex, got {type(self.index).__name__}")
        check_positive_int("neighbours", self.neighbours)
        check_weight(self.weight)
