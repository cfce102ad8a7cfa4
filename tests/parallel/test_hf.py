"""A Hugging Face LLaMA step on sharded ids, positions and labels under context_parallel equals the unsharded step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnkit.parallel import ContextParallelError


def test_llama_step_on_slices_gives_the_unsharded_loss_and_gradients(two: list[dict[str, Any]]) -> None:
    if two[0]["llama"] is None:
        pytest.skip("transformers is not installed (the hf extra)")
    for rank, found in enumerate(r["llama"] for r in two):
        assert found["max_diff"] <= 1e-12, f"rank {rank}: loss or gradients differ by {found['max_diff']:.3g}"
        assert found["hf_loss_diff"] <= 1e-6  # transformers' own loss runs in float32
        assert found["restored"] == 1.0, "the model did not get its attention implementation back"


def test_outside_the_block_the_ring_entry_refuses() -> None:
    pytest.importorskip("transformers")
    from attnkit.integrations.context_parallel import ring_attention_forward

    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="runs only inside attnkit.integrations.context_parallel.context_parallel"):
        ring_attention_forward(torch.nn.Module(), q, q, q, None)


def test_without_a_process_group_the_block_says_so() -> None:
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnkit.integrations.context_parallel import context_parallel

    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=16))
    before = model.config._attn_implementation
    with pytest.raises(ContextParallelError, match="init_process_group"):
        with context_parallel(model):
            pass
    assert model.config._attn_implementation == before


def test_the_backend_module_offers_the_same_block() -> None:
    from attnkit.integrations import context_parallel
    from attnkit.integrations import transformers as backend

    assert backend.context_parallel is context_parallel.context_parallel
