"""RelativePositionAttention against the Shaw et al. (2018) formula written out in full."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit import masks
from attnkit.core.functional import split_heads
from attnkit.layers import relative as relative_module
from attnkit.layers.relative import RelativePositionAttention, relative_attention


def shaw_reference(layer: RelativePositionAttention, x, key=None, value=None, mask=None, causal=False):
    """e_ij = q_i·(k_j + a^K_ij)/sqrt(Dh); z_i = Σ_j α_ij (v_j + a^V_ij), with (B, Tq, Tk, Dh) tables."""
    key = x if key is None else key
    value = x if value is None else value
    h, dh, kmax = layer.num_heads, layer.head_dim, layer.max_relative_position
    q = split_heads(layer.q_proj(x), h)  # (B, H, Tq, Dh)
    k = split_heads(layer.k_proj(key), h)  # (B, H, Tk, Dh)
    v = split_heads(layer.v_proj(value), h)  # (B, H, Tk, Dh)
    b, tq, tk = x.shape[0], x.shape[1], key.shape[1]
    i = torch.arange(tq).view(tq, 1) + (tk - tq)
    j = torch.arange(tk).view(1, tk)
    bucket = (j - i).clamp(-kmax, kmax) + kmax  # (Tq, Tk)
    a_k = layer.rel_k[bucket].expand(b, tq, tk, dh)  # (B, Tq, Tk, Dh): a^K_ij
    a_v = layer.rel_v[bucket].expand(b, tq, tk, dh)  # (B, Tq, Tk, Dh): a^V_ij
    # e_ij = q_i · (k_j + a^K_ij) / sqrt(Dh), summed over the feature axis d.
    keys_plus = k[:, :, None, :, :] + a_k[:, None]  # (B, H, Tq, Tk, Dh)
    e = (q[:, :, :, None, :] * keys_plus).sum(-1) / math.sqrt(dh)  # (B, H, Tq, Tk)
    allowed = torch.ones(b, h, tq, tk, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        allowed = allowed & masks.causal(tq, tk)
    row_ok = allowed.any(-1, keepdim=True)
    e = e.masked_fill(~allowed, float("-inf")).masked_fill(~row_ok, 0.0)
    alpha = torch.softmax(e, dim=-1) * row_ok  # rows with no key: all zero
    values_plus = v[:, :, None, :, :] + a_v[:, None]  # (B, H, Tq, Tk, Dh)
    z = (alpha[..., None] * values_plus).sum(-2)  # (B, H, Tq, Dh)
    out = layer.out_proj(z.transpose(1, 2).reshape(b, tq, h * dh))
    keyed = row_ok.expand(b, h, tq, 1).any(1)  # (B, Tq, 1): a query with no key gives zeros
    return out.masked_fill(~keyed, 0.0), alpha


def _compare(layer, x, tol, **kwargs):
    x1 = x.clone().requires_grad_(True)
    out, w = layer(x1, return_weights=True, **kwargs)
    grads = torch.autograd.grad((out * torch.cos(out)).sum(), [x1, *layer.parameters()])
    x2 = x.clone().requires_grad_(True)
    ref_out, ref_w = shaw_reference(layer, x2, **kwargs)
    ref_grads = torch.autograd.grad((ref_out * torch.cos(ref_out)).sum(), [x2, *layer.parameters()])
    assert (out - ref_out).abs().max().item() <= tol
    assert (w - ref_w).abs().max().item() <= tol
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g - r).abs().max().item() <= tol
    return w


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_shaw_formula(dtype, tol, causal):
    layer = RelativePositionAttention(16, 4, 3).to(dtype)
    x = torch.randn(2, 9, 16, dtype=dtype)
    _compare(layer, x, tol, causal=causal)


def test_masked_keys_get_zero_weight_and_empty_rows_are_zero():
    layer = RelativePositionAttention(16, 2, 2).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    mask = masks.from_lengths([4, 7], 7)  # (B, 1, 1, Tk)
    w = _compare(layer, x, 1e-10, mask=mask)
    assert torch.all(w[0, :, :, 4:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 7, dtype=torch.float64))
    # A query with no key at all: zero weights, zero output (after the output projection too).
    row_mask = torch.ones(1, 1, 7, 7, dtype=torch.bool)
    row_mask[..., 3, :] = False
    w = _compare(layer, x, 1e-10, mask=row_mask)
    assert torch.all(w[:, :, 3] == 0)
    out = layer(x, mask=row_mask)
    assert torch.equal(out[:, 3], torch.zeros(2, 16, dtype=torch.float64))


def test_cross_attention_matches_formula():
    layer = RelativePositionAttention(8, 2, 2).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    mem = torch.randn(2, 6, 8, dtype=torch.float64)
    _compare(layer, x, 1e-10, key=mem, value=mem, causal=True)


def test_blocked_queries_match_one_block(monkeypatch):
    layer = RelativePositionAttention(8, 2, 2).double().eval()
    x = torch.randn(2, 11, 8, dtype=torch.float64)
    mask = masks.from_lengths([5, 11], 11)
    with torch.no_grad():
        whole = layer(x, mask=mask, causal=True)
        monkeypatch.setattr(relative_module, "_BLOCK_ELEMENTS", 2 * 2 * 11 * 3)  # 3 rows per block
        monkeypatch.setattr(relative_module, "_MIN_ROWS", 1)
        blocked, w = layer(x, mask=mask, causal=True, return_weights=True)
    torch.testing.assert_close(blocked, whole, rtol=0, atol=1e-12)
    ref, ref_w = shaw_reference(layer, x, mask=mask, causal=True)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)


def test_positions_break_permutation_equivariance_but_content_stays_local():
    layer = RelativePositionAttention(8, 2, 1).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    perm = torch.tensor([5, 0, 3, 1, 4, 2])
    out = layer(x)
    out_perm = layer(x[:, perm])
    assert not torch.allclose(out_perm, out[:, perm])
    # Causal: changing the last token never changes earlier outputs.
    y = x.clone()
    y[:, -1] += 1.0
    torch.testing.assert_close(layer(y, causal=True)[:, :-1], layer(x, causal=True)[:, :-1])


def test_dropout_training_path_is_consistent():
    layer = RelativePositionAttention(8, 2, 2, dropout=0.5).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    layer.train()
    torch.manual_seed(1)
    a = layer(x)
    torch.manual_seed(1)
    b = layer(x)
    torch.testing.assert_close(a, b)
    layer.eval()
    ref, _ = shaw_reference(layer, x)
    torch.testing.assert_close(layer(x), ref, rtol=0, atol=1e-10)
    assert not torch.allclose(a, ref)


@pytest.mark.parametrize(
    "kwargs,err,word",
    [
        (dict(d_model=16, num_heads=4, max_relative_position=0), ValueError, "max_relative_position"),
        (dict(d_model=10, num_heads=4, max_relative_position=2), ValueError, "divisible"),
        (dict(d_model=16, num_heads=0, max_relative_position=2), ValueError, "num_heads"),
        (dict(d_model=16, num_heads=4, max_relative_position=2, dropout=1.0), ValueError, "dropout"),
    ],
)
def test_bad_construction(kwargs, err, word):
    with pytest.raises(err, match=word):
        RelativePositionAttention(**kwargs)


def test_bad_inputs():
    layer = RelativePositionAttention(8, 2, 2)
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        layer(torch.randn(2, 5, 7))
    with pytest.raises(TypeError, match="query must be"):
        layer([[1.0]])
    with pytest.raises(TypeError, match="boolean"):
        layer(torch.randn(2, 5, 8), mask=torch.zeros(2, 1, 1, 5))
    with pytest.raises(ValueError, match="broadcast"):
        layer(torch.randn(2, 5, 8), mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="both key and value"):
        layer(torch.randn(2, 5, 8), key=torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="rel_k"):
        relative_attention(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4),
                           torch.randn(4, 4), torch.randn(4, 4))


def test_half_precision_runs_softmax_in_float32():
    layer = RelativePositionAttention(16, 2, 2)
    x = torch.randn(2, 6, 16)
    mask = masks.from_lengths([3, 6], 6)
    ref, ref_w = layer(x, mask=mask, return_weights=True)
    out, w = layer.bfloat16()(x.bfloat16(), mask=mask, return_weights=True)
    assert out.dtype == torch.bfloat16 and w.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=5e-2, atol=5e-2)
    assert torch.all(w[0, :, :, 3:] == 0)


def test_benchmark_naive_form_matches_layer_function():
    from attnkit.bench import naive_relative as naive

    q, k, v = (torch.randn(2, 3, 7, 4, dtype=torch.float64) for _ in range(3))
    rel_k, rel_v = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    mask = masks.from_lengths([7, 4], 7)
    out, w = relative_attention(q, k, v, rel_k, rel_v, mask=mask, return_weights=True)
    ref, ref_w = naive.naive_relative_attention(q, k, v, rel_k, rel_v, 2, mask=mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_with_constant_edge_regions_match_formula_and_gradients(monkeypatch, causal):
    # 4-row blocks over 20 positions with k=2: most keys lie outside each block's window.
    monkeypatch.setattr(relative_module, "_BLOCK_ELEMENTS", 2 * 2 * 20 * 4)
    monkeypatch.setattr(relative_module, "_MIN_ROWS", 1)
    layer = RelativePositionAttention(8, 2, 2).double()
    x = torch.randn(2, 20, 8, dtype=torch.float64)
    _compare(layer, x, 1e-10, causal=causal, mask=masks.from_lengths([20, 13], 20))
