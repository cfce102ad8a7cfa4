"""attn_implementation="attnkit" in Hugging Face models: parity with eager, packing, generation, errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.core.block_mask import BlockMask  # noqa: E402
from attnkit.integrations import transformers as hf  # noqa: E402

V, T = 97, 12


def _bert():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _roberta():  # positions counted from its padding index
    return transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _distilbert():
    return transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
        vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0))


def _modernbert():  # rotary positions: its attention layers see angles, never the position ids
    return transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, attention_dropout=0.0,
        mlp_dropout=0.0, embedding_dropout=0.0))


ENCODERS = ("bert", "roberta", "distilbert", "modernbert")


def _llama():  # grouped-query attention: 4 query heads, 2 key/value heads
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))


def _mistral():  # a window of 5 keys, shorter than the sequence
    return transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, sliding_window=5))


def _qwen2():  # one sliding layer (window 4), one full layer
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, use_sliding_window=True, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]))


def _gemma2():  # soft-capping at 0.5 (the random logits reach it) and a window of 4
    return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4,
        attn_logit_softcapping=0.5, query_pre_attn_scalar=8))


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))


def _gpt_oss():  # attention sinks (s_aux), alternating sliding and full layers
    if not hasattr(transformers, "GptOssForCausalLM"):
        pytest.skip(f"GPT-OSS arrives in transformers 4.55, not in {transformers.__version__}")
    return transformers.GptOssForCausalLM(transformers.GptOssConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        max_position_embeddings=64, sliding_window=4))


FAMILIES = {"bert": _bert, "roberta": _roberta, "distilbert": _distilbert, "modernbert": _modernbert,
            "llama": _llama, "mistral": _mistral,
            "qwen2": _qwen2, "gemma2": _gemma2, "gpt2": _gpt2, "gpt_oss": _gpt_oss}


def _model(name: str):
    torch.manual_seed(0)
    model = FAMILIES[name]().eval()
    with torch.no_grad():  # a sink that matters: random init draws them near 0
        for p_name, p in model.named_parameters():
            if p_name.endswith("sinks"):
                p.normal_(0.0, 1.0)
    return model


def _run(model, impl: str, **inputs):
    model.set_attn_implementation(impl)
    model.zero_grad()
    logits = model(**inputs).logits
    valid = inputs["attention_mask"].bool()
    torch.manual_seed(1)
    (logits[valid] * torch.randn_like(logits[valid])).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach()[valid], grads


@pytest.mark.parametrize("name", list(FAMILIES))
def test_logits_and_gradients_equal_eager_with_padding(name):
    model = _model(name)
    on_the_interface(model)  # BERT before transformers 5.0, ModernBERT before 5.10, T5 before 5.15: refused by name
    ids = torch.randint(1, V, (3, T))
    mask = torch.ones(3, T, dtype=torch.long)
    if name in ENCODERS:
        mask[1, 8:] = 0  # right padding
    else:
        mask[1, :4] = 0  # left padding, as for generation
    mask[2, :1] = 0 if name not in ENCODERS else 1
    want, want_grads = _run(model, "eager", input_ids=ids, attention_mask=mask)
    got, got_grads = _run(model, "attnkit", input_ids=ids, attention_mask=mask)
    assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    assert want_grads.keys() == got_grads.keys() and len(got_grads) > 4
    for n in want_grads:
        scale = max(1.0, float(want_grads[n].abs().max()))  # 1e-5 of the largest entry (float32 sums)
        assert (got_grads[n] - want_grads[n]).abs().max() <= 1e-5 * scale, n


def test_the_masks_are_block_masks_that_skip_blocks_outside_the_window():
    model = _model("mistral")
    model.set_attn_implementation("attnkit")
    seen = []
    layer = model.model.layers[0].self_attn
    layer.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs["attention_mask"]),
                                    with_kwargs=True)
    with torch.no_grad():
        model(input_ids=torch.randint(1, V, (1, 1024)))
    assert isinstance(seen[0], BlockMask) and seen[0].shape == (1, None, 1024, 1024)
    assert seen[0].counts["empty"] > 0.7 * sum(seen[0].counts.values())  # a window of 5 in 1024


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_bfloat16_runs_without_nan(name):
    model = _model(name).to(torch.bfloat16)
    model.set_attn_implementation("attnkit")
    mask = torch.ones(2, T, dtype=torch.long)
    mask[0, :5] = 0
    logits = model(input_ids=torch.randint(1, V, (2, T)), attention_mask=mask).logits
    logits.float().sum().backward()
    assert torch.isfinite(logits.float()).all()
    assert all(torch.isfinite(p.grad.float()).all() for p in model.parameters() if p.grad is not None)


def packed_on_the_backend(name: str) -> tuple[Any, list[torch.Tensor], dict[str, torch.Tensor]]:
    """Model ``name`` on the backend, three examples of 5, 9 and 7 tokens and their packed batch
    (``DataCollatorWithFlattening``, labels included); the test skipped where the family is refused by name."""
    model = _model(name)
    on_the_interface(model)
    model.set_attn_implementation("attnkit")
    torch.manual_seed(2)
    examples = [torch.randint(1, V, (n,)) for n in (5, 9, 7)]
    batch = transformers.DataCollatorWithFlattening()([{"input_ids": e.tolist(), "labels": e.tolist()}
                                                        for e in examples])
    return model, examples, batch


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert", "modernbert", "llama", "mistral", "gpt_oss"])
def test_packed_rows_equal_each_example_alone(name):
    model, examples, batch = packed_on_the_backend(name)
    assert batch["input_ids"].shape == (1, 21) and batch["position_ids"][0, 5] == 0
    model.zero_grad()
    packed = model(**batch)
    packed.loss.backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    starts = [0, 5, 14, 21]
    causal = name not in ENCODERS
    counts = [int((batch["labels"][0, s + causal: e] != -100).sum()) for s, e in zip(starts, starts[1:], strict=False)]
    alone_logits = []
    for s, e, n in zip(starts, starts[1:], counts, strict=False):
        out = model(input_ids=batch["input_ids"][:, s:e], labels=batch["labels"][:, s:e],
                    position_ids=batch["position_ids"][:, s:e])  # RoBERTa would count from its padding index
        (out.loss * n / sum(counts)).backward()
        alone_logits.append(out.logits.detach())
    assert torch.allclose(packed.logits.detach(), torch.cat(alone_logits, 1), atol=1e-5, rtol=0)
    for n in packed_grads:
        assert torch.allclose(packed_grads[n], dict(model.named_parameters())[n].grad, atol=1e-5, rtol=0), n


def test_a_model_built_on_the_backend_keeps_packed_rows_apart_without_positions_in_its_layers():
    """ModernBERT's layers never see position ids: check_model, the recipe's second line, hands them the model
    forward's."""
    torch.manual_seed(0)
    config = _modernbert().config
    on_the_interface(transformers.ModernBertForMaskedLM(config))
    model = transformers.ModernBertForMaskedLM._from_config(config, attn_implementation="attnkit").eval()
    model = hf.check_model(model)
    ids = torch.randint(1, V, (1, 14))
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=torch.tensor([list(range(5)) + list(range(9))])).logits
        alone = model(input_ids=ids[:, 5:]).logits
    assert torch.allclose(packed[:, 5:], alone, atol=1e-5)


