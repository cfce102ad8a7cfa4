"""What a load checks: a run's files agree with each other and with its config, or the load is refused.

A committed run is served only when

* its weights are finite (a diverged training never is, see :mod:`attnkit._finite`);
* ``labels.json`` is ``{"labels": [...]}``, a list of at least two distinct
  strings, as many as the model's outputs (``num_classes``);
* its vocabulary (``tokenizer.json``, ``vocab.json``) has as many entries as
  the embedding has rows (``vocab_size``), so that every id it gives is in range.

Each refusal is a :class:`~attnkit.train.rundir.RunFileError` naming the file
that disagrees, what it holds and what the config or the weights say. The
classification loader (:func:`attnkit.train.checkpoint.load_checkpoint`) and
the NumPy twin's (:func:`attnkit.train.numpy_backend.load_numpy_run`) share
these checks; this module loads no torch.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit._finite import non_finite_message
from attnkit.train.fileops import RunFileError

__all__ = ["check_labels", "check_vocab_size", "refuse_non_finite_file"]


def check_labels(path: str | os.PathLike[str], data: Any, num_classes: object) -> list[str]:
    """The labels of ``labels.json`` (``data``, as read from ``path``) when they fit a model of
    ``num_classes`` outputs."""
    labels = data.get("labels") if isinstance(data, dict) and set(data) == {"labels"} else None
    if not isinstance(labels, list):
        raise RunFileError(f"{path} must hold {{\"labels\": [...]}}, a list of label strings; it holds "
                           f"{_short(data)}")
    if not all(isinstance(label, str) for label in labels):
        raise RunFileError(f"{path} must list label strings; it holds {_short(labels)}")
    counts = Counter(labels)  # linear: a long list is counted once, never searched once per label
    if len(counts) != len(labels):
        twice = sorted(label for label, n in counts.items() if n > 1)
        raise RunFileError(f"{path} lists label(s) {twice[:8]} more than once")
    if len(labels) < 2:
        raise RunFileError(f"{path} lists {len(labels)} label(s) {labels}; a classifier needs at least 2")
    if len(labels) != num_classes:
        raise RunFileError(f"{path} lists {len(labels)} labels, but the model (config.json num_classes and its "
                           f"weights) has {num_classes} outputs")
    return labels


def check_vocab_size(path: str | os.PathLike[str], size: int, vocab_size: object, *, at_most: bool = False,
                     field: str = "vocab_size") -> None:
    """Refuse a vocabulary file of ``size`` entries for an embedding of ``vocab_size`` rows.

    The sizes must be equal; with ``at_most`` (a pretrained model whose
    embedding may have spare rows) the vocabulary may be smaller.
    """
    fits = size <= vocab_size if at_most and isinstance(vocab_size, int) else size == vocab_size
    if not fits:
        relation = "at most" if at_most else "exactly"
        raise RunFileError(f"{path} has a vocabulary of {size} tokens, but the model's embedding (config.json "
                           f"{field}) has {vocab_size} rows; it needs {relation} {vocab_size} "
                           "(a tokenizer of another run?)")


def refuse_non_finite_file(path: str | os.PathLike[str], names: Sequence[str]) -> None:
    """Refuse the weights file ``path`` when its tensors ``names`` hold NaN or infinity."""
    if names:
        raise RunFileError(f"{non_finite_message(str(Path(path)), list(names))}: the weights of a diverged "
                           "training are not served; retrain (e.g. with a lower learning rate `lr`)")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
