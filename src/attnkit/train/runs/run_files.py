"""What a load checks: a run's files agree with each other and with its config, or the load is refused.

A committed run is served only when

* every field of its ``config.json`` that attnkit reads has the type and the
  range it was written with (:data:`CONFIG_FIELDS`, the one table of them,
  checked by :func:`check_run_config` when the file is read, for every kind of run);
* its weights are finite (a diverged training never is, see :mod:`attnkit._finite`);
* ``labels.json`` is ``{"labels": [...]}``, a list of at least two distinct
  strings, as many as the model's outputs (``num_classes``);
* its vocabulary (``tokenizer.json``, ``vocab.json``) has as many entries as
  the embedding has rows (``vocab_size``), and every id it gives is in range.

Each refusal is a :class:`~attnkit.train.runs.rundir.RunFileError` naming the file
that disagrees, what it holds and what the config or the weights say. The
classification loader (:func:`attnkit.train.runs.checkpoint.load_checkpoint`) and
the NumPy twin's (:func:`attnkit.train.tasks.numpy.numpy_backend.load_numpy_run`) share
these checks; this module loads no torch.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnkit._checks import dataclass_kwargs, non_negative_int, one_of
from attnkit._finite import non_finite_message
from attnkit.train.runs.fileops import RunFileError

__all__ = ["CONFIG_FIELDS", "check_run_config", "settings_check", "check_labels", "check_vocab_size",
           "check_tokenizer_fits",
           "refuse_non_finite_file"]

FieldCheck = Callable[[str, Any], None]
"""Checks the value of one field, named by its path (``progress.epoch``); a ValueError or TypeError says what
it must be and what it is."""


def _text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, got {_short(value)} ({type(value).__name__})")


def _fields(name: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict of fields, got {_short(value)} ({type(value).__name__})")


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be true or false, got {_short(value)} ({type(value).__name__})")


def _status(name: str, value: Any) -> None:
    one_of(name, value, ("done", "training"))


def _progress(name: str, value: Any) -> None:
    """Where the training stood: whole epochs and steps (``best_epoch`` null before any validation)."""
    _fields(name, value)
    for key in ("epoch", "epochs", "step", "best_epoch"):
        if key in value and not (key == "best_epoch" and value[key] is None):
            non_negative_int(f"{name}.{key}", value[key])


def settings_check(cls: type, *, required: Sequence[str] = ()) -> FieldCheck:
    """The check of a field that holds the settings dataclass ``cls`` as a dict: each value typed
    (:func:`attnkit._checks.dataclass_kwargs`), then ranged by ``cls`` itself; the fields ``required`` must
    be written even where ``cls`` has a default for them."""
    def check(name: str, value: Any) -> None:
        _fields(name, value)
        missing = [key for key in required if key not in value]
        if missing:
            raise ValueError(f"{name} lacks {', '.join(missing)}")
        kwargs = dataclass_kwargs(cls, value, what=name)
        try:
            cls(**kwargs)
        except ValueError as err:  # the class's own range checks name the field first: give it its path
            first = str(err).split(" ", 1)[0]
            raise ValueError(f"{name}.{err}" if first in kwargs else f"{name}: {err}") from None
    return check


def _data_settings(name: str, value: Any) -> None:
    """How the run's text became ids (:class:`attnkit.train.config.DataSettings`); ``max_len``, the number
    of tokens a text is cut to, is always written (a numpy run writes only it)."""
    from attnkit.train.config import DataSettings

    settings_check(DataSettings, required=("max_len",))(name, value)


CONFIG_FIELDS: dict[str, FieldCheck] = {
    "run_id": _text,
    "model_name": _text,
    "backend": _text,
    "attnkit_version": _text,
    "status": _status,
    "progress": _progress,
    "model_config": _fields,  # checked field by field by the model's config class when it is built
    "data_settings": _data_settings,
    "train_config": _fields,  # the same, by the task's settings class where they are read (settings_check)
    "settings": _fields,
    "vocab": _fields,
    "data": _fields,
    "metrics": _fields,
    "shared_tokenizer": _flag,
}
"""The fields of a run's ``config.json`` that attnkit reads, and the check of each; a field a run of some
kind does not write may be absent (its loader says which it needs), one it holds must pass."""


def check_run_config(path: str | os.PathLike[str], data: Any,
                     fields: Mapping[str, FieldCheck] = CONFIG_FIELDS) -> dict[str, Any]:
    """``data``, the contents of the run config ``path``, once each field of ``fields`` it holds passes
    its check; else one :class:`RunFileError` line naming the file and the field."""
    if not isinstance(data, dict):
        raise RunFileError(f"{path} must hold a JSON object, got {type(data).__name__}")
    for key, check in fields.items():
        if key in data:
            try:
                check(key, data[key])
            except (TypeError, ValueError) as err:
                raise RunFileError(f"{path}: {err}") from None
    return data


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


def check_tokenizer_fits(path: str | os.PathLike[str], tokenizer: Any, vocab_size: object, *, at_most: bool = False,
                         field: str = "vocab_size") -> None:
    """Refuse the tokenizer read from ``path`` (a ``tokenizers.Tokenizer``) unless it fits an embedding of
    ``vocab_size`` rows: as many entries (:func:`check_vocab_size`), and every id it gives below ``vocab_size``
    (a count that fits can still hide an id far beyond the table)."""
    check_vocab_size(path, tokenizer.get_vocab_size(), vocab_size, at_most=at_most, field=field)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        return
    token, largest = max(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1],
                         default=("", -1))
    if largest >= vocab_size:
        raise RunFileError(f"{path} gives token {_short(token)} the id {largest}, but the model's embedding "
                           f"(config.json {field}) has {vocab_size} rows: every id must be below {vocab_size}")


def refuse_non_finite_file(path: str | os.PathLike[str], names: Sequence[str]) -> None:
    """Refuse the weights file ``path`` when its tensors ``names`` hold NaN or infinity."""
    if names:
        raise RunFileError(f"{non_finite_message(str(Path(path)), list(names))}: the weights of a diverged "
                           "training are not served; retrain (e.g. with a lower learning rate `lr`)")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