def test_packed_rows_differ_from_one_long_document():
    """The document mask is what makes the packed row equal: without restarting positions it differs."""
    model = _model("bert")
    on_the_interface(model)
    model.set_attn_implementation("attnkit")
    ids = torch.randint(1, V, (1, 14))
    with torch.no_grad():
        restarting = model(input_ids=ids, position_ids=torch.tensor([list(range(5)) + list(range(9))])).logits
        alone = model(input_ids=ids[:, :5]).logits
    assert torch.allclose(restarting[:, :5], alone, atol=1e-5)
    with torch.no_grad():  # one document: the first five tokens see the other nine
        counting = model(input_ids=ids, position_ids=torch.arange(14)[None]).logits
    assert not torch.allclose(counting[:, :5], alone, atol=1e-3)


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2"])
def test_generate_with_the_cache_equals_sdpa(name):
    model = _model(name)
    ids = torch.randint(1, V, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0
    tokens = {}
    for impl in ("sdpa", "attnkit"):
        model.set_attn_implementation(impl)
        tokens[impl] = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False,
                                      pad_token_id=0)
    assert tokens["attnkit"].shape == (2, 16)
    assert torch.equal(tokens["attnkit"], tokens["sdpa"])


def test_output_attentions_returns_the_weights_of_eager():
    model = _model("llama")
    mask = torch.ones(2, T, dtype=torch.long)
    mask[0, :3] = 0
    ids = torch.randint(1, V, (2, T))
    got = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            got[impl] = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert len(got["attnkit"]) == 2
    for a, b in zip(got["attnkit"], got["eager"], strict=True):
        assert a.shape == b.shape == (2, 4, T, T)
        assert torch.allclose(a[1], b[1], atol=1e-6) and torch.allclose(a[0, :, 3:], b[0, :, 3:], atol=1e-6)


def test_training_mode_with_dropout_runs_and_differs_between_calls():
    model = _model("bert")
    on_the_interface(model)
    model.config.attention_probs_dropout_prob = 0.5
    for layer in model.bert.encoder.layer:
        layer.attention.self.dropout.p = 0.5
    model.set_attn_implementation("attnkit")
    model.train()
    ids = torch.randint(1, V, (2, T))
    a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert torch.isfinite(a).all() and not torch.allclose(a, b)


