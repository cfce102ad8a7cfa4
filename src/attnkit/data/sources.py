"""Where a classification run's examples come from and how they are split, without torch.

A :class:`DataSource` names the labelled data (and optional separate
validation and test files), the shares to split off when those are absent,
and the reader's keywords. :func:`load_splits` reads it and returns the
stratified train / validation / test parts; the torch pipeline and the NumPy
twin split the same examples the same way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attnkit.data.readers import Example, read_examples
from attnkit.data.splits import train_val_test_split

__all__ = ["DataSource", "load_splits", "split_examples", "read_nonempty"]


@dataclass(frozen=True)
class DataSource:
    """Where the examples come from and how they are split.

    Attributes:
        train: the labelled data (file or folder).
        val: a separate validation file; without it ``val_ratio`` of ``train`` is split off.
        test: a separate test file; without it ``test_ratio`` of ``train`` is split off.
        val_ratio: share of ``train`` held out for validation (when ``val`` is None).
        test_ratio: share of ``train`` held out for testing (when ``test`` is None).
        reader: keywords for :func:`attnkit.data.readers.read_examples`
            (``format``, ``encoding``, ``text_field``, ``label_field``,
            ``skip_bad_rows``, ``on_skipped``).
        record: what a run's ``config.json`` stores about the data (resolved
            paths and content hashes, so that a resume finds the same data).
    """

    train: str
    val: str | None = None
    test: str | None = None
    val_ratio: float = 0.1
    test_ratio: float = 0.1
    reader: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def read_nonempty(path: str, reader: dict[str, Any]) -> list[Example]:
    """The examples of ``path``; a ValueError naming it when it holds none."""
    examples = read_examples(path, **reader)
    if not examples:
        raise ValueError(f"{path} holds no examples")
    return examples


def split_examples(examples: Sequence[Example], *, val: float, test: float, seed: int
                   ) -> tuple[list[Example], list[Example], list[Example]]:
    """Stratified train / validation / test parts of ``examples``."""
    tr, va, te = train_val_test_split(len(examples), val, test, seed, labels=[e.label for e in examples])
    return [examples[i] for i in tr], [examples[i] for i in va], [examples[i] for i in te]


def load_splits(source: DataSource, *, seed: int) -> tuple[list[Example], list[Example], list[Example]]:
    """Read ``source`` and split it: separate files where given, seeded stratified shares otherwise."""
    examples = read_nonempty(source.train, source.reader)
    tr, va, te = split_examples(examples, val=0.0 if source.val else source.val_ratio,
                                test=0.0 if source.test else source.test_ratio, seed=seed)
    for part, given, ratio, what, flag in ((va, source.val, source.val_ratio, "validation", "val"),
                                           (te, source.test, source.test_ratio, "test", "test")):
        if not part and not given and ratio > 0:
            raise ValueError(_too_few(source.train, examples, ratio, what, flag))
    va = read_nonempty(source.val, source.reader) if source.val else va
    te = read_nonempty(source.test, source.reader) if source.test else te
    return tr, va, te


def _too_few(path: str | os.PathLike[str], examples: Sequence[Example], ratio: float, what: str, flag: str) -> str:
    """Why ``--{flag}-ratio`` held out no example of ``path``, how many it needs, and what to do instead."""
    counts: dict[str, int] = {}
    for e in examples:
        counts[e.label] = counts.get(e.label, 0) + 1
    needed = math.floor(0.5 / ratio) + 1  # the split rounds ratio * (examples of a class) to the nearest integer
    return (f"{path} holds {len(examples)} examples, the largest class {max(counts.values())}: "
            f"--{flag}-ratio {ratio:g} holds out none of them for {what} (a class needs at least {needed} "
            f"examples for one); add data, give a --{flag} FILE, or pass --{flag}-ratio 0 to train without "
            f"a {what} part")
