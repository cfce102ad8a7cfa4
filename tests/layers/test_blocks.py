"""Tests for attnkit.blocks: feed-forward, encoder/decoder layers and stacks.

Parity with PyTorch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
runs in eval mode with autograd on (the inputs require grad). That is what makes
the comparison meaningful: PyTorch's encoder layer takes a fused "fast path"
(``torch._transformer_encoder_layer_fwd``) in eval mode *only* when no gradient
is needed, so with gradients on both sides compute the documented formula. The
fast path is compared separately, on outputs, in :func:`test_encoder_matches_torch_fast_path`.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from attnkit import masks
from attnkit.blocks import (
    ACTIVATIONS,
    DecoderWeights,
    FeedForward,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    TransformerLayerConfig,
)

D, H, FF, B, T, S = 16, 4, 24, 3, 6, 5
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


# --------------------------------------------------------------------------- helpers


def _padding(lengths: list[int], total: int) -> Tensor:
    """PyTorch key-padding mask: True where the key is padding (to be ignored)."""
    return torch.arange(total) >= torch.tensor(lengths)[:, None]  # (B, T)


def _torch_causal(t: int) -> Tensor:
    """PyTorch boolean attn_mask for causal attention: True above the diagonal (ignore)."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def _grad_pairs(ours: nn.Module, theirs: nn.Module) -> list[tuple[str, Tensor | None, Tensor | None]]:
    """(name, our gradient, PyTorch's gradient) for every parameter of a layer."""
    pairs: list[tuple[str, Tensor | None, Tensor | None]] = []
    for our_attn, their_attn in (("self_attn", "self_attn"), ("cross_attn", "multihead_attn")):
        if not hasattr(ours, our_attn):
            continue
        a, b = ours.get_submodule(our_attn), theirs.get_submodule(their_attn)
        for kind in ("weight", "bias"):
            parts = [getattr(a, f"{p}_proj").get_parameter(kind).grad for p in "qkv"]
            joined = None if any(g is None for g in parts) else torch.cat(parts)  # type: ignore[arg-type]
            pairs.append((f"{our_attn}.in_proj_{kind}", joined, b.get_parameter(f"in_proj_{kind}").grad))
            pairs.append((f"{our_attn}.out_proj.{kind}", a.out_proj.get_parameter(kind).grad,
                          b.out_proj.get_parameter(kind).grad))
    for our_name, their_name in [("ff.linear1", "linear1"), ("ff.linear2", "linear2")] + [
        (f"norm{i}", f"norm{i}") for i in (1, 2, 3) if hasattr(ours, f"norm{i}")
    ]:
        for kind in ("weight", "bias"):
            pairs.append((f"{our_name}.{kind}", ours.get_parameter(f"{our_name}.{kind}").grad,
                          theirs.get_parameter(f"{their_name}.{kind}").grad))
    return pairs


def _assert_close(name: str, got: Tensor | None, want: Tensor | None, tol: float) -> None:
    assert got is not None and want is not None, f"{name}: missing gradient"
    err = (got - want).abs().max().item()
    assert err <= tol, f"{name}: max abs difference {err:.3g} > {tol:g}"


MASK_CASES = ["padding", "causal", "padding+causal"]


