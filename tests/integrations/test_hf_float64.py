"""float64 models on the attnkit backend equal eager to 1e-10: block masks, soft-capping, sinks, position bias."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.integrations.test_hf_backend import T, V, _model, _t5, on_the_interface  # noqa: E402


@pytest.fixture
def exact_eager(monkeypatch):
    """eager's attention with its softmax in float64: the decoders' eager softmax runs in float32 (``dtype=``)."""
    softmax = torch.nn.functional.softmax

    def in_the_input_dtype(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=x.dtype if x.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", in_the_input_dtype)


def _logits_and_grads(model, impl, **inputs):
    model.set_attn_implementation(impl)
    model.zero_grad()
    logits = model(**inputs).logits
    torch.manual_seed(1)
    (logits * torch.randn_like(logits)).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_equal_to_eager(model, **inputs):
    want, want_grads = _logits_and_grads(model, "eager", **inputs)
    got, got_grads = _logits_and_grads(model, "attnkit", **inputs)
    assert got.dtype == torch.float64
    assert float((got - want).abs().max()) < 1e-10
    for n in want_grads:
        assert float((got_grads[n] - want_grads[n]).abs().max()) < 1e-10 * max(1.0, float(want_grads[n].abs().max())), n


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "gemma2", "bert"])
def test_float64_decoders_and_encoders_equal_eager(name, exact_eager):
    model = _model(name).double()
    on_the_interface(model)  # BERT before transformers 5.0: refused by name
    mask = torch.ones(2, T, dtype=torch.long)
    mask[0, 9:] = 0  # right padding: eager's float64 mask (finfo.min) overflows to NaN on rows without a key
    _assert_equal_to_eager(model, input_ids=torch.randint(1, V, (2, T)), attention_mask=mask)


def test_float64_t5_position_bias_equals_eager(exact_eager):
    torch.manual_seed(0)
    model = _t5().eval().double()
    on_the_interface(model)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, 7:] = 0
    _assert_equal_to_eager(model, input_ids=torch.randint(1, V, (2, T)), attention_mask=mask,
                           decoder_input_ids=torch.randint(1, V, (2, 7)))
