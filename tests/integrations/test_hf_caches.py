"""generate() on the attnkit backend with every cache: the tokens equal sdpa's (greedy and beams, left padding)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.core.block_mask import BlockMask  # noqa: E402
from attnkit.integrations import transformers as hf  # noqa: E402
from tests.integrations.test_hf_backend import V, _bart, _model, _t5, on_the_interface  # noqa: E402

NEW = 10  # prompt 6 + 10 new tokens: Mistral's window of 5 (and Gemma-2's of 4) is shorter


def _gemma3():  # sliding and full layers (a hybrid cache), a window of 4
    return transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4, query_pre_attn_scalar=8,
        layer_types=["sliding_attention", "full_attention"]))


def _qwen3():  # q/k norms, one sliding layer (window 4) and one full layer
    if not hasattr(transformers, "Qwen3ForCausalLM"):
        pytest.skip(f"Qwen3 is not in transformers {transformers.__version__}")
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, use_sliding_window=True, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]))


def _family(name: str):
    if name in ("gemma3", "qwen3"):
        torch.manual_seed(0)
        return {"gemma3": _gemma3, "qwen3": _qwen3}[name]().eval()
    if name in ("t5", "bart"):
        torch.manual_seed(0)
        return {"t5": _t5, "bart": _bart}[name]().eval()
    return _model(name)


def _generate(model, impl: str, **kwargs):
    torch.manual_seed(3)
    ids = torch.randint(1, V, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0  # left padding
    model.set_attn_implementation(impl)
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                          **kwargs)


CASES = [(name, cache) for name in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gpt2", "gpt_oss", "t5",
                                    "bart")
         for cache in ("dynamic", "static")]  # offloaded caches need CUDA


@pytest.mark.parametrize(("name", "cache"), CASES)
def test_generate_with_each_cache_equals_sdpa(name, cache):
    model = _family(name)
    on_the_interface(model)
    want = _generate(model, "eager" if name in ("gemma2", "gemma3", "gpt_oss") else "sdpa", cache_implementation=cache)
    got = _generate(model, "attnkit", cache_implementation=cache)
    assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen3", "gpt_oss", "t5"])
def test_beam_search_with_a_static_cache_equals_sdpa(name):
    model = _family(name)
    on_the_interface(model)
    want = _generate(model, "eager" if name == "gpt_oss" else "sdpa", cache_implementation="static", num_beams=3)
    assert torch.equal(_generate(model, "attnkit", cache_implementation="static", num_beams=3), want)


def test_a_prepared_block_mask_of_another_size_is_refused_by_name():
    bm = hf.attnkit_mask(2, 3, 8, mask_function=None)
    assert isinstance(bm, BlockMask) and bm.ndim == 4
    assert hf.attnkit_mask(2, 3, 8, attention_mask=bm) is bm
    with pytest.raises(hf.HFBackendError, match="prepared BlockMask"):
        hf.attnkit_mask(2, 3, 9, attention_mask=bm)


def test_one_query_row_gets_its_dense_mask():
    from transformers.masking_utils import causal_mask_function

    padding = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]])
    got = hf.attnkit_mask(2, 1, 7, q_offset=6, mask_function=causal_mask_function, attention_mask=padding)
    assert isinstance(got, torch.Tensor) and got.shape == (2, 1, 1, 7)
    assert torch.equal(got[:, 0, 0], padding.bool())