# --------------------------------------------------------------------------- parity with PyTorch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask_case", MASK_CASES)
def test_encoder_layer_matches_torch(dtype: torch.dtype, norm_first: bool, mask_case: str) -> None:
    activation = "gelu" if norm_first else "relu"
    batch_first = dtype == torch.float32  # cover both source layouts
    theirs = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.2, activation=activation, norm_first=norm_first, batch_first=batch_first,
        dtype=dtype,
    ).eval()
    ours = TransformerEncoderLayer.from_torch(theirs)
    assert not ours.training and ours.ff.activation_name == activation

    x = torch.randn(B, T, D, dtype=dtype)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    pad = _padding([T, 4, 2], T) if "padding" in mask_case else None
    causal = "causal" in mask_case
    src = x_theirs if batch_first else x_theirs.transpose(0, 1)
    y_theirs = theirs(src, src_mask=_torch_causal(T) if causal else None, src_key_padding_mask=pad,
                      is_causal=causal)
    y_theirs = y_theirs if batch_first else y_theirs.transpose(0, 1)
    mask = None if pad is None else masks.from_key_padding_mask(pad)
    y_ours = ours(x_ours, mask=mask, causal=causal)

    tol = TOL[dtype]
    _assert_close("output", y_ours, y_theirs, tol)
    upstream = torch.randn_like(y_ours)
    (y_ours * upstream).sum().backward()
    (y_theirs * upstream).sum().backward()
    _assert_close("input gradient", x_ours.grad, x_theirs.grad, tol)
    for name, got, want in _grad_pairs(ours, theirs):
        _assert_close(name, got, want, tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask_case", MASK_CASES)
def test_decoder_layer_matches_torch(dtype: torch.dtype, norm_first: bool, mask_case: str) -> None:
    batch_first = dtype == torch.float64
    theirs = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.2, activation="gelu", norm_first=norm_first, batch_first=batch_first, dtype=dtype,
    ).eval()
    ours = TransformerDecoderLayer.from_torch(theirs)

    x = torch.randn(B, T, D, dtype=dtype)
    memory = torch.randn(B, S, D, dtype=dtype)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    m_ours, m_theirs = memory.clone().requires_grad_(), memory.clone().requires_grad_()
    padded = "padding" in mask_case
    causal = "causal" in mask_case
    tgt_pad = _padding([T, 5, 3], T) if padded else None
    mem_pad = _padding([S, 2, 4], S) if padded else None

    def to_src(t: Tensor) -> Tensor:
        return t if batch_first else t.transpose(0, 1)

    y_theirs = to_src(theirs(
        to_src(x_theirs), to_src(m_theirs), tgt_mask=_torch_causal(T) if causal else None,
        tgt_is_causal=causal, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=mem_pad,
    ))
    y_ours = ours(
        x_ours, m_ours, causal=causal,
        self_mask=None if tgt_pad is None else masks.from_key_padding_mask(tgt_pad),
        memory_mask=None if mem_pad is None else masks.from_key_padding_mask(mem_pad),
    )
    tol = TOL[dtype]
    _assert_close("output", y_ours, y_theirs, tol)
    upstream = torch.randn_like(y_ours)
    (y_ours * upstream).sum().backward()
    (y_theirs * upstream).sum().backward()
    _assert_close("target gradient", x_ours.grad, x_theirs.grad, tol)
    _assert_close("memory gradient", m_ours.grad, m_theirs.grad, tol)
    for name, got, want in _grad_pairs(ours, theirs):
        _assert_close(name, got, want, tol)


