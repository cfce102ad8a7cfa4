"""ring_attention refuses bad calls by name before any collective, and a lost peer becomes a named error."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

import attnkit.parallel.ring as ring_module
from attnkit.parallel import ContextParallelError, ring_attention
from tests.parallel import spawn
from tests.parallel.workers import message, qkv


def test_without_a_process_group_ring_attention_says_what_to_call() -> None:
    with pytest.raises(ContextParallelError, match="needs an initialised torch.distributed process group"):
        ring_attention(*qkv(8))


def test_bad_calls_are_refused_by_name(two: list[dict[str, Any]]) -> None:
    for found in (r["refusals"] for r in two):
        assert "T = Tl * world = 5 * 2 = 10 does not divide into the 'balanced' layout's" in found["odd length"]
        assert found["odd Tl, contiguous"] == "no error"  # T = 6 divides into 2 contiguous slices
        assert "ValueError" in found["mask shape"]
        assert "disagree on causal, scale and score_mod" in found["causal differs"]
        assert "disagree on layout" in found["layout differs"]
        assert "disagree on mask" in found["mask differs"]
        assert "timeout must be a positive number" in found["timeout"]
        assert found["not a tensor"] == "TypeError: k must be a torch.Tensor, got list"
        assert "slices of one sequence on one device: the same local length Tl" in found["other local length"]
        assert found["scale"] == "ValueError: scale must be a positive float or None, got 0.0"
        assert "needs a gradient" in found["learned score_mod"]
        assert found["group of one"]
        assert found["group of one, BlockMask and causal"]
        if found["hf group of one, BlockMask"] is not None:  # a decoder adds causality to the documents' mask
            assert found["hf group of one, BlockMask"] <= 1e-12


def _lost_in_backward(rank: int, world: int) -> dict[str, Any]:
    if rank == 1:
        def crash(*args: Any, **kwargs: Any) -> Any:
            os._exit(0)  # a peer dies in the middle of the ring
        ring_module.backward_block = crash  # type: ignore[assignment]
    q, k, v = (x.requires_grad_() for x in qkv(8))
    out = ring_attention(q, k, v, causal=True, timeout=5)
    start = time.monotonic()
    said = message(lambda: out.sum().backward())
    return {"message": said, "seconds": time.monotonic() - start}


def _silent(rank: int, world: int) -> dict[str, Any]:
    done = Path(os.environ["ATTNKIT_TEST_OUT"], "rank0-done")
    if rank == 1:  # alive, but never calls ring_attention; leaves once rank 0 has its answer (or after 30 s)
        until = time.monotonic() + 30
        while not done.exists() and time.monotonic() < until:
            time.sleep(0.1)
        return {}
    start = time.monotonic()
    said = message(lambda: ring_attention(*qkv(8), timeout=1))
    done.write_text("")
    return {"message": said, "seconds": time.monotonic() - start}


def test_a_peer_that_dies_mid_ring_is_a_named_error(tmp_path: Path) -> None:
    found = spawn.run_rank0(_lost_in_backward, 2, tmp_path)
    assert "ContextParallelError: context parallelism lost rank 1" in found["message"]
    assert found["seconds"] < 30


def test_a_silent_peer_is_a_named_error_after_the_timeout(tmp_path: Path) -> None:
    found = spawn.run_rank0(_silent, 2, tmp_path)
    assert "ContextParallelError: context parallelism lost a peer while agreeing" in found["message"]
    assert "timeout 1 s" in found["message"]
    assert found["seconds"] < 8  # the timeout, not the silent peer leaving after 30 s