def test_register_is_idempotent_and_names_both_interfaces():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    hf.register()
    hf.register()
    assert AttentionInterface._global_mapping["attnkit"] is hf.attnkit_attention_forward
    want = hf.attnkit_mask if hf._version() >= hf.Q_LENGTH_SINCE else hf.attnkit_mask_from_cache_position
    assert AttentionMaskInterface._global_mapping["attnkit"] is want


@pytest.mark.parametrize("version", [(4, 53), (4, 0), (5, 26), (6, 0)])
def test_a_transformers_version_outside_the_range_is_refused(version):
    with pytest.raises(hf.HFBackendError, match=r"transformers >= 4\.54, < 5\.26.*attnkit\[hf\]"):
        hf.check_version(version)
    hf.check_version()  # the installed one is inside


@pytest.mark.parametrize("version", [(4, 54), (5, 25)])
def test_the_lowest_and_newest_supported_releases_pass(version):
    hf.check_version(version)  # the range's two ends, each one step inside the refused (4, 53) and (5, 26)


def test_a_float_mask_is_refused_by_name():
    model = _model("llama")
    model.set_attn_implementation("attnkit")
    float_mask = torch.zeros(1, 1, T, T)
    with pytest.raises(hf.HFBackendError, match=r"attention_mask as a torch.float32 tensor of shape \(1, 1, 12, 12\)"):
        model(input_ids=torch.randint(1, V, (1, T)), attention_mask=float_mask)


def test_a_prepared_boolean_mask_is_used_as_given():
    model = _model("llama")
    ids = torch.randint(1, V, (1, T))
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    model.set_attn_implementation("attnkit")
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=causal).logits
        want = model(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5)


def test_an_unknown_keyword_or_mask_shape_is_refused_by_name():
    q = torch.randn(1, 4, 3, 8)
    module = torch.nn.Module()
    with pytest.raises(hf.HFBackendError, match=r"does not know the attention keywords \['head_mask'\]"):
        hf.attnkit_attention_forward(module, q, q, q, None, head_mask=torch.ones(4))
    with pytest.raises(hf.HFBackendError, match="cu_seq_lens_q without position_ids"):
        hf.attnkit_attention_forward(module, q, q, q, None, cu_seq_lens_q=torch.tensor([0, 3]))
    with pytest.raises(hf.HFBackendError, match=r"2-D padding attention_mask \(B, T\), got \(1, 1, 3\)"):
        hf.attnkit_mask(1, 3, 3, attention_mask=torch.ones(1, 1, 3, dtype=torch.bool))
    with pytest.raises(hf.HFBackendError, match=r"keywords it does not know: \['chunk'\]"):
        hf.attnkit_mask(1, 3, 3, chunk=4)
    with pytest.raises(hf.HFBackendError, match=r"s_aux must hold one sink logit per query head \(4,\)"):
        hf.attnkit_attention_forward(module, q, q, q, None, s_aux=torch.zeros(3))


def sdpa_reference(batch_size, q_length, kv_length, q_offset=0, **kwargs):
    """transformers' own ``sdpa_mask`` for queries ``q_offset .. q_offset + q_length - 1``, in this release's signature.

    Before 5.4 it takes the queries' ``cache_position``; from 5.4 ``q_length`` and ``q_offset``.
    """
    from transformers.masking_utils import sdpa_mask

    if hf._version() >= hf.Q_LENGTH_SINCE:
        return sdpa_mask(batch_size, q_length, kv_length, q_offset=q_offset, **kwargs)
    return sdpa_mask(batch_size, cache_position=torch.arange(q_offset, q_offset + q_length), kv_length=kv_length,
                     **kwargs)


@pytest.mark.parametrize(("q_length", "q_offset", "kv_offset"), [(6, 0, 0), (6, 5, 0), (4, 9, 3), (1, 10, 0)])
def test_the_cache_position_entry_gives_the_q_length_entrys_mask(q_length, q_offset, kv_offset, monkeypatch):
    """transformers < 5.4 hands the builder cache_position; the queries it names give the same mask, any release."""
    from collections import OrderedDict

    from transformers.masking_utils import and_masks, packed_sequence_mask_function, sliding_window_causal_mask_function

    kv_length = q_offset + q_length - kv_offset
    padding = torch.ones(2, q_offset + q_length, dtype=torch.bool)
    padding[0, :2] = False  # left padding
    docs = torch.zeros(2, q_offset + q_length, dtype=torch.long)
    docs[1, 3:] = 1
    fn = and_masks(sliding_window_causal_mask_function(3), packed_sequence_mask_function(docs))
    monkeypatch.setattr(hf, "_MASKS", OrderedDict())  # each built anew, never the other's cached mask
    got = hf.attnkit_mask_from_cache_position(batch_size=2, cache_position=torch.arange(q_offset, q_offset + q_length),
                                             kv_length=kv_length, kv_offset=kv_offset, mask_function=fn,
                                             attention_mask=padding, allow_is_causal_skip=False)
    hf._MASKS.clear()
    want = hf.attnkit_mask(2, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset, mask_function=fn,
                           attention_mask=padding)
    dense = (lambda m: m) if q_length == 1 else (lambda m: m.to_dense())
    assert torch.equal(dense(got), dense(want))
    reference = sdpa_reference(2, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset, mask_function=fn,
                               attention_mask=padding, allow_is_causal_skip=False)
    assert torch.equal(dense(got), reference.expand(2, 1, q_length, kv_length))