def test_encoder_matches_torch_fast_path() -> None:
    """Under no_grad in eval mode PyTorch runs its fused encoder kernel; outputs still agree."""
    theirs = nn.TransformerEncoderLayer(D, H, FF, batch_first=True).eval()
    ours = TransformerEncoderLayer.from_torch(theirs)
    x = torch.randn(B, T, D)
    pad = _padding([T, 4, 2], T)
    with torch.no_grad():
        y_theirs = theirs(x, src_key_padding_mask=pad)
        y_ours = ours(x, mask=masks.from_key_padding_mask(pad))
    _assert_close("output", y_ours, y_theirs, 1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch(norm_first: bool) -> None:
    enc_layer = nn.TransformerEncoderLayer(D, H, FF, norm_first=norm_first, batch_first=True)
    dec_layer = nn.TransformerDecoderLayer(D, H, FF, norm_first=norm_first, batch_first=True)
    torch_enc = nn.TransformerEncoder(enc_layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False).eval()
    torch_dec = nn.TransformerDecoder(dec_layer, 2, norm=nn.LayerNorm(D)).eval()
    with torch.no_grad():  # make the final norms non-trivial
        torch_enc.norm.weight.uniform_(0.5, 1.5)  # type: ignore[union-attr]
        torch_dec.norm.weight.uniform_(0.5, 1.5)  # type: ignore[union-attr]
    enc, dec = TransformerEncoder.from_torch(torch_enc), TransformerDecoder.from_torch(torch_dec)
    assert enc.norm is not None and dec.norm is not None
    src, tgt = torch.randn(B, S, D, requires_grad=True), torch.randn(B, T, D, requires_grad=True)
    pad = _padding([S, 3, 1], S)
    mask = masks.from_key_padding_mask(pad)
    mem_theirs = torch_enc(src, src_key_padding_mask=pad)
    mem_ours = enc(src, mask=mask)
    _assert_close("encoder output", mem_ours, mem_theirs, 1e-5)
    out_theirs = torch_dec(tgt, mem_theirs, tgt_mask=_torch_causal(T), tgt_is_causal=True,
                           memory_key_padding_mask=pad)
    out_ours = dec(tgt, mem_ours, memory_mask=mask)
    _assert_close("decoder output", out_ours, out_theirs, 1e-5)


def test_from_torch_rejects_other_modules() -> None:
    with pytest.raises(TypeError, match="nn.TransformerEncoderLayer"):
        TransformerEncoderLayer.from_torch(nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nn.TransformerDecoderLayer"):
        TransformerDecoderLayer.from_torch(nn.TransformerEncoderLayer(D, H))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot convert activation"):
        TransformerEncoderLayer.from_torch(nn.TransformerEncoderLayer(D, H, FF, activation=torch.tanh))


def test_from_torch_keeps_bias_free_layers_and_module_activations() -> None:
    theirs = nn.TransformerEncoderLayer(
        D, H, FF, activation=nn.GELU(approximate="tanh"), bias=False, batch_first=True,
    ).eval()
    ours = TransformerEncoderLayer.from_torch(theirs)
    assert ours.norm1.bias is None and ours.ff.linear1.bias is None and ours.self_attn.q_proj.bias is None
    training = TransformerDecoderLayer.from_torch(nn.TransformerDecoderLayer(D, H, FF, dropout=0.25))
    assert training.training and training.dropout3.p == 0.25 and training.cross_attn.dropout == 0.25
    assert training.ff.dropout.p == 0.25 and training.ff.activation_name == "relu"
    x = torch.randn(B, T, D, requires_grad=True)
    _assert_close("output", ours(x), theirs(x), 1e-5)


# --------------------------------------------------------------------------- feed-forward


def test_feed_forward_plain_and_gated_equations() -> None:
    x = torch.randn(B, T, D)
    relu = FeedForward(D, FF)
    assert relu.linear_gate is None
    torch.testing.assert_close(relu(x), relu.linear2(F.relu(relu.linear1(x))))
    swiglu = FeedForward(D, FF, activation="swiglu")
    assert swiglu.linear_gate is not None
    want = swiglu.linear2(F.silu(swiglu.linear_gate(x)) * swiglu.linear1(x))
    torch.testing.assert_close(swiglu(x), want)
    n_plain = sum(p.numel() for p in relu.parameters())
    n_gated = sum(p.numel() for p in swiglu.parameters())
    assert n_gated - n_plain == D * FF + FF  # the gate's weight and bias
    geglu = FeedForward(D, FF, activation="geglu", bias=False)
    assert geglu.linear_gate is not None and geglu.linear1.bias is None
    torch.testing.assert_close(geglu(x), geglu.linear2(F.gelu(geglu.linear_gate(x)) * geglu.linear1(x)))


def test_feed_forward_accepts_module_class() -> None:
    ff = FeedForward(D, FF, activation=nn.Tanh)
    x = torch.randn(2, D)
    assert ff.activation_name is None
    torch.testing.assert_close(ff(x), ff.linear2(torch.tanh(ff.linear1(x))))


def test_unknown_activation_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown activation 'swish'") as info:
        FeedForward(D, FF, activation="swish")
    for name in ("relu", "gelu", "swiglu"):
        assert name in str(info.value)
    with pytest.raises(ValueError, match="swiglu"):
        TransformerEncoderLayer(D, H, FF, activation="Relu")
    with pytest.raises(ValueError, match="valid names"):
        TransformerLayerConfig(D, H, FF, activation="tanh")
    with pytest.raises(TypeError, match="activation must be"):
        FeedForward(D, FF, activation=torch.tanh)  # type: ignore[arg-type]
    assert {"relu", "gelu", "swiglu"} <= set(ACTIVATIONS)


def test_the_layer_config_names_exactly_the_activations_torch_builds() -> None:
    from attnkit import layer_config

    assert sorted(ACTIVATIONS) == sorted(layer_config.ACTIVATION_NAMES)
    assert TransformerLayerConfig is layer_config.TransformerLayerConfig  # one class for both backends


def test_feed_forward_checks_width() -> None:
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., 16\), got shape \(2, 3, 8\)"):
        FeedForward(D, FF)(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="d_ff must be a positive int"):
        FeedForward(D, 0)


# --------------------------------------------------------------------------- behaviour


def _all_blocks(dropout: float = 0.0) -> tuple[TransformerEncoder, TransformerDecoder]:
    config = TransformerLayerConfig(D, H, FF, dropout=dropout, activation="swiglu", norm_first=True, kv_heads=2)
    return TransformerEncoder(config, 2), TransformerDecoder(config, 2)


def test_every_parameter_gets_a_gradient() -> None:
    encoder, decoder = _all_blocks()
    assert encoder.norm is not None and decoder.norm is not None  # pre-norm adds a final norm
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    mask = masks.from_lengths([S, 3, 2])
    memory = encoder(src, mask=mask)
    out = decoder(tgt, memory, memory_mask=mask)
    (out.square().mean() + memory.square().mean()).backward()
    for module in (encoder, decoder):
        for name, p in module.named_parameters():
            assert p.grad is not None, f"{name} got no gradient"
            assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"


def test_dropout_only_in_train_mode() -> None:
    encoder, decoder = _all_blocks(dropout=0.3)
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    encoder.train(), decoder.train()
    assert not torch.equal(encoder(src), encoder(src))
    memory = encoder(src)
    assert not torch.equal(decoder(tgt, memory), decoder(tgt, memory))
    encoder.eval(), decoder.eval()
    torch.testing.assert_close(encoder(src), encoder(src), rtol=0, atol=0)
    # In eval mode, dropout=0.3 gives exactly the output of the same weights with dropout=0.
    quiet_enc, quiet_dec = _all_blocks(dropout=0.0)
    quiet_enc.load_state_dict(encoder.state_dict())
    quiet_dec.load_state_dict(decoder.state_dict())
    quiet_enc.eval(), quiet_dec.eval()
    memory = encoder(src)
    torch.testing.assert_close(encoder(src), quiet_enc(src), rtol=0, atol=0)
    torch.testing.assert_close(decoder(tgt, memory), quiet_dec(tgt, memory), rtol=0, atol=0)


def test_encoder_returns_per_layer_weights_without_changing_output() -> None:
    encoder = TransformerEncoder(TransformerLayerConfig(D, H, FF), 3).eval()
    x = torch.randn(B, T, D)
    mask = masks.from_lengths([T, 4, 1])
    plain = encoder(x, mask=mask, causal=True)
    out, weights = encoder(x, mask=mask, causal=True, return_weights=True)
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    assert len(weights) == 3
    for w in weights:
        assert w.shape == (B, H, T, T)
        torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T))
        assert torch.all(w[1, :, :, 4:] == 0) and torch.all(w[2, :, :, 1:] == 0)  # padded keys
        assert torch.all(w.triu(diagonal=1) == 0)  # later positions


