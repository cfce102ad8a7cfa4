"""shard_sequence and gather_sequence: the two layouts, a round trip, gradients, and lengths that do not divide."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnkit.parallel import ContextParallelError, shard_sequence
from attnkit.parallel.layout import runs_of


def test_balanced_gives_each_rank_a_head_and_a_tail_chunk() -> None:
    assert runs_of(0, 2, 16, "balanced") == [(0, 4), (12, 16)]
    assert runs_of(1, 2, 16, "balanced") == [(4, 8), (8, 12)]
    assert runs_of(1, 4, 16, "contiguous") == [(4, 8)]
    # equal causal work: the number of (query, key <= query) pairs each rank computes
    work = [sum(p + 1 for a, b in runs_of(r, 4, 32, "balanced") for p in range(a, b)) for r in range(4)]
    assert len(set(work)) == 1


@pytest.mark.parametrize("layout,length,rule", [("balanced", 10, "2 \\* world = 4 chunks"),
                                                 ("contiguous", 9, "world = 2 slices")])
def test_lengths_that_do_not_divide_are_refused(layout: str, length: int, rule: str) -> None:
    with pytest.raises(ValueError, match=f"= {length} does not divide into the '{layout}' layout's {rule}"):
        runs_of(0, 2, length, layout)


def test_without_a_process_group_the_error_says_what_to_call() -> None:
    with pytest.raises(ContextParallelError, match="init_process_group"):
        shard_sequence(torch.zeros(2, 8), 1)


def test_shard_then_gather_is_the_identity_and_gradients_come_back(two: list[dict[str, Any]]) -> None:
    for rank, found in enumerate(r["layout"] for r in two):
        for layout in ("balanced", "contiguous"):
            assert found[f"{layout}/slice"], (rank, layout)
            assert found[f"{layout}/round_trip"], (rank, layout)
            assert found[f"{layout}/grad"], (rank, layout)
        assert "T = 6 does not divide into the 'balanced' layout's 2 * world = 4 chunks" in found["odd"]