def test_the_cache_position_entry_refuses_positions_that_are_not_one_row():
    with pytest.raises(hf.HFBackendError, match=r"cache_position of shape \(Tq,\), got \(1, 4\)"):
        hf.attnkit_mask_from_cache_position(1, torch.arange(4)[None], 4)


def test_the_mask_builder_folds_padding_offsets_and_chunks():
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    fn = chunked_causal(3, torch.tensor([1]))
    got = hf.attnkit_mask(1, 4, 10, q_offset=6, kv_offset=0, mask_function=fn, attention_mask=padding)
    want = sdpa_reference(1, 4, 10, q_offset=6, kv_offset=0, mask_function=fn, attention_mask=padding,
                          allow_is_causal_skip=False)
    assert torch.equal(got.to_dense(), want)


def uses_the_interface(model) -> bool:
    """Whether ``model`` can run on the backend in this transformers release (``hf.check_model``, called as the
    recipe says, passes: the forward's position ids are then watched); if not (BERT before 5.0, T5 before 5.15:
    ``hf.FAMILY_SINCE``), it must be refused by name."""
    try:
        hf.check_model(model)
        return True
    except hf.HFBackendError as e:
        assert f"{type(model).__name__} (model family '{hf._family(type(model))}') cannot use " in str(e)
    return False


def on_the_interface(model) -> None:
    """Skip the test, naming the release, where ``model``'s family is refused by name (after checking it is)."""
    if uses_the_interface(model):
        return
    name, got = type(model).__name__, ".".join(map(str, hf._version()))
    since = hf.FAMILY_SINCE.get(hf._family(type(model)))
    if since is None:
        pytest.skip(f"{name} does not call the attention interface in transformers {got}: refused by name")
    pytest.skip(f"{name} runs on the backend from transformers {since[0]}.{since[1]} on; refused by name in {got}")


def chunked_causal(chunk_size: int, left_padding: torch.Tensor):
    """transformers' chunked causal mask function; 4.54's takes the chunk size only (no left padding)."""
    import inspect

    from transformers.masking_utils import chunked_causal_mask_function

    if len(inspect.signature(chunked_causal_mask_function).parameters) == 1:
        return chunked_causal_mask_function(chunk_size)
    return chunked_causal_mask_function(chunk_size, left_padding)


def _t5():  # a learned relative position bias (position_bias, a score mod) and cross-attention
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
        decoder_start_token_id=0, relative_attention_num_buckets=8))


def _bart():  # cross-attention over a padded source
    return transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        dropout=0.0, attention_dropout=0.0))


@pytest.mark.parametrize("build", [_t5, _bart], ids=["t5", "bart"])
def test_encoder_decoder_logits_and_gradients_equal_eager(build):
    torch.manual_seed(0)
    model = build().eval()
    on_the_interface(model)
    src, tgt = torch.randint(1, V, (2, T)), torch.randint(1, V, (2, 7))
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, 7:] = 0
    results = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        model.zero_grad()
        logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.manual_seed(1)
        (logits * torch.randn_like(logits)).sum().backward()
        results[impl] = logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                          if p.grad is not None}
    (want, want_grads), (got, got_grads) = results["eager"], results["attnkit"]
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    for n in want_grads:
        scale = max(1.0, float(want_grads[n].abs().max()))
        assert (got_grads[n] - want_grads[n]).abs().max() <= 1e-5 * scale, n
    if build is _t5:
        assert want_grads["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"].abs().sum() > 0


