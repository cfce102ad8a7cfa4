"""Block masks and the block-sparse path: parity with the dense readable path, numerics, bad input."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import attnkit
from attnkit import masks
from attnkit.core.functional import attention, last_backend

B, H, T, DH = 2, 4, 80, 16
BS = 16  # small blocks so that every kind (empty, full, partial) and a ragged last block occur


def _qkv(b: int = B, h: int = H, hkv: int = H, t: int = T, dtype: torch.dtype = torch.float32,
         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, DH, generator=g).to(dtype).requires_grad_()
    k = torch.randn(b, hkv, t, DH, generator=g).to(dtype).requires_grad_()
    v = torch.randn(b, hkv, t, DH, generator=g).to(dtype).requires_grad_()
    return q, k, v


def _random_mod(b: int, h: int, t: int) -> Callable[..., torch.Tensor]:
    table = torch.rand(b, h, t, t, generator=torch.Generator().manual_seed(3)) < 0.3

    def mod(bi: torch.Tensor, hi: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
        return table[bi, hi, qi, ki]

    return mod


IDS = torch.tensor([0] * 20 + [1] * 30 + [2] * 25 + [-1] * 5)  # three documents, then padding
IDS_B = torch.stack([IDS, torch.tensor([0] * 50 + [1] * 30)])
MODS: dict[str, tuple[Callable[..., torch.Tensor], int | None, int | None]] = {
    "causal": (masks.causal_mod, None, None),
    "sliding_window": (masks.sliding_window_mod(7), None, None),
    "causal_window": (masks.and_mods(masks.causal_mod, masks.sliding_window_mod(20)), None, None),
    "document": (masks.document_mod(IDS), None, None),
    "document_per_example": (masks.and_mods(masks.causal_mod, masks.document_mod(IDS_B)), B, None),
    "prefix_lm": (masks.prefix_lm_mod(24), None, None),
    "prefix_or_window": (masks.or_mods(masks.prefix_lm_mod(5), masks.sliding_window_mod(3)), None, None),
    "random": (_random_mod(B, H, T), B, H),
}


def _dense_mask(mod: Callable[..., torch.Tensor], b: int | None, h: int | None) -> torch.Tensor:
    bi = torch.arange(b or 1).view(-1, 1, 1, 1)
    hi = torch.arange(h or 1).view(1, -1, 1, 1)
    return mod(bi, hi, torch.arange(T).view(1, 1, T, 1), torch.arange(T).view(1, 1, 1, T)).expand(
        b or 1, h or 1, T, T)


def _grads(out: torch.Tensor, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # in logical order: randn_like would follow the output's memory layout, which differs between paths
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return torch.autograd.grad(out, xs, upstream)


@pytest.mark.parametrize("name", sorted(MODS))
def test_every_mod_matches_the_dense_readable_path(name: str) -> None:
    mod, b, h = MODS[name]
    bm = masks.create_block_mask(mod, b, h, T, T, block_size=BS)
    dense = _dense_mask(mod, b, h)
    assert torch.equal(bm.to_dense(), dense)
    q, k, v = _qkv()
    out, w = attention(q, k, v, mask=bm, return_weights=True)
    assert last_backend().name == "block-sparse"  # type: ignore[union-attr]
    ref, w_ref = attention(q, k, v, mask=dense, backend="math", return_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, w_ref, atol=1e-5, rtol=1e-5)
    ref_grads = _grads(ref, q, k, v)
    for g, g_ref in zip(_grads(out, q, k, v), ref_grads, strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)
    fused = attention(q, k, v, mask=bm)  # without weights: the blocks go through the fused kernel
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(fused, q, k, v), ref_grads, strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


def test_block_kinds_and_repr() -> None:
    bm = masks.create_block_mask(masks.causal_mod, None, None, 64, 64, block_size=16)
    assert bm.counts == {"full": 6, "partial": 4, "empty": 6}
    assert bm.sparsity() == pytest.approx(6 / 16)
    assert "37.5% skipped" in repr(bm) and "block_size=16" in repr(bm)
    window = masks.create_block_mask(masks.and_mods(masks.causal_mod, masks.sliding_window_mod(256)),
                                     None, None, 8192, 8192)
    assert window.sparsity() > 0.94


def test_last_backend_says_how_much_was_skipped() -> None:
    q, k, v = _qkv()
    attention(q, k, v, mask=masks.create_block_mask(masks.sliding_window_mod(4), None, None, T, T,
                                                    block_size=BS))
    choice = last_backend()
    assert choice is not None and choice.name == "block-sparse"
    assert "% of blocks skipped" in choice.reason


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(MODS))
def test_every_mod_in_half_precision_has_no_nan(name: str, dtype: torch.dtype) -> None:
    mod, b, h = MODS[name]
    bm = masks.create_block_mask(mod, b, h, T, T, block_size=BS)
    q, k, v = _qkv(dtype=dtype)
    for kwargs in ({}, {"return_weights": True}):
        res = attention(q, k, v, mask=bm, **kwargs)  # type: ignore[call-overload]
        out = res[0] if isinstance(res, tuple) else res
        grads = _grads(out, q, k, v)
        assert all(torch.isfinite(t).all() for t in (out, *grads)), kwargs
        ref = attention(q.float(), k.float(), v.float(), mask=bm.to_dense(), backend="math")
        torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_has_no_nan_and_stays_close(dtype: torch.dtype) -> None:
    bm = masks.create_block_mask(masks.document_mod(IDS), None, None, T, T, block_size=BS)
    q, k, v = _qkv(dtype=dtype)
    out = attention(q, k, v, mask=bm)
    assert out.dtype == dtype
    grads = _grads(out, q, k, v)
    assert all(torch.isfinite(t).all() for t in (out, *grads))
    ref = attention(q.float(), k.float(), v.float(), mask=bm.to_dense(), backend="math")
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    assert torch.equal(out[:, :, 75:], torch.zeros_like(out[:, :, 75:]))  # padding rows


@pytest.mark.parametrize("h_mask", [None, H])
def test_grouped_query_attention(h_mask: int | None) -> None:
    mod = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(9))
    if h_mask is not None:  # a different window per head
        mod = masks.and_mods(masks.causal_mod, lambda b, h, qi, ki: (qi - ki) <= 3 + 5 * h)
    bm = masks.create_block_mask(mod, None, h_mask, T, T, block_size=BS)
    q, k, v = _qkv(hkv=2)
    out = attention(q, k, v, mask=bm)
    ref = attention(q, k, v, mask=bm.to_dense(), backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(out, q, k, v), _grads(ref, q, k, v), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_give_zero_output_weights_and_gradients() -> None:
    mod = masks.document_mod(IDS)  # rows 75.. are padding: no key at all
    bm = masks.create_block_mask(mod, None, None, T, T, block_size=BS)
    q, k, v = _qkv()
    out, w = attention(q, k, v, mask=bm, return_weights=True)
    assert torch.equal(out[:, :, 75:], torch.zeros_like(out[:, :, 75:]))
    assert torch.equal(w[:, :, 75:], torch.zeros_like(w[:, :, 75:]))
    (gq,) = torch.autograd.grad(out.sum(), q)
    assert torch.equal(gq[:, :, 75:], torch.zeros_like(gq[:, :, 75:]))
    torch.testing.assert_close(w[:, :, :75].sum(-1), torch.ones(B, H, 75))


def _alibi_slopes(h: int) -> torch.Tensor:
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)])


def test_score_mod_alibi_equals_the_dense_bias() -> None:
    slopes = _alibi_slopes(H)

    def alibi(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor,
              ki: torch.Tensor) -> torch.Tensor:
        return score + slopes[h] * (ki - qi)

    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS)
    q, k, v = _qkv()
    out = attention(q, k, v, mask=bm, score_mod=alibi)
    pos = torch.arange(T)
    bias = slopes.view(1, H, 1, 1) * (pos.view(1, 1, 1, T) - pos.view(1, 1, T, 1))
    ref = attention(q, k, v, mask=bm.to_dense(), bias=bias, backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(out, q, k, v), _grads(ref, q, k, v), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)
    dense = attention(q, k, v, mask=bm.to_dense(), score_mod=alibi)  # the readable path
    assert last_backend().name == "math"  # type: ignore[union-attr]
    torch.testing.assert_close(dense, ref, atol=1e-5, rtol=1e-5)


def test_soft_capping_score_mod_without_mask() -> None:
    q, k, v = _qkv()
    out = attention(q, k, v, score_mod=lambda s, b, h, qi, ki: 5.0 * torch.tanh(s / 5.0))
    s = 5.0 * torch.tanh((q @ k.transpose(-1, -2)) / DH**0.5 / 5.0)
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v, atol=1e-5, rtol=1e-5)


def test_bad_mask_mod_output() -> None:
    with pytest.raises(TypeError, match="mask_mod must return a bool tensor"):
        masks.create_block_mask(lambda b, h, qi, ki: (ki <= qi).float(), None, None, T, T)
    with pytest.raises(ValueError, match="mask_mod returned shape"):
        masks.create_block_mask(lambda b, h, qi, ki: torch.ones(3, 3, dtype=torch.bool), None, None, T, T)
    with pytest.raises(TypeError, match="mask_mod must be callable"):
        masks.create_block_mask("causal", None, None, T, T)  # type: ignore[arg-type]


def test_score_mod_that_changes_the_shape() -> None:
    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="score_mod must keep the score's shape"):
        attention(q, k, v, mask=bm, score_mod=lambda s, b, h, qi, ki: s.sum(-1))
    with pytest.raises(ValueError, match="score_mod must keep the score's shape"):
        attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s[..., :3])


def test_block_mask_for_other_shapes_or_device() -> None:
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"BlockMask built for \(B, H, Tq, Tk\)"):
        attention(q, k, v, mask=masks.create_block_mask(masks.causal_mod, None, None, T + 1, T + 1))
    with pytest.raises(ValueError, match=r"BlockMask built for"):
        attention(q, k, v, mask=masks.create_block_mask(masks.causal_mod, 3, None, T, T))
    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T).to("meta")
    with pytest.raises(ValueError, match="BlockMask is on meta but q is on cpu"):
        attention(q, k, v, mask=bm)
    with pytest.raises(ValueError, match=r"a BlockMask takes no bias=: put the bias into score_mod"):
        attention(q, k, v, mask=masks.create_block_mask(masks.causal_mod, None, None, T, T),
                  bias=torch.zeros(1, 1, T, T))


@pytest.mark.parametrize("tq", [T, 48])
def test_causal_with_a_block_mask_keeps_the_pairs_both_allow(tq: int) -> None:
    """causal=True with a BlockMask (the ring's rule too): the mask's pairs that are also causal, bottom-right
    aligned when Tq < Tk; only the blocks that cross the diagonal are partial, and the mask is kept on the mask."""
    q, k, v = _qkv()
    q = q[:, :, :tq].detach().requires_grad_()
    bm = masks.create_block_mask(_random_mod(B, H, T), B, H, tq, T, block_size=BS)
    allowed = bm.to_dense() & masks.causal(tq, T)
    out = attention(q, k, v, mask=bm, causal=True)
    assert attnkit.choose_backend(q, k, v, mask=bm, causal=True) == last_backend()  # the same path, told
    ref = attention(q, k, v, mask=allowed, backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    for g, g_ref in zip(grads, torch.autograd.grad(ref.sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)
    folded = masks.with_causal(bm)
    assert torch.equal(folded.to_dense(), allowed) and masks.with_causal(bm) is folded
    window = masks.create_block_mask(masks.sliding_window_mod(200), None, None, T, T, block_size=BS)
    assert masks.with_causal(window).counts == masks.create_block_mask(masks.causal_mod, None, None, T, T,
                                                                       block_size=BS).counts


def test_segment_ids_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="segment_ids have length T=80"):
        masks.create_block_mask(masks.document_mod(IDS), None, None, 64, 64)
    with pytest.raises(ValueError, match="pass B=2 to create_block_mask"):
        masks.create_block_mask(masks.document_mod(IDS_B), None, None, T, T)
    with pytest.raises(TypeError, match="segment_ids must hold integers"):
        masks.document_mod(torch.zeros(T))


def test_exports() -> None:
    assert attnkit.masks.create_block_mask is masks.create_block_mask
    assert isinstance(masks.create_block_mask(masks.causal_mod, 1, 1, 4, 4), masks.BlockMask)


def test_multi_head_attention_passes_a_block_mask_through() -> None:
    layer = attnkit.MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, T, 32)
    bm = masks.create_block_mask(masks.and_mods(masks.causal_mod, masks.document_mod(IDS)), None, None, T, T,
                                 block_size=BS)
    out = layer(x, mask=bm)
    assert last_backend().name == "block-sparse"  # type: ignore[union-attr]
    torch.testing.assert_close(out, layer(x, mask=bm.to_dense()), atol=1e-5, rtol=1e-5)
