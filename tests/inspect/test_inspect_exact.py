"""Every map a capture records is exact, or the call is refused by name: never a silently wrong map.

Each architecture of :data:`attnkit.inspect.coverage.FAMILIES` is built from a
small random-weight config and captured under its default kernels; its maps
are compared with the model's own eager ``output_attentions`` and checked by
``verify=True``. The terms an attention function receives as keywords (T5's
``position_bias``, GPT-OSS's sinks ``s_aux``, Gemma-2's ``softcap``, sliding
windows) are in the map; an unknown keyword refuses the call.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from attnkit.inspect import CaptureMismatch, capture
from attnkit.inspect.coverage import FAMILIES, coverage_row, tiny_inputs, tiny_model
from attnkit.inspect.hf import UnreadableCall, hf_weights

pytest.importorskip("transformers")

REFUSED = {"longformer", "big_bird", "falcon"}  # banded/sparse maps; Falcon's ALiBi under SDPA (read when eager)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_is_read_exactly_or_refused_by_name(family: str) -> None:
    row = coverage_row(family)
    assert row.outputs_equal
    assert row.status != "WRONG", (row.worst, row.note)
    if family in REFUSED:
        assert row.status == "refused" and row.refused  # every attention module named
    else:
        assert row.status == "read" and row.verified is True and row.worst <= 1e-5


@pytest.mark.parametrize("family", ["t5", "gpt_oss", "gemma2", "mistral"])
def test_the_terms_are_in_the_map(family: str) -> None:
    """T5's position bias, GPT-OSS's sinks, Gemma-2's soft-capping, Mistral's window: against eager."""
    model = tiny_model(family, "eager")
    inputs = tiny_inputs(family)
    with torch.no_grad(), capture(model, verify=True) as cap:
        out = model(**inputs, output_attentions=True)
    first = out.encoder_attentions[0] if family == "t5" else out.attentions[0]
    name = next(iter(cap.weights))
    real = inputs["attention_mask"].bool()[:, None, :, None]
    assert ((cap.weights[name] - first).abs() * real).max() <= 1e-6
    assert not cap.missed and max(cap.verified.values()) <= 1e-6


def _window_kernel(module, query, key, value, attention_mask, scaling=None, dropout=0.0,  # type: ignore[no-untyped-def]
                   sliding_window=None, **kwargs):
    """A kernel that takes its causal window from the ``sliding_window`` keyword and at most a ``(B, Tk)``
    padding mask, as flash attention does: the call a capture sees carries no 4-D mask."""
    tq, tk = query.shape[-2], key.shape[-2]
    i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
    keep = ((j <= i) & (i - j < sliding_window))[None, None]
    if attention_mask is not None:
        keep = keep & attention_mask.bool()[:, None, None, :]
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1), attn_mask=keep, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


@pytest.mark.parametrize("padded", [False, True])
def test_a_sliding_window_without_a_4d_mask_matches_eager(monkeypatch: pytest.MonkeyPatch, padded: bool) -> None:
    """Mistral's window reaches the kernel as a keyword only (no mask, or a ``(B, Tk)`` padding mask): the
    map holds the ``sliding_window`` keys ending at each query, as eager's ``output_attentions``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    monkeypatch.setitem(AttentionInterface._global_mapping, "window_kernel", _window_kernel)
    if padded:  # flash attention's mask: None without padding, else the (B, Tk) padding mask
        monkeypatch.setitem(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, "window_kernel", flash_attention_mask)
    inputs = tiny_inputs("mistral")  # 9 tokens, a window of 4
    if not padded:
        inputs = {"input_ids": inputs["input_ids"]}
    model = tiny_model("mistral", "window_kernel")  # each model its own config: loading one sets its kernel
    eager = tiny_model("mistral", "eager")
    with torch.no_grad(), capture(model, verify=True) as cap:
        out = model(**inputs)
    with torch.no_grad():
        expected = eager(**inputs, output_attentions=True)
    assert torch.allclose(out.last_hidden_state, expected.last_hidden_state, atol=1e-5)  # the kernel is right
    real = inputs["attention_mask"].bool()[:, None, :, None] if padded else torch.ones(1, 1, 9, 1, dtype=torch.bool)
    assert list(cap.weights) == ["layers.0.self_attn", "layers.1.self_attn"] and not cap.missed
    for w, want in zip(cap.weights.values(), expected.attentions, strict=True):
        assert ((w - want).abs() * real).max() <= 1e-6
        assert ((w[0, 0] > 0).sum(-1) == torch.tensor([1, 2, 3, 4, 4, 4, 4, 4, 4])).all()  # 4 keys at most


