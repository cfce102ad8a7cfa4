"""An ensemble of captioners that read one set of region features.

:class:`CaptionEnsemble` decodes with the mean of its members' next-word
probabilities (:func:`attnkit.decoding.ensemble_steps`) and the mean of their
attention, through the same greedy and beam searches as one captioner
(:class:`~attnkit.models.captioning.generation.CaptionGenerator`). Members
are typically the same recipe trained with other seeds. They must share the
vocabulary size, the special ids, the caption length and the encoder, weights
included (a frozen pretrained backbone): the ensemble encodes each image once
and every member reads those regions through its own decoder.

Shape legend: B batch, S image side, R = h·w regions, C region width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.decoding import StepFunction, ensemble_steps
from attnkit.models.captioning.generation import CaptionGenerator
from attnkit.models.captioning.model import ImageCaptioner

__all__ = ["CaptionEnsemble"]

SHARED = ("vocab_size", "pad_id", "bos_id", "eos_id", "unk_id", "max_len", "backbone", "image_size")
"""The config fields every member must agree on."""


class CaptionEnsemble(CaptionGenerator, nn.Module):
    """Several :class:`~attnkit.models.captioning.model.ImageCaptioner` decoding as one.

    ``greedy``, ``beam_search``, ``generate_greedy`` and ``generate_beam`` are
    those of one captioner; ``encoder``, ``encode`` and ``check_features`` are
    the first member's (all members have its encoder).

    Shape:
        images ``(B, 3, S, S)`` or features ``(B, R, C)``, as for one captioner.
    """

    def __init__(self, members: Sequence[ImageCaptioner]) -> None:
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one captioner, got none")
        for i, member in enumerate(members):
            if not isinstance(member, ImageCaptioner):
                raise TypeError(f"ensemble member {i} must be an ImageCaptioner, got {type(member).__name__}")
        first = members[0]
        for i, member in enumerate(members[1:], start=1):
            for name in SHARED:
                if getattr(member.config, name) != getattr(first.config, name):
                    raise ValueError(f"ensemble member {i} has {name}={getattr(member.config, name)!r} where "
                                     f"member 0 has {getattr(first.config, name)!r}: members must share it")
            if not _same_weights(first.encoder, member.encoder):
                raise ValueError(f"ensemble member {i} has other encoder weights than member 0: an ensemble reads "
                                 "one set of region features, so members need one frozen encoder")
        self.members = nn.ModuleList(members)
        self.config = first.config
        self.grid = first.grid
        self.feature_dim = first.feature_dim

    def encode(self, images: Tensor) -> Tensor:
        """The first member's region features (every member's are the same)."""
        return self._first.encode(images)

    def check_features(self, features: object) -> Tensor:
        """The first member's check of cached region features."""
        return self._first.check_features(features)

    @property
    def encoder(self) -> nn.Module:
        """The encoder every member shares (the first member's module)."""
        return self._first.encoder

    @property
    def _first(self) -> ImageCaptioner:
        first = self.members[0]
        assert isinstance(first, ImageCaptioner)
        return first

    def _step_function(self) -> StepFunction[tuple[Any, ...]]:
        return ensemble_steps([m._step_function() for m in self.members])  # type: ignore[operator]

    def _start_state(self, features: Tensor) -> tuple[Any, ...]:
        return tuple(m._start_state(features) for m in self.members)  # type: ignore[operator]


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
