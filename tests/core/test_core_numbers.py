"""The attention core against hand-written float64 references: score mods, ALiBi slopes, rows
without a key in every layer, NaN on every path. Each expectation is written out from the
formula or the paper, never computed by the function under test."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit import (
    AdditiveAttention,
    AttentionPooling,
    LinearAttention,
    MultiHeadAttention,
    RelativePositionAttention,
    attention,
    masks,
    positional,
    score_mods,
)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scores_fn, allowed=None) -> torch.Tensor:
    """softmax(scores_fn(Q K^T / sqrt(Dh)), masked) V in float64; a row with no key gives 0."""
    q, k, v = q.double(), k.double(), v.double()
    t_q, t_k = q.shape[2], k.shape[2]
    s = scores_fn(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
    if allowed is None:
        allowed = torch.ones(t_q, t_k, dtype=torch.bool)
    s = s.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v


def _qkv(b: int, h: int, t: int, dh: int, dtype: torch.dtype = torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, t, dh, generator=g).to(dtype) for _ in range(3)]


# ---- a score_mod is called with in-range indices only -------------------------------------------

@pytest.mark.parametrize("grad_table", [False, True])
def test_gather_path_gives_score_mod_in_range_indices(grad_table: bool) -> None:
    t, bs = 70, 32  # T not a multiple of the block size: the last blocks are padded
    table = torch.linspace(-1.0, 1.0, t).requires_grad_(grad_table)  # one bias per key, length T

    def mod(score, b, h, q_idx, kv_idx):
        return score + table[kv_idx] - 0.5 * table[q_idx]

    q, k, v = _qkv(1, 2, t, 8)
    bm = masks.create_block_mask(masks.causal_mod, None, None, t, t, block_size=bs)
    out, weights = attention(q, k, v, mask=bm, score_mod=mod, return_weights=True)
    tab = table.detach().double()
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    ref = _reference(q, k, v, lambda s: s + tab[None, :] - 0.5 * tab[:, None], causal)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    assert weights.shape == (1, 2, t, t)
    if grad_table:
        attention(q, k, v, mask=bm, score_mod=mod).sum().backward()
        assert table.grad is not None and torch.isfinite(table.grad).all()


# ---- biases added in float32 ---------------------------------------------------------------------

def _alibi64(h: int, t: int, slopes: list[float]):
    pos = torch.arange(t, dtype=torch.float64)
    sl = torch.tensor(slopes, dtype=torch.float64).view(1, h, 1, 1)
    return lambda s: s + sl * (pos.view(1, 1, 1, t) - pos.view(1, 1, t, 1))


@pytest.mark.parametrize("masked", [False, True])
def test_bf16_alibi_within_003_of_float64(masked: bool) -> None:
    h, t = 4, 512
    q, k, v = _qkv(1, h, t, 32, torch.bfloat16)
    bm = masks.create_block_mask(masks.causal_mod, None, None, t, t) if masked else None
    out = attention(q, k, v, mask=bm, score_mod=score_mods.alibi_mod(h))
    slopes = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if masked else None
    ref = _reference(q, k, v, _alibi64(h, t, slopes), allowed)
    assert (out.double() - ref).abs().max() < 0.03


# ---- ALiBi slopes: the paper's get_slopes, written out ------------------------------------------

SLOPES = {  # Press et al. (2022), reference get_slopes: the closest power of two, then every other of 2x
    1: [2.0 ** -8],
    2: [2.0 ** -4, 2.0 ** -8],
    3: [2.0 ** -4, 2.0 ** -8, 2.0 ** -2],
    4: [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8],
    6: [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3],
    8: [2.0 ** -i for i in range(1, 9)],
    12: [2.0 ** -i for i in range(1, 9)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5],
}


@pytest.mark.parametrize("heads", sorted(SLOPES))
def test_alibi_slopes_follow_the_paper_everywhere(heads: int) -> None:
    expected = torch.tensor(SLOPES[heads], dtype=torch.float32)
    assert torch.equal(positional.alibi_slopes(heads), expected)
    assert torch.equal(score_mods.alibi_slopes(heads), expected)
    t = 6
    pos = torch.arange(t)
    b = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    h = torch.arange(heads).view(1, heads, 1, 1)
    zero = torch.zeros(1, heads, t, t)
    got = score_mods.alibi_mod(heads)(zero, b, h, pos.view(1, 1, t, 1), pos.view(1, 1, 1, t))
    dist = (pos.view(t, 1) - pos.view(1, t)).double()  # q - kv
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    want = -expected.double().view(1, heads, 1, 1) * dist
    torch.testing.assert_close(got.double()[..., causal], want[..., causal])  # the paper's bias
    torch.testing.assert_close(got.double()[..., ~causal], want[..., ~causal])  # later keys raised: as documented
    sym = score_mods.alibi_mod(heads, symmetric=True)(zero, b, h, pos.view(1, 1, t, 1), pos.view(1, 1, 1, t))
    torch.testing.assert_close(sym.double(), -expected.double().view(1, heads, 1, 1) * dist.abs())
    torch.testing.assert_close(positional.alibi_bias(heads, t, t).double(), sym.double())


# ---- soft_cap_mod and or_mods against their formulas --------------------------------------------

def test_soft_cap_mod_against_float64_formula() -> None:
    q, k, v = _qkv(1, 2, 40, 8)
    q = q * 4  # large logits, so the cap matters
    out = attention(q, k, v, score_mod=score_mods.soft_cap_mod(1.5))
    ref = _reference(q, k, v, lambda s: 1.5 * torch.tanh(s / 1.5))
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    score = torch.tensor([-100.0, -1.0, 0.0, 0.5, 3.0, 100.0])
    z = torch.zeros(())
    capped = score_mods.soft_cap_mod(2.0)(score, z, z, z, z)
    torch.testing.assert_close(capped.double(), 2.0 * torch.tanh(score.double() / 2.0))


def test_or_mods_against_hand_written_union() -> None:
    t = 40
    mod = masks.or_mods(masks.sliding_window_mod(2), masks.prefix_lm_mod(5))
    bm = masks.create_block_mask(mod, None, None, t, t, block_size=8)
    i, j = torch.arange(t).view(t, 1), torch.arange(t).view(1, t)
    want = ((j - i).abs() <= 2) | (j < 5) | (j <= i)
    assert torch.equal(bm.to_dense()[0, 0], want)
    q, k, v = _qkv(1, 2, t, 8)
    torch.testing.assert_close(attention(q, k, v, mask=bm).double(), _reference(q, k, v, lambda s: s, want),
                               atol=1e-5, rtol=1e-5)


# ---- a query with no key gives zero output, in every layer --------------------------------------

D, NH = 16, 4


def _no_key_mask(t_q: int, t_k: int) -> torch.Tensor:
    m = torch.ones(2, 1, t_q, t_k, dtype=torch.bool)
    m[1] = False  # the second example has no key at all
    m[0, 0, 2] = False  # query 2 of the first example neither
    return m


@pytest.mark.parametrize("block", [False, True])
def test_multi_head_attention_gives_zeros_for_a_query_without_key(block: bool) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(D, NH)
    torch.nn.init.normal_(layer.out_proj.bias)
    x = torch.randn(2, 6, D)
    m = _no_key_mask(6, 6)
    mask = m
    if block:
        table = m[:, 0]
        mask = masks.create_block_mask(lambda b, h, qi, ki: table[b, qi, ki], 2, None, 6, 6, block_size=4)
    out = layer(x, mask=mask)
    assert torch.equal(out[1], torch.zeros(6, D)) and torch.equal(out[0, 2], torch.zeros(D))
    assert out[0, 0].abs().sum() > 0
    # bottom-right causal with Tq > Tk: the first queries come before every key
    out = layer(x, x[:, :3], x[:, :3], causal=True)
    assert torch.equal(out[:, :3], torch.zeros(2, 3, D)) and out[:, 3:].abs().sum() > 0


def test_every_layer_gives_zeros_for_a_query_without_key() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 6, D)
    m = _no_key_mask(6, 6)
    rel = RelativePositionAttention(D, NH, 3)
    torch.nn.init.normal_(rel.out_proj.bias)
    out = rel(x, mask=m)
    assert torch.equal(out[1], torch.zeros(6, D)) and torch.equal(out[0, 2], torch.zeros(D))
    lin = LinearAttention(D, NH)
    torch.nn.init.normal_(lin.out_proj.bias)
    keys = torch.ones(2, 6, dtype=torch.bool)
    keys[1] = False
    out = lin(x, mask=keys)
    assert torch.equal(out[1], torch.zeros(6, D)) and out[0].abs().sum() > 0
    pool = AttentionPooling(D, hidden_dim=8)
    assert torch.equal(pool(x, mask=keys)[1], torch.zeros(D))
    add = AdditiveAttention(D, D, 8)
    context = add(x[:, 0], x, mask=keys)
    assert torch.equal(context[1], torch.zeros(D))


# ---- NaN propagates the same way on every path --------------------------------------------------

@pytest.mark.parametrize("masked", [False, True])
def test_nan_in_q_gives_nan_in_its_row_on_every_path(masked: bool) -> None:
    q, k, v = _qkv(1, 2, 5, 4)
    q[0, 0, 2, 1] = float("nan")
    mask = torch.ones(5, 5, dtype=torch.bool) if masked else None
    fused = attention(q, k, v, mask=mask)
    math_ = attention(q, k, v, mask=mask, backend="math")
    out, weights = attention(q, k, v, mask=mask, return_weights=True)
    for o in (fused, math_, out):
        assert torch.isnan(o[0, 0, 2]).all()
        assert torch.isfinite(o[0, 0, [0, 1, 3, 4]]).all() and torch.isfinite(o[0, 1]).all()
    assert torch.isnan(weights[0, 0, 2]).all()
    torch.testing.assert_close(fused, math_, equal_nan=True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("path", ["tiles", "bias", "gather", "dense"])
def test_score_mod_with_non_finite_row_is_refused(bad: float, path: str) -> None:
    q, k, v = _qkv(1, 2, 40, 8)

    def fn(b, h, q_idx, kv_idx):
        return torch.where(q_idx == 3, bad, 0.0) + 0.0 * kv_idx

    mod = score_mods.bias_mod(fn) if path == "bias" else (lambda s, b, h, qi, ki: s + fn(b, h, qi, ki))
    bm = masks.create_block_mask(masks.causal_mod, None, None, 40, 40, block_size=16)
    with pytest.raises(ValueError, match="score_mod"):
        if path == "dense":
            attention(q, k, v, score_mod=mod, backend="math")
        else:
            attention(q, k, v, mask=bm, score_mod=mod, return_weights=path == "gather")


def test_head_width_zero_is_refused_by_name() -> None:
    q = torch.randn(1, 2, 3, 0)
    with pytest.raises(ValueError, match="head width Dh"):
        attention(q, q, q)


@pytest.mark.parametrize("kind", ["runs", "blocks", "tiles", "bias", "gather"])
def test_nan_in_q_gives_nan_in_its_row_on_the_block_sparse_paths(kind: str) -> None:
    t = 48
    q, k, v = _qkv(1, 2, t, 8)
    q[0, 1, 20, 3] = float("nan")
    mod = masks.causal_mod if kind == "runs" else masks.or_mods(  # key blocks with a gap: gathered
        masks.prefix_lm_mod(4), masks.and_mods(masks.causal_mod, masks.sliding_window_mod(4)))
    bm = masks.create_block_mask(mod, None, None, t, t, block_size=8)
    score_mod = {"tiles": score_mods.soft_cap_mod(5.0), "gather": score_mods.soft_cap_mod(5.0),
                 "bias": score_mods.alibi_mod(2)}.get(kind)
    out = attention(q, k, v, mask=bm, score_mod=score_mod, return_weights=kind == "gather")
    out = out[0] if isinstance(out, tuple) else out
    ref = attention(q, k, v, mask=bm.to_dense(), score_mod=score_mod, backend="math")
    assert torch.isnan(out[0, 1, 20]).all() and torch.isnan(ref[0, 1, 20]).all()
    torch.testing.assert_close(out, ref, equal_nan=True, atol=1e-5, rtol=1e-5)
