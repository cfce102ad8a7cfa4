"""Shared helpers for model configs and model inputs.

Every model takes one frozen dataclass config that inherits :class:`ModelConfig`:
plain data, JSON-ready through :meth:`ModelConfig.to_dict`, rebuilt and
validated by :meth:`ModelConfig.from_dict`. Unknown keys are an error that
lists the valid fields -- a typo in a config file must not silently fall back
to a default; a missing field takes its default, or is an error naming it
when it has none. A field that holds another config (a model's layer config,
:class:`~attnkit.blocks.TransformerLayerConfig`) is saved as a nested dict and
read back into that dataclass, its fields named by their path (``encoder.d_ff``).

The text classifiers share one input convention, checked by
:func:`check_token_batch`: ``ids (B, T)`` token ids padded with anything past
``lengths (B,)``; position ``t`` of document ``b`` is real when ``t < lengths[b]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from attnkit._checks import dataclass_kwargs, non_negative_int, one_of, positive_int, probability
from attnkit.core import masks

__all__ = [
    "ModelConfig",
    "TextClassifierConfig",
    "check_positive_int",
    "check_fraction",
    "check_choice",
    "check_token_batch",
    "token_batch",
    "valid_positions",
    "reading_length",
]

C = TypeVar("C", bound="ModelConfig")


def check_positive_int(name: str, value: object, *, allow_zero: bool = False) -> int:
    """``value`` as an int > 0 (>= 0 with ``allow_zero``), else ValueError naming ``name``."""
    return non_negative_int(name, value) if allow_zero else positive_int(name, value)


def check_fraction(name: str, value: object) -> float:
    """``value`` as a float in ``[0, 1)`` (a dropout probability)."""
    return probability(name, value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else ValueError listing them."""
    return str(one_of(name, value, choices))


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base of every model config: dict round trip with strict key checking."""

    @classmethod
    def tokenizer_defaults(cls, tokenizer: Any) -> dict[str, Any]:
        """Fields a training run reads off its tokenizer unless given (none here; the HAN's sentence ends)."""
        return {}

    def reading_length(self, max_len: int) -> int:
        """Tokens of each document the model reads when its run cuts the data at ``max_len``: ``max_len``
        (a model reading long documents in chunks reads more, :mod:`attnkit.models.wide`)."""
        return max_len

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (tuples become lists in JSON; :meth:`from_dict` restores them)."""
        return dataclasses.asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        """The valid keys of :meth:`from_dict`."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build and validate a config: unknown or missing keys raise ValueError listing the fields, a value
        of the wrong type (a list where an int belongs) TypeError naming the field
        (:func:`attnkit._checks.dataclass_kwargs`); the class then checks the ranges."""
        return cls(**dataclass_kwargs(cls, data))


@dataclasses.dataclass(frozen=True)
class TextClassifierConfig(ModelConfig):
    """Base of the text-classifier configs: the two sizes that every one of them starts with.

    Attributes:
        vocab_size: size of the token vocabulary (ids lie in ``[0, vocab_size)``).
        num_classes: size of the label set.
    """

    vocab_size: int
    num_classes: int

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("num_classes", self.num_classes)


def valid_positions(lengths: Tensor, t: int) -> Tensor:
    """Boolean ``(B, T)``: True where position ``t < lengths[b]``."""
    return torch.arange(t, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)


def check_token_batch(ids: object, lengths: object, vocab_size: int) -> tuple[Tensor, Tensor]:
    """Validate a padded token batch and return ``(ids, lengths)``.

    Shape:
        ids ``(B, T)`` integer; lengths ``(B,)`` integer with ``1 <= lengths[b] <= T``.
    """
    ids, lengths, _ = token_batch(ids, lengths, vocab_size)
    return ids, lengths


def token_batch(ids: object, lengths: object, vocab_size: int) -> tuple[Tensor, Tensor, masks.AttentionMask]:
    """Validate a padded token batch and build its key-padding mask, once.

    The mask is one :class:`~attnkit.core.masks.AttentionMask` (the
    ``(B, 1, 1, T)`` of :func:`attnkit.masks.from_lengths`, True where a
    position may be attended, with its rows that have a key), which every
    attnkit layer and pooling takes as it is; a model built on this batch
    carries it down instead of deriving another one from ``lengths``.

    Shape:
        ids ``(B, T)`` integer; lengths ``(B,)`` integer with ``1 <= lengths[b] <= T``;
        returns ``(ids, lengths, mask)`` with ids and lengths as int64 and mask's ``allowed`` ``(B, 1, 1, T)``.
    """
    if not isinstance(ids, Tensor) or not isinstance(lengths, Tensor):
        raise TypeError(
            f"ids and lengths must be torch.Tensors, got {type(ids).__name__} and "
            f"{type(lengths).__name__}"
        )
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() != 2:
        raise ValueError(f"ids must be an integer (B, T) tensor, got {ids.dtype} {tuple(ids.shape)}")
    if lengths.dtype.is_floating_point or lengths.shape != (ids.shape[0],):
        raise ValueError(
            f"lengths must be an integer (B,) = ({ids.shape[0]},) tensor, got "
            f"{lengths.dtype} {tuple(lengths.shape)}"
        )
    # The value checks read the tensors' data, which a torch.compile/torch.export graph cannot
    # branch on: traced, the model checks shapes and dtypes only.
    checked = not torch.compiler.is_compiling()
    if checked and ids.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > ids.shape[1]):
        raise ValueError(
            f"lengths must lie in [1, T={ids.shape[1]}], got min {int(lengths.min())}, "
            f"max {int(lengths.max())}"
        )
    lengths = lengths.long()
    mask = masks.AttentionMask.from_lengths(lengths, ids.shape[1])  # allowed (B, 1, 1, T)
    real = ids[mask.key_mask()] if checked else None  # the real tokens, flattened
    if real is not None and real.numel() and (int(real.min()) < 0 or int(real.max()) >= vocab_size):
        raise ValueError(
            f"ids must lie in [0, vocab_size={vocab_size}), got values from {int(real.min())} "
            f"to {int(real.max())}"
        )
    return ids.long(), lengths, mask


def reading_length(model_or_config: object, max_len: int) -> int:
    """Tokens to encode of each document for a model (or its config) whose run cuts the data at ``max_len``:
    its config's :meth:`ModelConfig.reading_length`, ``max_len`` for any other model. The one place the
    reading length is worked out; a loaded run has it as :attr:`attnkit.Predictor.read_len`."""
    config = getattr(model_or_config, "config", model_or_config)
    return config.reading_length(max_len) if isinstance(config, ModelConfig) else max_len
