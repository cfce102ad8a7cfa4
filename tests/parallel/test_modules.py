"""attnkit's encoder and decoder stacks under context_parallel equal the stacks on the whole sequence."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnkit.parallel import ContextParallelError, context_parallel


@pytest.mark.parametrize("mask", ["causal", "padding", "documents", "decoder"])
def test_stacks_under_context_parallel_equal_the_whole_sequence(two: list[dict[str, Any]], mask: str) -> None:
    for rank, found in enumerate(r["stacks"] for r in two):
        assert found[mask] <= 1e-12, f"rank {rank}: differs by {found[mask]:.3g}"
        assert found[mask + "/restored"] == 1.0, "the layers did not get their own forward back"


def test_a_module_without_attnkit_attention_is_refused() -> None:
    with pytest.raises(ValueError, match="found no attnkit MultiHeadAttention in Linear"):
        with context_parallel(torch.nn.Linear(2, 2)):
            pass


def test_without_a_process_group_context_parallel_says_so() -> None:
    from attnkit.blocks import TransformerEncoder, TransformerLayerConfig

    enc = TransformerEncoder(TransformerLayerConfig(d_model=8, num_heads=2, d_ff=8), 1)
    with pytest.raises(ContextParallelError, match="init_process_group"):
        with context_parallel(enc):
            pass
