"""The settings of a NumPy run (:class:`NumpyTrainSettings`), apart from the backend so that the command
line reads them without importing the NumPy twin."""

from __future__ import annotations

from dataclasses import dataclass

from attnkit._checks import setting
from attnkit.train.config import ClassifierTrainSettings

__all__ = ["NumpyTrainSettings"]


@dataclass(frozen=True)
class NumpyTrainSettings(ClassifierTrainSettings):
    """Training and tokenization settings of a numpy run (saved in its config.json).

    The fields of :class:`attnkit.train.config.ClassifierTrainSettings` (``epochs``,
    ``batch_size``, ``lr``, ``weight_decay``, ``warmup_ratio``, ``clip_norm``,
    ``patience``, ``seed``, ``on_nan``), with the NumPy twin's defaults for
    ``lr`` and ``warmup_ratio`` (``None``: a constant learning rate; a share
    warms up, then decays linearly to 0), and:

    Args:
        max_len: truncate documents to this many words.
        lowercase: lower-case text before splitting on whitespace.
        min_frequency: keep training words seen at least this often.
        vocab_size: keep at most this many words (plus ``<pad>`` and ``<unk>``).
    """

    lr: float = setting(3e-3, "Peak learning rate.", low=0, low_open=True)
    warmup_ratio: float | None = setting(None, "Share of steps with linear warm-up, then linear decay (none: a "
                                         "constant rate).", low=0, high=1, high_open=True)
    max_len: int = setting(256, "Truncate documents to this many words.", low=1)
    lowercase: bool = True
    min_frequency: int = setting(1, "Keep training words seen at least this often.", low=1)
    vocab_size: int = setting(20000, "Keep at most this many words (plus <pad> and <unk>).", low=1)
