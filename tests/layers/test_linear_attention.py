"""Efficient (linear) attention against the same computation with explicit (T, T) weights."""

from __future__ import annotations

import pytest
import torch

from attnkit import masks
from attnkit.core.functional import split_heads
from attnkit.layers import linear as linear_module
from attnkit.layers.linear import LinearAttention, linear_attention, linear_attention_weights


def explicit_linear_attention(q, k, v, causal=False, key_mask=None):
    """out_i = Σ_d softmax_D(q_i)[d] Σ_j n_ijd v_j, with n_ijd a softmax over the allowed keys j.

    Non-causal: the allowed keys are the unmasked ones; causal: the unmasked keys j <= i,
    applied with an explicit (T, T) causal mask. Builds (B, H, Dh, Tq, Tk) tensors.
    """
    b, h, tq, dh = q.shape
    tk = k.shape[2]
    qf = torch.softmax(q, dim=-1)  # (B, H, Tq, Dh)
    allowed = torch.ones(b, 1, 1, tq, tk, dtype=torch.bool)
    if key_mask is not None:
        allowed = allowed & key_mask.view(b, 1, 1, 1, tk)
    if causal:
        allowed = allowed & torch.ones(tq, tk, dtype=torch.bool).tril()
    logits = k.transpose(-1, -2)[:, :, :, None, :].expand(b, h, dh, tq, tk)  # (B, H, Dh, Tq, Tk)
    logits = logits.masked_fill(~allowed, float("-inf"))
    row_ok = allowed.any(-1, keepdim=True)
    n = torch.softmax(logits.masked_fill(~row_ok, 0.0), dim=-1) * row_ok  # (B, H, Dh, Tq, Tk)
    weights = torch.einsum("bhid,bhdij->bhij", qf, n)  # (B, H, Tq, Tk)
    return weights @ v, weights


def _qkv(b=2, h=3, t=150, dh=8, dv=5, dtype=torch.float64):
    q = torch.randn(b, h, t, dh, dtype=dtype, requires_grad=True)
    k = (2 * torch.randn(b, h, t, dh, dtype=dtype)).requires_grad_(True)
    v = torch.randn(b, h, t, dv, dtype=dtype, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_explicit_weights(dtype, tol, causal, monkeypatch):
    monkeypatch.setattr(linear_module, "_CONTEXT_CHUNK", 32)  # several non-causal chunks too
    q, k, v = _qkv(dtype=dtype)
    key_mask = masks.from_lengths([150, 97], 150)[:, 0, 0]  # (B, Tk)
    out = linear_attention(q, k, v, causal=causal, mask=key_mask, chunk=32)  # 5 chunks, last ragged
    grads = torch.autograd.grad(out.pow(2).sum(), [q, k, v])
    ref, ref_w = explicit_linear_attention(q, k, v, causal=causal, key_mask=key_mask)
    ref_grads = torch.autograd.grad(ref.pow(2).sum(), [q, k, v])
    assert (out - ref).abs().max().item() <= tol
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g - r).abs().max().item() <= tol
    w = linear_attention_weights(q, k, causal=causal, mask=key_mask)
    assert (w - ref_w).abs().max().item() <= tol


def test_non_causal_is_the_plain_formula():
    q, k, v = _qkv(t=20)
    plain = torch.softmax(q, -1) @ (torch.softmax(k, dim=-2).transpose(-1, -2) @ v)
    torch.testing.assert_close(linear_attention(q, k, v), plain, rtol=0, atol=1e-12)


def test_chunk_size_does_not_matter():
    q, k, v = _qkv(t=70)
    one = linear_attention(q, k, v, causal=True, chunk=70)
    for chunk in (1, 7, 64, 200):
        torch.testing.assert_close(linear_attention(q, k, v, causal=True, chunk=chunk), one,
                                   rtol=0, atol=1e-12)