def test_decoder_returns_named_weights() -> None:
    decoder = TransformerDecoder(TransformerLayerConfig(D, H, FF, kv_heads=1), 2).eval()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    mem_mask = masks.from_lengths([S, 2, 3])
    out, weights = decoder(x, memory, memory_mask=mem_mask, return_weights=True)
    torch.testing.assert_close(out, decoder(x, memory, memory_mask=mem_mask), rtol=0, atol=0)
    assert len(weights) == 2 and all(isinstance(w, DecoderWeights) for w in weights)
    assert weights[0].self_attn.shape == (B, H, T, T)
    assert weights[0].cross_attn.shape == (B, H, T, S)
    assert torch.all(weights[1].self_attn.triu(diagonal=1) == 0)
    assert torch.all(weights[1].cross_attn[1, :, :, 2:] == 0)


def test_causal_output_ignores_later_positions() -> None:
    layer = TransformerEncoderLayer(D, H, FF, norm_first=True).eval()
    x = torch.randn(B, T, D)
    changed = x.clone()
    changed[:, 3:] = torch.randn(B, T - 3, D)
    a, b = layer(x, causal=True), layer(changed, causal=True)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_self_attention_is_permutation_equivariant() -> None:
    layer = TransformerEncoderLayer(D, H, FF, activation="gelu").eval()
    x = torch.randn(B, T, D)
    perm = torch.randperm(T)
    torch.testing.assert_close(layer(x)[:, perm], layer(x[:, perm]))


_PROPERTY_ENCODER = TransformerEncoder(TransformerLayerConfig(D, H, FF, activation="swiglu", kv_heads=2), 2).eval()


