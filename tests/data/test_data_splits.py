"""Splits and k-fold: disjoint, covering, seeded-repeatable, stratified."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.splits import kfold, train_val_test_split


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), val=st.floats(0, 0.45), test=st.floats(0, 0.45), seed=st.integers(0, 9))
def test_split_disjoint_and_covering(n: int, val: float, test: float, seed: int) -> None:
    tr, va, te = train_val_test_split(n, val, test, seed)
    assert sorted(tr + va + te) == list(range(n))
    assert len(te) == round(test * n) and len(va) == round(val * n)
    assert (tr, va, te) == train_val_test_split(n, val, test, seed)


def test_split_seed_changes_split() -> None:
    assert train_val_test_split(100, seed=0) != train_val_test_split(100, seed=1)


def test_split_stratified_keeps_shares() -> None:
    labels = ["a"] * 80 + ["b"] * 20
    tr, va, te = train_val_test_split(100, 0.1, 0.2, seed=3, labels=labels)
    assert Counter(labels[i] for i in te) == {"a": 16, "b": 4}
    assert Counter(labels[i] for i in va) == {"a": 8, "b": 2}
    assert sorted(tr + va + te) == list(range(100))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 200), k=st.integers(2, 10), seed=st.integers(0, 5), data=st.data())
def test_kfold_partition(n: int, k: int, seed: int, data: st.DataObject) -> None:
    k = min(k, n)
    stratify = data.draw(st.booleans())
    labels = data.draw(st.lists(st.sampled_from("xyz"), min_size=n, max_size=n)) if stratify else None
    folds = kfold(n, k, seed, labels=labels)
    assert len(folds) == k
    tests = [t for _, t in folds]
    assert sorted(i for t in tests for i in t) == list(range(n))  # disjoint and covering
    sizes = [len(t) for t in tests]
    assert max(sizes) - min(sizes) <= 1
    for train, test in folds:
        assert not set(train) & set(test) and len(train) + len(test) == n
    assert folds == kfold(n, k, seed, labels=labels)


def test_kfold_stratified_class_counts() -> None:
    labels = ["pos"] * 53 + ["neg"] * 47
    for _, test in kfold(100, 10, seed=0, labels=labels):
        counts = Counter(labels[i] for i in test)
        assert counts["pos"] in (5, 6) and counts["neg"] in (4, 5)
    assert kfold(100, 10, seed=0) != kfold(100, 10, seed=1)


def test_errors() -> None:
    with pytest.raises(ValueError, match="k must be an int in"):
        kfold(5, 1)
    with pytest.raises(ValueError, match="labels must have n=5 entries, got 4"):
        kfold(5, 2, labels=[0, 1, 0, 1])
    with pytest.raises(ValueError, match="val \\+ test must be below 1"):
        train_val_test_split(10, 0.5, 0.5)
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        train_val_test_split(-1)