def test_large_key_range_stays_finite():
    q, k, v = _qkv(t=64, dtype=torch.float32)
    with torch.no_grad():
        k[:, :, 40:] += 60.0  # later keys dwarf earlier ones: the running max is rescaled
    out = linear_attention(q, k, v, causal=True, chunk=16)
    ref, _ = explicit_linear_attention(q, k, v, causal=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_masked_keys_change_nothing(causal):
    q, k, v = _qkv(t=12)
    key_mask = torch.tensor([[True] * 8 + [False] * 4, [True] * 12])
    out = linear_attention(q, k, v, causal=causal, mask=key_mask)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[0, :, 8:] = 1e3 * torch.randn_like(k2[0, :, 8:])
    v2[0, :, 8:] = torch.randn_like(v2[0, :, 8:])
    out2 = linear_attention(q, k2, v2, causal=causal, mask=key_mask[:, None, None, :])
    torch.testing.assert_close(out, out2, rtol=0, atol=1e-12)
    w = linear_attention_weights(q, k, causal=causal, mask=key_mask)
    assert torch.all(w[0, :, :, 8:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_no_valid_key_gives_zero():
    q, k, v = _qkv(t=6)
    key_mask = torch.tensor([[False, False, True, True, True, True], [False] * 6])
    out = linear_attention(q, k, v, causal=True, mask=key_mask, chunk=4)
    assert torch.all(out[0, :, :2] == 0) and torch.all(out[1] == 0)
    assert torch.all(linear_attention(q, k, v, mask=key_mask)[1] == 0)
    grads = torch.autograd.grad(out.sum(), [q, k, v])
    assert all(torch.isfinite(g).all() for g in grads)


def test_causal_outputs_ignore_the_future():
    layer = LinearAttention(12, 3, causal=True).double()
    x = torch.randn(2, 40, 12, dtype=torch.float64)
    y = x.clone()
    y[:, 25:] = torch.randn(2, 15, 12, dtype=torch.float64)
    torch.testing.assert_close(layer(y)[:, :25], layer(x)[:, :25], rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_layer_matches_reference_and_returns_weights(causal):
    layer = LinearAttention(12, 3, causal=causal).double()
    x = torch.randn(2, 10, 12, dtype=torch.float64)
    mask = masks.from_lengths([10, 6], 10)
    out, w = layer(x, mask=mask, return_weights=True)
    torch.testing.assert_close(out, layer(x, mask=mask), rtol=0, atol=0)
    q, k, v = (split_heads(p(x), 3) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    ref, ref_w = explicit_linear_attention(q, k, v, causal=causal, key_mask=mask[:, 0, 0])
    torch.testing.assert_close(out, layer.out_proj(ref.transpose(1, 2).reshape(2, 10, 12)))
    torch.testing.assert_close(w, ref_w)
    out.sum().backward()
    assert all(p.grad is not None for p in layer.parameters())


def test_cross_attention():
    layer = LinearAttention(8, 2).double()
    x, mem = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 7, 8, dtype=torch.float64)
    out, w = layer(x, mem, mem, return_weights=True)
    assert out.shape == (2, 3, 8) and w.shape == (2, 2, 3, 7)


def test_bad_inputs():
    with pytest.raises(ValueError, match="divisible"):
        LinearAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads"):
        LinearAttention(8, 0)
    layer = LinearAttention(8, 2)
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        layer(torch.randn(2, 5, 6))
    with pytest.raises(TypeError, match="boolean"):
        layer(torch.randn(2, 5, 8), mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="key-padding"):
        layer(torch.randn(2, 5, 8), mask=torch.ones(2, 1, 5, 5, dtype=torch.bool))
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="Tq == Tk"):
        linear_attention(q, torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), causal=True)
    with pytest.raises(ValueError, match="must agree"):
        linear_attention(q, torch.randn(1, 2, 4, 7), torch.randn(1, 2, 4, 8))
    with pytest.raises(ValueError, match="chunk"):
        linear_attention(q, q, q, chunk=0)
