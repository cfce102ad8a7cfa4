"""ring_attention equals single-process attnkit.attention: outputs and q/k/v gradients, every mask family.

Two gloo processes run every case once (one spawn for the folder); four run two
of them. Tolerances: 1e-12 in float64, 1e-5 in float32; half precision (which
the ring computes in float32, key/value gradients sent in float32) about two
units of the last place.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.parallel import cases, spawn
from tests.parallel.conftest import TWO

TOL = {"float64": 1e-12, "float32": 1e-5, "bfloat16": 3e-2, "float16": 4e-3}  # half: about two units of the last place
FOUR = [("causal", "balanced", "float64"), ("documents", "contiguous", "float32")]


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return spawn.run(cases.exactness_worker, 4, tmp_path_factory.mktemp("four"), FOUR)


def _check(found: list[dict[str, Any]], key: str) -> None:
    tol = TOL[key.rsplit("/", 1)[1]]
    for rank, per_rank in enumerate(found):
        r = per_rank["exact"][key] if "exact" in per_rank else per_rank[key]
        assert r["out_nan"] == 0.0, f"rank {rank}: NaN in the output"
        for what in ("out", "dq", "dk", "dv"):
            assert r[what] <= tol, f"rank {rank}: {what} differs by {r[what]:.3g} > {tol:g}"


@pytest.mark.parametrize("case,layout,dtype", TWO, ids=["/".join(x) for x in TWO])
def test_two_processes_equal_one(two: list[dict[str, Any]], case: str, layout: str, dtype: str) -> None:
    _check(two, f"{case}/{layout}/{dtype}")


@pytest.mark.parametrize("case,layout,dtype", FOUR, ids=["/".join(x) for x in FOUR])
def test_four_processes_equal_one(four: list[dict[str, Any]], case: str, layout: str, dtype: str) -> None:
    _check(four, f"{case}/{layout}/{dtype}")


def test_a_window_sends_less_than_the_full_ring(two: list[dict[str, Any]]) -> None:
    # The same T, heads and widths: a window of 3 needs only the neighbours' edge keys.
    for rank in range(2):
        window = two[rank]["exact"]["window/balanced/float64"]
        full = two[rank]["exact"]["full/balanced/float64"]
        assert window["forward_bytes"] <= 0.5 * full["forward_bytes"]
        assert window["backward_bytes"] <= 0.5 * full["backward_bytes"]


def test_packed_documents_send_only_shared_documents(two: list[dict[str, Any]]) -> None:
    for rank in range(2):
        docs = two[rank]["exact"]["documents/balanced/float64"]
        full = two[rank]["exact"]["full/balanced/float64"]
        assert 0 < docs["forward_bytes"] < 0.5 * full["forward_bytes"], "pieces of other documents were sent"


def test_no_key_rows_are_zero_not_nan(two: list[dict[str, Any]]) -> None:
    # "dense" has a query row with no key and "documents" padding rows: equal to attention's zeros
    for key in ("dense/balanced/float64", "documents/balanced/float64"):
        _check(two, key)


def test_tolerances_hold_a_planted_error() -> None:
    # negative control: the check fails on a difference above the tolerance
    with pytest.raises(AssertionError, match="differs"):
        _check([{"x/balanced/float64": {"out": 1e-9, "dq": 0, "dk": 0, "dv": 0, "out_nan": 0}}],
               "x/balanced/float64")
