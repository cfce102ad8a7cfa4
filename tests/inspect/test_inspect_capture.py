"""attnkit.inspect.capture on PyTorch's own modules and attnkit's layers; bad input.

The promise: inside ``capture`` the model's output is bit-for-bit what it is
without it (the fused fast path still runs), and each recorded call equals the
weights the module gives when asked (``need_weights=True,
average_attn_weights=False``; attnkit's ``return_weights=True``).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from attnkit.blocks import TransformerEncoder, TransformerLayerConfig
from attnkit.inspect import capture, find_attention
from attnkit.layers import (
    AdditiveAttention,
    AttentionPooling,
    BertAttention,
    LinearAttention,
    MultiHeadAttention,
    RelativePositionAttention,
    SelfAttention2d,
)

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")


def _padding(b: int = 3, t: int = 7) -> torch.Tensor:
    kpm = torch.zeros(b, t, dtype=torch.bool)  # True = padding (PyTorch's rule)
    kpm[1, 5:] = True
    kpm[2, 3:] = True
    return kpm


def _reference(enc: nn.TransformerEncoder, x: torch.Tensor, kpm: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's ``need_weights=True, average_attn_weights=False`` on that layer's input."""
    out, h = [], x
    for layer in enc.layers:
        a = layer.norm1(h) if layer.norm_first else h
        _, w = layer.self_attn(a, a, a, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
        out.append(w)
        h = layer(h, src_key_padding_mask=kpm)
    return out


@pytest.mark.parametrize("batch_first, norm_first", [(True, False), (False, False), (True, True), (False, True)])
def test_transformer_encoder_capture_equals_need_weights(batch_first: bool, norm_first: bool) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=batch_first, norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, 3, enable_nested_tensor=batch_first and not norm_first).eval()
    kpm = _padding()
    x = torch.randn(3, 7, 32) if batch_first else torch.randn(7, 3, 32)
    with torch.no_grad():
        plain = enc(x, src_key_padding_mask=kpm)
        with capture(enc) as cap:
            seen = enc(x, src_key_padding_mask=kpm)
        reference = _reference(enc, x, kpm)
    assert torch.equal(plain, seen)  # bit for bit
    assert list(cap.weights) == [f"layers.{i}.self_attn" for i in range(3)]
    real = (~kpm)[:, None, :, None]  # rows of real queries
    for (name, w), ref in zip(cap.weights.items(), reference, strict=True):
        assert w.shape == (3, 4, 7, 7), name
        assert (w - ref).abs().masked_select(real.expand_as(w)).max().item() <= 1e-6
        assert w[kpm[:, None, None, :].expand_as(w)].abs().max() == 0  # padded keys get nothing
    assert "forward" not in enc.layers[0].__dict__  # the capture left nothing behind
    if batch_first and not norm_first:
        # the nested-tensor fast path ran under the capture: padded output rows are exactly 0
        assert seen[kpm].abs().max() == 0


def test_a_torch_hook_would_change_the_path_but_capture_does_not() -> None:
    """Negative control: an ordinary hook on the layer turns its fast path off, which moves bits."""
    torch.manual_seed(1)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                                           norm_first=True), 2, enable_nested_tensor=False).eval()
    x, kpm = torch.randn(3, 7, 32), _padding()
    with torch.no_grad():
        plain = enc(x, src_key_padding_mask=kpm)
        with capture(enc):
            assert torch.equal(enc(x, src_key_padding_mask=kpm), plain)
        handle = enc.layers[0].register_forward_pre_hook(lambda m, a: None)
        hooked = enc(x, src_key_padding_mask=kpm)
        handle.remove()
    assert not torch.equal(hooked, plain)


def test_decoder_and_bare_mha_with_masks() -> None:
    torch.manual_seed(2)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2).eval()
    tgt, mem = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    causal = nn.Transformer.generate_square_subsequent_mask(5)  # float, -inf above the diagonal
    mem_pad = torch.zeros(2, 6, dtype=torch.bool)
    mem_pad[0, 4:] = True
    with torch.no_grad():
        plain = dec(tgt, mem, tgt_mask=causal, memory_key_padding_mask=mem_pad)
        with capture(dec) as cap:
            assert torch.equal(dec(tgt, mem, tgt_mask=causal, memory_key_padding_mask=mem_pad), plain)
        layer = dec.layers[0]
        _, self_w = layer.self_attn(tgt, tgt, tgt, attn_mask=causal, need_weights=True, average_attn_weights=False)
        x = layer.norm1(tgt + layer.self_attn(tgt, tgt, tgt, attn_mask=causal, need_weights=False)[0])
        _, cross_w = layer.multihead_attn(x, mem, mem, key_padding_mask=mem_pad, need_weights=True,
                                          average_attn_weights=False)
    assert list(cap.weights)[:2] == ["layers.0.self_attn", "layers.0.multihead_attn"]
    assert (cap.weights["layers.0.self_attn"] - self_w).abs().max() <= 1e-6
    assert (cap.weights["layers.0.multihead_attn"] - cross_w).abs().max() <= 1e-6
    assert cap.weights["layers.0.self_attn"].triu(1).abs().max() == 0  # causal


