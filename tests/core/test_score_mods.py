"""score_mod in query tiles: the step-by-step tiles and a bias_mod through the fused kernel, against
the dense readable path (outputs and gradients), in several tiles, with GQA, half precision, bad input."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnkit import masks, score_mods
from attnkit.core.functional import attention, last_backend
from attnkit.core.kernels import tiles as tiled_attention

B, H, T, DH = 2, 4, 80, 16
BS = 16
IDS = torch.tensor([0] * 20 + [1] * 30 + [2] * 25 + [-1] * 5)  # three documents, then padding


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles of a few blocks, so that every call runs several tiles with different key spans."""
    monkeypatch.setattr(tiled_attention, "TILE_ELEMENTS", B * H * 2 * BS * 3 * BS)
    monkeypatch.setattr(tiled_attention, "FUSED_TILE_ELEMENTS", B * H * 2 * BS * 3 * BS)


def _qkv(hkv: int = H, dtype: torch.dtype = torch.float32, dv: int = DH) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(B, H, T, DH), (B, hkv, T, DH), (B, hkv, T, dv)]
    return [torch.randn(*s, generator=g).to(dtype).requires_grad_() for s in shapes]


def _grads(out: torch.Tensor, xs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return torch.autograd.grad(out, xs, upstream)


def _alibi_bias() -> torch.Tensor:
    pos = torch.arange(T)
    return score_mods.alibi_slopes(H).view(1, H, 1, 1) * (pos.view(1, 1, 1, T) - pos.view(1, 1, T, 1))


def _random_mod(bi: torch.Tensor, hi: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
    table = torch.rand(B, H, T, T, generator=torch.Generator().manual_seed(3)) < 0.3
    return table[bi, hi, qi, ki]


MODS: dict[str, tuple[Callable[..., torch.Tensor] | None, int | None, int | None]] = {
    "none": (None, None, None),
    "causal": (masks.causal_mod, None, None),
    "causal_window": (masks.and_mods(masks.causal_mod, masks.sliding_window_mod(20)), None, None),
    "document": (masks.document_mod(IDS), None, None),
    "prefix_lm": (masks.prefix_lm_mod(24), None, None),
    "random": (_random_mod, B, H),
}
CAP = 2.0


@pytest.mark.parametrize("kind", ["alibi", "soft_cap"])
@pytest.mark.parametrize("name", sorted(MODS))
def test_tiles_match_the_dense_readable_path(name: str, kind: str) -> None:
    mod, b, h = MODS[name]
    bm = None if mod is None else masks.create_block_mask(mod, b, h, T, T, block_size=BS)
    dense = None if bm is None else bm.to_dense()
    xs = _qkv()
    q, k, v = xs
    mod_ = score_mods.alibi_mod(H) if kind == "alibi" else score_mods.soft_cap_mod(CAP)
    out = attention(q, k, v, mask=bm, score_mod=mod_)
    choice = last_backend()
    assert choice is not None and "query tiles" in choice.reason
    if kind == "alibi":
        ref = attention(q, k, v, mask=dense, bias=_alibi_bias(), backend="math")
    else:
        ref = attention(q, k, v, mask=dense, score_mod=mod_, backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(out, xs), _grads(ref, xs), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


def test_tile_plan_skips_blocks_outside_each_span() -> None:
    bm = masks.create_block_mask(masks.and_mods(masks.causal_mod, masks.sliding_window_mod(16)), None, None,
                                 256, 256, block_size=16)
    tiles = tiled_attention.tile_plan(bm, 1, 1, 256, 256, elements=2 * 16 * 3 * 16)
    assert [(t.q0, t.q1) for t in tiles] == [(q0, q0 + 32) for q0 in range(0, 256, 32)]
    assert all(t.k1 - t.k0 <= 48 and t.k0 >= t.q0 - 16 for t in tiles)  # never the whole row
    computed = sum((t.q1 - t.q0) * (t.k1 - t.k0) for t in tiles)
    assert computed < 256 * 256 / 4


@pytest.mark.parametrize("kind", ["alibi", "soft_cap"])
def test_grouped_query_attention(kind: str) -> None:
    mod = score_mods.alibi_mod(H) if kind == "alibi" else score_mods.soft_cap_mod(CAP)
    bm = masks.create_block_mask(masks.and_mods(masks.causal_mod, masks.sliding_window_mod(30)), None, None, T,
                                 T, block_size=BS)
    xs = _qkv(hkv=2)
    out = attention(*xs, mask=bm, score_mod=mod)
    ref = attention(*xs, mask=bm.to_dense(), score_mod=mod, backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(out, xs), _grads(ref, xs), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("hkv", [H, 2])
def test_a_value_width_other_than_the_query_width(hkv: int, mask: bool) -> None:
    """Dv = 24 with Dh = 16, as many key/value heads as query heads or grouped: the fused bias tiles too."""
    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS) if mask else None
    xs = _qkv(hkv=hkv, dv=DH + 8)
    mod = score_mods.alibi_mod(H)
    out = attention(*xs, mask=bm, score_mod=mod)
    choice = last_backend()
    assert out.shape == (B, H, T, DH + 8) and choice is not None and "query tiles" in choice.reason
    ref = attention(*xs, mask=None if bm is None else bm.to_dense(), score_mod=mod, backend="math")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, g_ref in zip(_grads(out, xs), _grads(ref, xs), strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["alibi", "soft_cap"])
def test_half_precision_no_nan_and_zero_padding_rows(dtype: torch.dtype, kind: str) -> None:
    mod = score_mods.alibi_mod(H) if kind == "alibi" else score_mods.soft_cap_mod(CAP)
    bm = masks.create_block_mask(masks.document_mod(IDS), None, None, T, T, block_size=BS)
    xs = _qkv(dtype=dtype)
    out = attention(*xs, mask=bm, score_mod=mod)
    assert out.dtype == dtype
    grads = _grads(out, xs)
    assert all(torch.isfinite(t).all() for t in (out, *grads))
    assert torch.equal(out[:, :, 75:], torch.zeros_like(out[:, :, 75:]))
    assert torch.equal(grads[0][:, :, 75:], torch.zeros_like(grads[0][:, :, 75:]))
    ref = attention(*(x.float() for x in xs), mask=bm.to_dense(), score_mod=mod, backend="math")
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_a_learned_bias_gets_its_gradient() -> None:
    table = torch.zeros(H, 2 * T - 1, requires_grad=True)  # a learned relative-position bias

    def rel(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor
            ) -> torch.Tensor:
        return score + table[h, ki - qi + T - 1]

    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS)
    q, k, v = _qkv()
    attention(q, k, v, mask=bm, score_mod=rel).sum().backward()
    choice = last_backend()
    assert choice is not None and "query tiles" not in choice.reason  # the autograd path
    assert table.grad is not None and table.grad.abs().sum() > 0
    with torch.no_grad():  # without gradients the tiles run
        attention(q, k, v, mask=bm, score_mod=rel)
    assert "query tiles" in last_backend().reason  # type: ignore[union-attr]


def test_bad_bias_mod_output() -> None:
    q, k, v = _qkv()
    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS)
    with pytest.raises(ValueError, match="does not broadcast to the tile"):
        attention(q, k, v, mask=bm, score_mod=score_mods.bias_mod(lambda b, h, qi, ki: torch.zeros(3, 5)))
    with pytest.raises(TypeError, match="must return a floating tensor"):
        attention(q, k, v, mask=bm, score_mod=score_mods.bias_mod(lambda b, h, qi, ki: ki - qi))
    with pytest.raises(TypeError, match="bias_mod needs a callable"):
        score_mods.bias_mod(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one slope per head"):
        score_mods.alibi_mod(torch.ones(2, 2))
    with pytest.raises(ValueError, match="cap must be a positive float"):
        score_mods.soft_cap_mod(0)


def test_a_captured_bias_is_not_written_into() -> None:
    keep = torch.zeros(1, 1, T, T)
    before = keep.clone()
    bm = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=BS)
    q, k, v = _qkv()
    # returned as it is (the tile's full shape) for the one-tile call below: must not be written into
    mod = score_mods.bias_mod(lambda b, h, qi, ki: keep if qi.numel() == T else keep[0, 0, qi, ki])
    monkeypatched = tiled_attention.FUSED_TILE_ELEMENTS
    tiled_attention.FUSED_TILE_ELEMENTS = 1 << 24
    try:
        out = attention(q, k, v, mask=bm, score_mod=mod)
    finally:
        tiled_attention.FUSED_TILE_ELEMENTS = monkeypatched
    assert torch.equal(keep, before)
    torch.testing.assert_close(out, attention(q, k, v, mask=bm.to_dense(), backend="math"), atol=1e-5, rtol=1e-5)


def test_the_readable_path_does_not_write_into_a_score_mods_result() -> None:
    table = torch.randn(B, H, T, T, generator=torch.Generator().manual_seed(4))  # the caller's: returned as it is
    before = table.clone()
    q, k, v = (x.detach() for x in _qkv())
    causal = masks.causal(T, T)
    out = attention(q, k, v, mask=causal, score_mod=lambda s, b, h, qi, ki: table, backend="math")
    assert last_backend().route == "score-mod-math"
    assert torch.equal(table, before)
    torch.testing.assert_close(out, torch.softmax(table.masked_fill(~causal, float("-inf")), -1) @ v)