def test_t5_position_bias_matters() -> None:
    """The negative control: without the bias the map is far off (0.08 before the bias was read)."""
    model = tiny_model("t5", "sdpa")
    inputs = tiny_inputs("t5")
    with torch.no_grad(), capture(model) as cap:
        model(**inputs)
    calls: list[dict] = []

    def spy(module, query, key, value, mask, kwargs):  # type: ignore[no-untyped-def]
        calls.append(dict(module=module, q=query, k=key, mask=mask, kwargs=dict(kwargs)))
    from attnkit.inspect.hf import HFPatches
    layer = model.encoder.block[0].layer[0].SelfAttention
    keys = HFPatches.open([layer], spy)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        HFPatches.close([layer], keys, spy)
    c = calls[0]
    with_bias = hf_weights(c["module"], c["q"], c["k"], c["mask"], c["kwargs"])
    without = hf_weights(c["module"], c["q"], c["k"], c["mask"], {**c["kwargs"], "position_bias": None})
    assert torch.equal(with_bias, cap.weights["encoder.block.0.layer.0.SelfAttention"])
    assert (with_bias - without).abs().max() > 1e-2


def test_an_unknown_keyword_refuses_the_call() -> None:
    model = tiny_model("llama", "eager")
    q = torch.randn(1, 4, 3, 8)
    k = torch.randn(1, 2, 3, 8)
    with pytest.raises(UnreadableCall, match="attention_temperature=Tensor"):
        hf_weights(model.layers[0].self_attn, q, k, None, {"attention_temperature": torch.ones(1)})
    hf_weights(model.layers[0].self_attn, q, k, None, {"dropout": 0.1, "position_ids": torch.arange(3)})


def test_an_unknown_keyword_in_a_model_goes_to_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's call goes on unchanged; the map is refused with the keyword's name."""
    model = tiny_model("llama", "sdpa")
    inputs = tiny_inputs("llama")
    layer = model.layers[0].self_attn
    original = type(layer).forward

    def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return original(self, *args, **kwargs, logit_offset=torch.zeros(1))
    monkeypatch.setattr(type(layer), "forward", forward)
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with capture(model) as cap:
                seen = model(**inputs).last_hidden_state
    assert torch.equal(plain, seen)
    assert cap.weights == {} and "logit_offset=Tensor" in cap.missed["layers.0.self_attn"]


def test_verify_names_a_wrong_map(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    cap_module = sys.modules["attnkit.inspect.capture"]  # the module, not the function of that name
    model = tiny_model("bert", "sdpa")
    inputs = tiny_inputs("bert")
    real = cap_module.hf_weights

    def off(*args, **kwargs):  # type: ignore[no-untyped-def]
        return real(*args, **kwargs) * 0.99
    monkeypatch.setattr(cap_module, "hf_weights", off)
    with pytest.raises(CaptureMismatch, match=r"encoder\.layer\.0\.attention\.self \(max difference"):
        with torch.no_grad(), capture(model, verify=True):
            model(**inputs)


def test_verify_names_a_map_it_cannot_recompute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model file whose eager function returns no weights (some speech models' do not)."""
    import attnkit.inspect.hf as hf

    model = tiny_model("bert", "sdpa")
    monkeypatch.setattr(hf, "eager_function", lambda module: lambda *a, **k: (None, None))
    with pytest.raises(CaptureMismatch, match=r"cannot be recomputed.*encoder\.layer\.0\.attention\.self"):
        with torch.no_grad(), capture(model, verify=True):
            model(**tiny_inputs("bert"))


def test_a_decoding_step_reads_the_cached_keys_too() -> None:
    """Falcon (eager) returns its own weights: a step with a cache gives the map over every key."""
    model = tiny_model("falcon-eager", "eager")
    ids = torch.randint(3, 60, (1, 5))
    with torch.no_grad():
        first = model(input_ids=ids, use_cache=True)
        with capture(model) as cap:
            model(input_ids=ids[:, :1], past_key_values=first.past_key_values, use_cache=True)
        again = model(input_ids=ids, use_cache=True)
        expected = model(input_ids=ids[:, :1], past_key_values=again.past_key_values, output_attentions=True)
    w = cap.weights["h.0.self_attention"]
    assert w.shape == (1, 4, 1, 6) and torch.equal(w, expected.attentions[0])
