"""Seeded train/validation/test splits and k-fold cross-validation, stratified on request.

Every function returns index lists (ascending) that are disjoint and together
cover ``range(n)``; the same ``seed`` gives the same split on every machine
(NumPy's ``default_rng``). With ``labels`` the split is stratified: each class
is shuffled and dealt out on its own, so every part keeps the class shares of
the whole (to within one example per class) -- the protocol for MR's 10-fold
cross-validation.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

__all__ = ["train_val_test_split", "kfold"]


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    return n


def _groups(n: int, labels: Sequence[Hashable] | None, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled index groups: one per class (in sorted label order), or one for all."""
    if labels is None:
        return [rng.permutation(n)]
    if len(labels) != n:
        raise ValueError(f"labels must have n={n} entries, got {len(labels)}")
    by_class: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    return [rng.permutation(np.asarray(by_class[c])) for c in sorted(by_class, key=repr)]


def train_val_test_split(
    n: int, val: float = 0.1, test: float = 0.1, seed: int = 0, *,
    labels: Sequence[Hashable] | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """Split ``range(n)`` into train, validation and test indices.

    ``val`` and ``test`` are fractions of ``n`` (of each class, when
    stratified), rounded to the nearest integer; the rest is training data.
    """
    n = _check_n(n)
    for name, value in (("val", val), ("test", test)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    if val + test >= 1:
        raise ValueError(f"val + test must be below 1 to leave training data, got {val} + {test}")
    rng = np.random.default_rng(seed)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for group in _groups(n, labels, rng):
        n_test = int(round(test * len(group)))
        n_val = int(round(val * len(group)))
        parts[2].extend(group[:n_test].tolist())
        parts[1].extend(group[n_test : n_test + n_val].tolist())
        parts[0].extend(group[n_test + n_val :].tolist())
    return sorted(parts[0]), sorted(parts[1]), sorted(parts[2])


def kfold(
    n: int, k: int, seed: int = 0, *, labels: Sequence[Hashable] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """``k`` folds of ``(train_idx, test_idx)``; the test parts partition ``range(n)``.

    Fold sizes differ by at most one. When stratified, each class is dealt
    round-robin over the folds, continuing where the previous class stopped, so
    both the class shares and the fold sizes stay balanced.
    """
    n = _check_n(n)
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= max(n, 2):
        raise ValueError(f"k must be an int in [2, n={n}], got {k!r}")
    rng = np.random.default_rng(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    position = 0
    for group in _groups(n, labels, rng):
        for index in group.tolist():
            folds[position % k].append(index)
            position += 1
    out = []
    for i in range(k):
        test = sorted(folds[i])
        train = sorted(j for f in range(k) if f != i for j in folds[f])
        out.append((train, test))
    return out