@settings(max_examples=10, deadline=None)
@given(lengths=st.lists(st.integers(1, T), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_padded_content_never_reaches_valid_positions(lengths: list[int], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), T, D, generator=generator)
    noisy = x.clone()
    for b, n in enumerate(lengths):
        noisy[b, n:] = 50 * torch.randn(T - n, D, generator=generator)
    mask = masks.from_lengths(lengths, T)
    with torch.no_grad():
        a, b_ = _PROPERTY_ENCODER(x, mask=mask), _PROPERTY_ENCODER(noisy, mask=mask)
    for row, n in enumerate(lengths):
        assert _max_diff_rows(a[row, :n], b_[row, :n]) <= 1e-5


def _max_diff_rows(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- construction


def test_stack_construction_from_config_factory_and_copy() -> None:
    config = TransformerLayerConfig(D, H, FF, activation="gelu", layer_norm_eps=1e-6)
    assert TransformerLayerConfig(**json.loads(json.dumps(config.to_dict()))) == config
    from_config = TransformerEncoder(config, 2)
    assert from_config.norm is None  # post-norm layers end normalised already
    assert from_config.layers[0].norm1.eps == 1e-6
    w0 = from_config.layers[0].self_attn.q_proj.weight
    w1 = from_config.layers[1].self_attn.q_proj.weight
    assert w0.data_ptr() != w1.data_ptr() and not torch.equal(w0, w1)  # independent initialisation

    template = TransformerDecoderLayer(D, H, FF, norm_first=True)
    copied = TransformerDecoder(template, 3, final_norm=False)
    assert len(copied.layers) == 3 and copied.norm is None
    torch.testing.assert_close(copied.layers[2].cross_attn.k_proj.weight, template.cross_attn.k_proj.weight)
    assert copied.layers[2].cross_attn.k_proj.weight.data_ptr() != template.cross_attn.k_proj.weight.data_ptr()

    factory = TransformerEncoder(lambda: TransformerEncoderLayer(D, H, FF, norm_first=True), 2)
    assert factory.norm is not None


def test_stack_construction_errors() -> None:
    layer = TransformerEncoderLayer(D, H, FF)
    with pytest.raises(ValueError, match="num_layers must be a positive int, got 0"):
        TransformerEncoder(layer, 0)
    with pytest.raises(TypeError, match="must be a TransformerEncoderLayer, got TransformerDecoderLayer"):
        TransformerEncoder(TransformerDecoderLayer(D, H, FF), 2)
    with pytest.raises(ValueError, match="same module twice"):
        TransformerEncoder(lambda: layer, 2)
    with pytest.raises(TypeError, match="layer must be a TransformerLayerConfig"):
        TransformerDecoder("big", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="final_norm must be a bool"):
        TransformerEncoder(layer, 2, final_norm="yes")  # type: ignore[arg-type]


def test_layer_argument_errors() -> None:
    with pytest.raises(ValueError, match="dropout must be a float in \\[0, 1\\), got 1.5"):
        TransformerEncoderLayer(D, H, FF, dropout=1.5)
    with pytest.raises(ValueError, match="layer_norm_eps must be a positive float"):
        TransformerDecoderLayer(D, H, FF, layer_norm_eps=0)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        TransformerEncoderLayer(D, 5, FF)
    with pytest.raises(TypeError, match="norm_first must be a bool"):
        TransformerEncoderLayer(D, H, FF, norm_first=1)  # type: ignore[arg-type]


def test_forward_argument_errors() -> None:
    enc = TransformerEncoderLayer(D, H, FF)
    dec = TransformerDecoderLayer(D, H, FF)
    with pytest.raises(ValueError, match=r"x must be \(B, T, 16\), got shape \(2, 5, 8\)"):
        enc(torch.randn(2, 5, 8))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        enc([[1.0]])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="causal must be a bool"):
        enc(torch.randn(2, 5, D), causal=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        enc(torch.randn(2, 5, D), mask=torch.zeros(2, 1, 1, 5))
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, H, Tq, Tk\)"):
        enc(torch.randn(2, 5, D), mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="memory is required"):
        dec(torch.randn(2, 5, D))
    with pytest.raises(ValueError, match=r"memory must be \(B, T, 16\)"):
        dec(torch.randn(2, 5, D), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="memory batch 3 differs from x batch 2"):
        dec(torch.randn(2, 5, D), torch.randn(3, 4, D))


@pytest.mark.parametrize("layer_cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_attention_and_activation_dropout_override_the_shared_rate(layer_cls: type) -> None:
    layer = layer_cls(16, 4, 32, dropout=0.3, attention_dropout=0.0, activation_dropout=0.2)
    assert layer.self_attn.dropout == 0.0 and layer.ff.dropout.p == 0.2 and layer.dropout1.p == 0.3
    same = layer_cls(16, 4, 32, dropout=0.3)
    assert same.self_attn.dropout == 0.3 and same.ff.dropout.p == 0.3
    with pytest.raises(ValueError, match="dropout"):
        layer_cls(16, 4, 32, attention_dropout=1.5)
    # with attention and activation dropout off, the only randomness is on the residual branches
    quiet = layer_cls(16, 4, 32, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).train()
    x = torch.randn(2, 5, 16)
    args = (x,) if layer_cls is TransformerEncoderLayer else (x, torch.randn(2, 3, 16))
    assert torch.equal(quiet(*args), quiet(*args))