def test_a_layout_seen_again_reuses_its_block_mask_and_another_does_not():
    from transformers.masking_utils import sliding_window_causal_mask_function

    padding = torch.tensor([[0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    a = hf.attnkit_mask(1, 6, 6, mask_function=sliding_window_causal_mask_function(3), attention_mask=padding)
    b = hf.attnkit_mask(1, 6, 6, mask_function=sliding_window_causal_mask_function(3), attention_mask=padding.clone())
    other_window = hf.attnkit_mask(1, 6, 6, mask_function=sliding_window_causal_mask_function(2),
                                   attention_mask=padding)
    other_padding = hf.attnkit_mask(1, 6, 6, mask_function=sliding_window_causal_mask_function(3),
                                    attention_mask=torch.tensor([[0, 1, 1, 1, 1, 1]], dtype=torch.bool))
    assert b is a and other_window is not a and other_padding is not a
    assert not torch.equal(other_window.to_dense(), a.to_dense())
    assert not torch.equal(other_padding.to_dense(), a.to_dense())


def bidirectional():
    """transformers' bidirectional mask function (5.0 on); before, a function that allows every entry."""
    from transformers import masking_utils as mu

    def allow_all(batch_idx, head_idx, q_idx, kv_idx):
        return q_idx >= 0

    return getattr(mu, "bidirectional_mask_function", allow_all)


def _transformers_mask_functions(seed):
    """transformers' own mask functions, with random windows, chunks, packed documents and padding."""
    import random
    from collections import OrderedDict

    from transformers import masking_utils as mu

    rng = random.Random(seed)
    t = rng.randint(20, 90)
    docs = torch.zeros(2, t, dtype=torch.long)
    for row in range(2):
        for cut in rng.sample(range(1, t), rng.randint(0, 4)):
            docs[row, cut:] += 1
    window, window_both_sides = rng.randint(1, 30), rng.randint(1, 30)
    fns = [
        mu.causal_mask_function,
        mu.sliding_window_causal_mask_function(window),
        chunked_causal(rng.randint(1, 20), torch.tensor([rng.randint(0, 5), 0])),
        mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(docs)),
        mu.or_masks(mu.sliding_window_overlay(rng.randint(1, 9)), mu.packed_sequence_mask_function(docs)),
    ]
    if hasattr(mu, "bidirectional_mask_function"):  # transformers >= 5.0
        fns.append(mu.bidirectional_mask_function)
    if hasattr(mu, "sliding_window_bidirectional_mask_function"):  # transformers >= 5.3
        fns.append(mu.sliding_window_bidirectional_mask_function(window_both_sides))
    padding = torch.ones(2, t, dtype=torch.bool)
    padding[0, : rng.randint(0, t // 2)] = False  # left padding
    padding[1, t - rng.randint(0, t // 2):] = False  # right padding
    q_offset = rng.choice([0, 0, rng.randint(1, t - 1)])
    return t, fns, padding, q_offset, OrderedDict()


@pytest.mark.parametrize("seed", range(4))
def test_block_rules_of_transformers_mask_functions_give_the_exhaustive_mask(seed, monkeypatch):
    from attnkit.core import block_mask as bmod

    t, fns, padding, q_offset, cache = _transformers_mask_functions(seed)
    monkeypatch.setattr(hf, "BLOCK_SIZE", 8)  # many blocks of every kind
    monkeypatch.setattr(hf, "_MASKS", cache)
    for fn in fns:
        assert hf._rule_of(fn) is not None, fn
        tq = t - q_offset
        got = hf.attnkit_mask(2, tq, t, q_offset=q_offset, mask_function=fn, attention_mask=padding)
        want = sdpa_reference(2, tq, t, q_offset=q_offset, mask_function=fn, attention_mask=padding,
                              allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
        assert torch.equal(got.to_dense(), want.expand(2, 1, tq, t))
        cache.clear()
        with monkeypatch.context() as m:
            m.setattr(bmod, "_USE_RULES", False)
            slow = hf.attnkit_mask(2, tq, t, q_offset=q_offset, mask_function=fn, attention_mask=padding)
        cache.clear()
        for name in ("kv_indices", "elem_index", "elements"):
            assert torch.equal(getattr(got, name), getattr(slow, name)), name
        assert got.counts == slow.counts


def test_a_window_mask_evaluates_only_the_blocks_on_its_edges(monkeypatch):
    from transformers.masking_utils import sliding_window_causal_mask_function

    from attnkit.core import block_mask as bmod

    seen = []
    real = bmod.eval_mod
    monkeypatch.setattr(bmod, "eval_mod", lambda mod, idx, shape: seen.append(shape) or real(mod, idx, shape))
    monkeypatch.setattr(hf, "_MASKS", type(hf._MASKS)())
    bm = hf.attnkit_mask(1, 4096, 4096, mask_function=sliding_window_causal_mask_function(512))
    evaluated = sum(torch.Size(s).numel() for s in seen)
    assert evaluated <= 2 * 32 * 128 * 128  # the diagonal and the window's edge, not 4096 * 4096 entries
    q, k = torch.arange(4096)[:, None], torch.arange(4096)
    assert torch.equal(bm.to_dense()[0, 0], (k <= q) & (k > q - 512))


def test_packed_rows_of_short_documents_take_small_blocks(monkeypatch):
    seq = torch.repeat_interleave(torch.arange(16), torch.tensor([58, 30, 90, 61, 40, 75, 58, 20, 101, 58, 44,
                                                                  66, 58, 35, 80, 58]))[None]
    assert hf.packed_block_size(seq) == 16  # half the median document (58) rounded down to a power of two
    assert hf.packed_block_size(torch.repeat_interleave(torch.arange(2), 600)[None]) == hf.BLOCK_SIZE
    assert hf.packed_block_size(torch.zeros(1, 5, dtype=torch.long)) == hf.MIN_PACKED_BLOCK_SIZE
    made = []
    real = hf.create_block_mask
    monkeypatch.setattr(hf, "create_block_mask", lambda *a, **kw: made.append(kw["block_size"]) or real(*a, **kw))
    model = _model("bert")
    on_the_interface(model)
    model.set_attn_implementation("attnkit")
    collate = transformers.DataCollatorWithFlattening()
    batch = collate([{"input_ids": list(range(1, 1 + n))} for n in (40, 44, 38)])
    with torch.no_grad():
        model(input_ids=batch["input_ids"], position_ids=batch["position_ids"])
    assert made == [hf.BLOCK_SIZE, 16]  # the builder's mask, then the packed row's (median 40: blocks of 16)


def _deberta_v2():  # its attention layers do not call transformers' attention interface
    return transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))


UNSUPPORTED = (r"DebertaV2ForMaskedLM \(model family 'deberta_v2'\) cannot use attn_implementation='attnkit': "
               r".* attention interface.*check_model")


def test_a_model_without_the_attention_interface_is_refused_by_name_by_check_model():
    model = _deberta_v2()
    with pytest.raises(hf.HFBackendError, match=UNSUPPORTED):
        hf.check_model(model)  # transformers itself only warns on set_attn_implementation and keeps eager
    with pytest.raises(hf.HFBackendError, match=UNSUPPORTED.replace("ForMaskedLM", "Model")):
        hf.check_model(transformers.DebertaV2Model)  # a class too
    model.set_attn_implementation("sdpa")  # other backends are left to transformers


def test_a_model_without_the_attention_interface_loaded_on_the_backend_is_refused_as_it_is_built(tmp_path):
    _deberta_v2().save_pretrained(tmp_path)
    for loader in (transformers.DebertaV2ForMaskedLM, transformers.AutoModelForMaskedLM):
        with pytest.raises(hf.HFBackendError, match=UNSUPPORTED.replace("ForMaskedLM", "Model")):
            loader.from_pretrained(tmp_path, attn_implementation="attnkit")  # transformers would load it silently
    assert loader.from_pretrained(tmp_path, attn_implementation="eager").config._attn_implementation == "eager"


def _bloom():
    return transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=V, hidden_size=32, n_layer=1, n_head=4))


def _gpt_neo():
    return transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        max_position_embeddings=64))


def _falcon():
    return transformers.FalconForCausalLM(transformers.FalconConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4))


