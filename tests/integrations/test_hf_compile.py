"""attn_implementation="attnkit" under torch.compile: no graph break from the backend, eager's outputs."""

from __future__ import annotations

import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.integrations import transformers as hf  # noqa: E402  registers "attnkit"
from tests.integrations.test_hf_backend import (  # noqa: E402
    FAMILIES,
    _bart,
    _model,
    _t5,
    chunked_causal,
    on_the_interface,
)

V, T = 97, 12
PACKED = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]])


def _llama():
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    model.set_attn_implementation("attnkit")
    return model.eval()


def _bert():
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    on_the_interface(model)  # before transformers 5.0: refused by name
    model.set_attn_implementation("attnkit")
    return model.eval()


def _inputs(form: str) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    if form == "no mask":
        return {"input_ids": ids}
    if form == "full mask":
        return {"input_ids": ids, "attention_mask": torch.ones(2, T, dtype=torch.long)}
    if form == "padding":
        mask = torch.ones(2, T, dtype=torch.long)
        mask[1, :3] = 0  # left padding
        return {"input_ids": ids, "attention_mask": mask}
    return {"input_ids": ids[:1], "position_ids": PACKED}  # packed: three documents in one row


FORMS = ("no mask", "full mask", "padding", "packed")


@pytest.mark.parametrize("build", [_llama, _bert], ids=["llama", "bert"])
@pytest.mark.parametrize("form", FORMS)
def test_the_backend_breaks_no_graph_and_gives_eager_outputs(build, form):
    model, inputs = build(), _inputs(form)
    extra = {"use_cache": False} if build is _llama else {}
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(**inputs, **extra)
    assert explained.graph_break_count == 0, [b.reason.splitlines()[0] for b in explained.break_reasons]
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True, backend="eager")(**inputs, **extra).logits
        backend = model(**inputs, **extra).logits
        model.set_attn_implementation("eager")
        eager = model(**inputs, **extra).logits
    real = inputs["attention_mask"].bool() if "attention_mask" in inputs else torch.ones(compiled.shape[:2], dtype=bool)
    torch.testing.assert_close(compiled, backend, atol=1e-5, rtol=0)
    if form != "packed":  # eager mixes an encoder's packed documents; the backend keeps them apart
        torch.testing.assert_close(compiled[real], eager[real], atol=1e-5, rtol=0)


def test_packed_documents_stay_apart_when_compiled():
    model, inputs = _bert(), _inputs("packed")
    torch._dynamo.reset()
    with torch.no_grad():
        packed = torch.compile(model, fullgraph=True, backend="eager")(**inputs).logits
        alone = model(input_ids=inputs["input_ids"][:, 5:9]).logits
    torch.testing.assert_close(packed[:, 5:9], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("form", ["padding", "packed"])
def test_a_compiled_training_step_has_the_gradients_of_eager_mode(form):
    model, inputs = _llama(), _inputs(form)
    labels = inputs["input_ids"].clone()
    if "attention_mask" in inputs:
        labels[inputs["attention_mask"] == 0] = -100
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    compiled(**inputs, labels=labels, use_cache=False).loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(**inputs, labels=labels, use_cache=False).loss.backward()  # the backend, not compiled
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, atol=1e-5, rtol=0, msg=name)


def _family(name: str):
    if name == "t5":
        torch.manual_seed(0)
        return _t5().eval()
    if name == "bart":
        torch.manual_seed(0)
        return _bart().eval()
    return _model(name)


@pytest.mark.parametrize("name", [*FAMILIES, "t5", "bart"])
def test_every_family_compiles_without_a_break_on_a_padded_batch(name):
    """Windows (Mistral, Qwen2), soft-capping (Gemma-2), sinks (GPT-OSS), T5's position bias, cross-attention."""
    if name == "gpt_oss" and hf._version() < (5, 3):
        pytest.skip("transformers < 5.3 cannot compile GPT-OSS's float32 experts (torch._grouped_mm wants bfloat16) "
                    "with any attention, eager's too; 5.3 added their fallback")
    model = _family(name)
    on_the_interface(model)
    model.set_attn_implementation("attnkit")
    inputs = _inputs("padding")
    if name in ("t5", "bart"):
        inputs["decoder_input_ids"] = inputs["input_ids"][:, :6]
    elif "use_cache" in inspect.signature(type(model).forward).parameters:  # 4.5x wraps the forward
        inputs["use_cache"] = False
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(**inputs)
    assert explained.graph_break_count == 0, [b.reason.splitlines()[0] for b in explained.break_reasons]
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True, backend="eager")(**inputs).logits
        backend = model(**inputs).logits
    torch.testing.assert_close(compiled, backend, atol=1e-5, rtol=0)


@pytest.mark.parametrize("q_offset", [6, torch.tensor(6)], ids=["int", "tensor"])
def test_the_compiled_builder_gives_the_eager_builders_mask_dense(q_offset):
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    fn = chunked_causal(3, torch.tensor([1]))

    def build(offset):
        return hf.attnkit_mask(1, 4, 10, q_offset=offset, kv_offset=0, mask_function=fn, attention_mask=padding)

    torch._dynamo.reset()
    compiled = torch.compile(build, fullgraph=True, backend="eager")(q_offset)
    eager = hf.attnkit_mask(1, 4, 10, q_offset=6, kv_offset=0, mask_function=fn, attention_mask=padding)
    assert type(compiled) is torch.Tensor and compiled.shape == (1, 1, 4, 10)
    assert torch.equal(compiled, eager.to_dense())


def test_the_compiled_cache_position_entry_gives_the_eager_builders_mask_dense():
    """transformers < 5.4 hands cache_position; under compile its first entry stays a tensor (no graph break)."""
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    fn = chunked_causal(3, torch.tensor([1]))

    def build(cache_position):
        return hf.attnkit_mask_from_cache_position(1, cache_position, 10, mask_function=fn, attention_mask=padding)

    torch._dynamo.reset()
    compiled = torch.compile(build, fullgraph=True, backend="eager")(torch.arange(6, 10))
    eager = hf.attnkit_mask(1, 4, 10, q_offset=6, kv_offset=0, mask_function=fn, attention_mask=padding)
    assert type(compiled) is torch.Tensor and torch.equal(compiled, eager.to_dense())


def test_generate_compiled_by_transformers_with_a_static_cache_equals_sdpa():
    """generate() compiles the decoding forward (inductor, fullgraph) for a static cache; the tokens are sdpa's."""
    from transformers import CompileConfig

    model = _model("llama")
    torch.manual_seed(3)
    ids = torch.randint(1, V, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0  # left padding
    config = CompileConfig(fullgraph=True)
    config._compile_all_devices = True  # transformers' own switch to compile on CPU too (its tests use it)
    kwargs = {"input_ids": ids, "attention_mask": mask, "max_new_tokens": 8, "do_sample": False, "pad_token_id": 0,
              "cache_implementation": "static"}
    model.set_attn_implementation("sdpa")
    want = model.generate(**kwargs)  # not compiled: transformers compiles on CPU only when told
    model.set_attn_implementation("attnkit")
    torch._dynamo.reset()
    got = model.generate(**kwargs, compile_config=config)
    assert torch.equal(got, want)
    assert hasattr(model, "_compiled_call")  # the decoding steps ran compiled (transformers keeps it)