def test_mha_with_bias_kv_and_bool_mask() -> None:
    torch.manual_seed(3)
    mha = nn.MultiheadAttention(12, 3, add_bias_kv=True, add_zero_attn=True, kdim=10, vdim=8)
    q, k, v = torch.randn(4, 2, 12), torch.randn(6, 2, 10), torch.randn(6, 2, 8)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 0] = True  # True = ignore, PyTorch's rule
    with capture(mha) as cap:
        out, _ = mha(q, k, v, attn_mask=mask, need_weights=False)
    _, ref = mha(q, k, v, attn_mask=mask, need_weights=True, average_attn_weights=False)
    assert torch.equal(out, mha(q, k, v, attn_mask=mask, need_weights=False)[0])
    assert cap.weights["MultiheadAttention"].shape == (2, 3, 4, 8)  # 6 keys + bias_k + the zero key
    assert (cap.weights["MultiheadAttention"] - ref).abs().max() <= 1e-6


def test_attnkit_layers_are_captured_without_changing_them() -> None:
    torch.manual_seed(4)
    enc = TransformerEncoder(TransformerLayerConfig(d_model=16, num_heads=4, d_ff=32), 2).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    with torch.no_grad():
        plain = enc(x, mask=mask)
        with capture(enc) as cap:
            seen = enc(x, mask=mask)
        _, ref = enc(x, mask=mask, return_weights=True)
    assert torch.equal(plain, seen)
    assert len(cap.weights) == 2
    for w, r in zip(cap.weights.values(), ref, strict=True):
        assert torch.allclose(w, r, atol=1e-6)
    pool, add, img = AttentionPooling(16), AdditiveAttention(16, 16, 8), SelfAttention2d(8, reduction=2, num_heads=2)
    model = nn.ModuleDict({"pool": pool, "add": add, "img": img})
    with capture(model) as cap2:
        pool(x)
        add(x[:, 0], x)
        img(torch.randn(1, 8, 3, 3))
    assert [tuple(w.shape) for w in cap2.weights.values()] == [(2, 1, 1, 6), (2, 1, 1, 6), (1, 2, 9, 9)]
    others = nn.ModuleDict({"rel": RelativePositionAttention(16, 4, 3), "lin": LinearAttention(16, 4),
                            "bert": BertAttention(16, 4)}).eval()
    with torch.no_grad(), capture(others) as cap3:
        outs = [others["rel"](x), others["lin"](x), others["bert"](x, mask=mask)]
    assert list(cap3.weights) == ["rel", "lin", "bert.self"]
    with torch.no_grad():
        asked = [others["rel"](x, return_weights=True), others["lin"](x, return_weights=True),
                 others["bert"](x, mask=mask, return_weights=True)]
    for out, (o, w), got in zip(outs, asked, cap3.weights.values(), strict=True):
        assert torch.equal(out, o)
        assert got.shape[-2:] == (6, 6) and torch.allclose(got, w.reshape(got.shape), atol=1e-6)


def test_multi_head_attention_in_training_keeps_the_random_stream() -> None:
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, dropout=0.5).train()
    x = torch.randn(2, 5, 16)
    torch.manual_seed(9)
    plain = mha(x)
    torch.manual_seed(9)
    with capture(mha) as cap:
        seen = mha(x)
    assert torch.equal(plain, seen)
    assert torch.allclose(cap.weights["MultiHeadAttention"].sum(-1), torch.ones(2, 4, 5))  # before dropout


class MyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="torch.nn.Module"):
        with capture("not a model"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ValueError, match="has no attention module"):
        with capture(nn.Sequential(nn.Linear(4, 4), nn.ReLU())):
            pass
    with pytest.raises(ValueError, match=r"cannot be captured: \['mine \(MyAttention\)'\]"):
        with capture(nn.ModuleDict({"mine": MyAttention()})):
            pass
    model = nn.ModuleDict({"mine": MyAttention(), "mha": nn.MultiheadAttention(4, 2, batch_first=True)})
    assert find_attention(model)[1] == ["mine (MyAttention)"]
    with pytest.warns(UserWarning, match=r"cannot be captured.*mine \(MyAttention\)"):
        with capture(model) as cap:
            x = torch.randn(1, 3, 4)
            model["mha"](x, x, x)
    assert cap.unsupported == ["mine (MyAttention)"] and list(cap.weights) == ["mha"]
    with pytest.raises(ValueError, match=r"'mine' \(MyAttention\) cannot be captured"):
        with capture(model, modules=["mine"]):
            pass
    with pytest.raises(ValueError, match="has no module 'nope'"):
        with capture(model, modules=["nope"]):
            pass
    with pytest.raises(ValueError, match=r"layers: expected indices into the 1 attention modules"):
        with capture(model, layers=[3]):
            pass
    with pytest.raises(ValueError, match="Tq = 3 queries"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cap.figure(tokens=["a", "b"])


def test_modules_and_layers_select() -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 4).eval()
    x = torch.randn(1, 5, 8)
    with torch.no_grad(), capture(enc, layers=[0, -1]) as cap:
        enc(x)
    assert list(cap.weights) == ["layers.0.self_attn", "layers.3.self_attn"]
    with torch.no_grad(), capture(enc, modules=["layers.2"]) as cap:
        enc(x)
        enc(x)
    assert list(cap.weights) == ["layers.2.self_attn", "layers.2.self_attn#1"]