BYPASS = {"bloom": _bloom, "gpt_neo": _gpt_neo, "falcon": _falcon, "deberta_v2": _deberta_v2}
"""Families whose layers keep their own attention (Falcon up to 5.24)."""
TOO_EARLY = {"bert": _bert, "distilbert": _distilbert, "modernbert": _modernbert, "t5": _t5}


@pytest.mark.parametrize("family", [*BYPASS, *TOO_EARLY])
def test_a_model_loaded_on_the_backend_that_cannot_run_on_it_is_refused_by_name(family, tmp_path, monkeypatch):
    """Built with attn_implementation="attnkit" and no check_model: a family whose layers bypass the interface
    (BLOOM: a TypeError on the BlockMask at the first forward; GPT-Neo, Falcon: KeyError 'attnkit' from inside
    transformers) or that runs from a later release (BERT, DistilBERT, ModernBERT in 4.57: KeyError; T5 in 5.12:
    'BlockMask' object is not subscriptable) is refused as it is built, before any forward, naming the family
    and check_model."""
    build = {**BYPASS, **TOO_EARLY}[family]
    model = build()
    model.save_pretrained(tmp_path)
    if family in BYPASS and type(model)._can_set_attn_implementation():  # Falcon from 5.25: its layers call it
        loaded = type(model).from_pretrained(tmp_path, attn_implementation="attnkit")
        assert loaded.config._attn_implementation == hf.NAME
        return
    if family in TOO_EARLY:
        monkeypatch.setattr(hf, "_version", lambda: (4, 57))  # before each of them runs on the backend
        why = r" in transformers 4\.57: .* from transformers \d+\.\d+ on"
    else:
        why = r": its attention layers do not call transformers' attention interface"
    want = rf"\w+ \(model family '{family}'\) cannot use attn_implementation='attnkit'{why}.*check_model"
    with pytest.raises(hf.HFBackendError, match=want):
        type(model).from_pretrained(tmp_path, attn_implementation="attnkit")
    with pytest.raises(hf.HFBackendError, match=want):
        type(model)._from_config(model.config, attn_implementation="attnkit")
    assert type(model).from_pretrained(tmp_path, attn_implementation="eager") is not None


