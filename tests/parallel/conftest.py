"""One spawn of two gloo processes serves the folder: exactness, layouts and refusals (workers.two_worker)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.parallel import cases, spawn, workers

TWO = [(c, "balanced", dt) for c in cases.CASES for dt in ("float64", "float32")] + \
    [(c, "contiguous", "float64") for c in ("causal", "window", "documents", "gqa", "padding")] + \
    [("causal", "balanced", "bfloat16"), ("documents", "balanced", "float16"), ("alibi", "balanced", "bfloat16")]


@pytest.fixture(scope="session")
def two(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each of the two processes found, by rank."""
    return spawn.run(workers.two_worker, 2, tmp_path_factory.mktemp("two"), TWO)