def test_registering_patches_no_transformers_method():
    """``import attnkit.integrations.transformers`` registers with the interfaces and replaces nothing: the model
    methods are transformers' own function objects, the very ones a fresh interpreter had before the import."""
    import subprocess
    import sys

    names = ("set_attn_implementation", "_check_and_adjust_attn_implementation", "_can_set_attn_implementation",
             "from_pretrained", "_from_config", "__init__", "forward", "__call__")
    code = f"""
import transformers
from transformers import PreTrainedModel
names = {names!r}
before = {{n: PreTrainedModel.__dict__.get(n) for n in names}}
import attnkit.integrations.transformers as hf
hf.register(); hf.register()
after = {{n: PreTrainedModel.__dict__.get(n) for n in names}}
changed = [n for n in names if after[n] is not before[n]]
assert not changed, changed
for n in ("set_attn_implementation", "_check_and_adjust_attn_implementation"):
    fn = PreTrainedModel.__dict__[n]
    assert fn.__module__ == "transformers.modeling_utils" and fn.__qualname__ == "PreTrainedModel." + n, fn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
assert AttentionInterface._global_mapping["attnkit"] is hf.attnkit_attention_forward
assert "attnkit" in AttentionMaskInterface._global_mapping
print("unpatched")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "unpatched" in out.stdout, out.stderr[-2000:]
    for n in ("set_attn_implementation", "_check_and_adjust_attn_implementation"):  # and in this process
        fn = transformers.PreTrainedModel.__dict__[n]
        assert fn.__module__ == "transformers.modeling_utils" and fn.__qualname__ == f"PreTrainedModel.{n}"
        assert not hasattr(fn, "__wrapped__")


@pytest.mark.parametrize("name", sorted(hf.POSITIONS_UNSEEN))
def test_a_model_whose_layers_never_see_positions_is_refused_at_forward_without_check_model(name):
    """DistilBERT, ModernBERT on the backend without ``check_model``: their layers cannot tell packed rows apart,
    so the first attention call is refused by name (naming the family and check_model), packed input or not; once
    ``check_model`` ran, the packed row equals each example alone."""
    if not uses_the_interface(_model(name)):
        pytest.skip(f"{name} is refused by name by check_model in transformers {transformers.__version__}")
    model = FAMILIES[name]().eval()  # a fresh model: nothing watched
    model.set_attn_implementation("attnkit")
    ids = torch.randint(1, V, (1, 14))
    positions = torch.tensor([list(range(5)) + list(range(9))])
    want = rf"\(model family '{name}'\) never receives the position ids.* call .*check_model\(model\) once"
    for inputs in ({"input_ids": ids, "position_ids": positions}, {"input_ids": ids}):
        with torch.no_grad(), pytest.raises(hf.HFBackendError, match=want):
            model(**inputs)
    assert hf.check_model(model) is model
    assert hf.check_model(model) is model  # idempotent: one pair of hooks per model
    assert len(model._forward_pre_hooks) == 1
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=positions).logits
        alone = model(input_ids=ids[:, 5:]).logits
    assert torch.allclose(packed[:, 5:], alone, atol=1e-5)
    assert not hf._watching()  # the watch ends with the forward


def test_the_layer_check_refuses_a_family_before_its_release_and_an_unwatched_call_only(monkeypatch):
    """The check at the first attention call (``hf._check_layer``): a family too early for the release gets the
    error ``check_model`` gives; a family whose layers see the position ids runs unwatched."""
    bert, distil = _model("bert"), _model("distilbert")
    bert_layer = bert.bert.encoder.layer[0].attention.self
    distil_layer = distil.distilbert.transformer.layer[0].attention
    monkeypatch.setattr(hf, "_version", lambda: (4, 57))
    with pytest.raises(hf.HFBackendError, match=r"\(model family 'bert'\) cannot use attn_implementation='attnkit' "
                                                 r"in transformers 4\.57: .* from transformers 5\.0 on"):
        hf._check_layer(bert_layer)
    monkeypatch.setattr(hf, "_version", lambda: (5, 0))
    hf._check_layer(bert_layer)
    with pytest.raises(hf.HFBackendError, match="model family 'distilbert'"):
        hf._check_layer(distil_layer)
    token = hf._WATCHED.set(True)
    try:
        hf._check_layer(distil_layer)
    finally:
        hf._WATCHED.reset(token)


def test_a_family_before_its_release_is_refused_at_its_first_attention_call_without_check_model():
    """In a release where BART's (4.5x) or SigLIP2's (before 5.2) layers call the attention interface with their
    own float masks, a model switched to the backend without check_model is refused at the first call, naming
    the release it runs from (not only the mask)."""
    got = hf._version()
    if got >= hf.FAMILY_SINCE["bart"]:
        pytest.skip(f"BART runs on the backend in transformers {transformers.__version__}: nothing to refuse")
    bart = _bart().eval()
    bart.set_attn_implementation("attnkit")  # transformers accepts it: BART's layers call the interface
    want = (rf"Bart\w*Attention \(model family 'bart'\) cannot use attn_implementation='attnkit' in transformers "
            rf"{got[0]}\.{got[1]}: .* from transformers 5\.0 on")
    with torch.no_grad(), pytest.raises(hf.HFBackendError, match=want):
        bart(input_ids=torch.randint(1, V, (1, 6)), decoder_input_ids=torch.randint(1, V, (1, 4)))


def test_check_model_passes_the_families_that_use_the_interface():
    for name, build in (*FAMILIES.items(), ("t5", _t5), ("bart", _bart)):  # T5, BART: _supports_attention_backend
        if name == "gpt_oss" and not hasattr(transformers, "GptOssForCausalLM"):  # False, though they use it
            continue
        model = build()
        if uses_the_interface(model):
            hf.check_model(model)
    with pytest.raises(hf.HFBackendError, match=r"DebertaV2Model \(model family 'deberta_v2'\) cannot"):
        hf.check_model(transformers.DebertaV2Model)


def _exhaustive(fn, b, t, q_offset=0):
    idx = torch.arange(t)
    return fn(torch.arange(b).view(-1, 1, 1, 1), torch.zeros(1, 1, 1, 1, dtype=torch.long),
              (idx + q_offset).view(1, 1, -1, 1), idx.view(1, 1, 1, -1)).expand(b, 1, t, t)


def test_a_recognised_mask_function_that_behaves_otherwise_is_evaluated_everywhere(monkeypatch):
    """A release whose function keeps a known code but computes something else: the probe drops the rule."""
    monkeypatch.setattr(hf, "BLOCK_SIZE", 8)
    real = hf._codes()
    everything = bidirectional()
    monkeypatch.setattr(hf, "_codes", lambda: {**real, everything.__code__: "causal"})
    got = hf.attnkit_mask(2, 40, 40, mask_function=everything)
    assert torch.equal(got.to_dense(), _exhaustive(everything, 2, 40))
    assert got.counts["empty"] == 0  # nothing skipped: every entry is allowed


def test_a_mask_function_whose_closure_cannot_be_read_is_evaluated_everywhere(monkeypatch):
    """A refactor that renames a closure's variables: no crash, no rule, the function's own mask."""
    from transformers import masking_utils as mu

    monkeypatch.setattr(hf, "BLOCK_SIZE", 8)
    padding = torch.ones(2, 40, dtype=torch.bool)
    padding[1, 30:] = False
    fn = mu.padding_mask_function(padding)
    real = hf._codes()
    monkeypatch.setattr(hf, "_codes", lambda: {**real, fn.__code__: "same-id"})  # reads a name it lacks
    assert hf._probed(fn) is None
    got = hf.attnkit_mask(2, 40, 40, mask_function=mu.and_masks(bidirectional(), fn))
    assert torch.equal(got.to_dense(), _exhaustive(fn, 2, 40))


def test_a_family_is_refused_by_name_before_the_release_it_runs_from(monkeypatch):
    """BERT's layers keep their own attention before transformers 5.0, BART hands them its own float masks (both
    refused by name there by check_model, naming 5.0, and BART at its first attention call without it); from that
    release on they pass."""
    monkeypatch.setattr(hf, "_version", lambda: (4, 57))
    for build in (_bert, _bart):
        model = build()
        name = type(model).__name__
        family = hf._family(type(model))
        want = (rf"{name} \(model family '{family}'\) cannot use attn_implementation='attnkit' in transformers "
                r"4\.57: .* from transformers 5\.0 on.*check_model")
        with pytest.raises(hf.HFBackendError, match=want):
            hf.check_model(model)
        with pytest.raises(hf.HFBackendError, match=want):
            hf.check_model(type(model))
    bart = _bart().eval()
    bart.set_attn_implementation("attnkit")  # the release's own layers: they call the interface (5.x here)
    with torch.no_grad(), pytest.raises(hf.HFBackendError, match=r"Bart\w*Attention \(model family 'bart'\) cannot use "
                                        r"attn_implementation='attnkit' in transformers 4\.57: .* 5\.0 on"):
        bart(input_ids=torch.randint(1, V, (1, 6)), decoder_input_ids=torch.randint(1, V, (1, 4)))
    assert hf._family(transformers.Siglip2VisionModel) == "siglip2" and hf.FAMILY_SINCE["siglip2"] == (5, 2)
    monkeypatch.setattr(hf, "_version", lambda: (5, 0))
    hf.check_model(_bart())
