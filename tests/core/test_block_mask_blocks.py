"""Block masks through the layers and blocks: parity with the dense mask, and the layers that refuse one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

import attnkit
from attnkit import masks
from attnkit.blocks import TransformerDecoder, TransformerDecoderLayer, TransformerEncoder
from attnkit.layers.additive import AdditiveAttention
from attnkit.layers.bert import BertSelfAttention
from attnkit.layers.image import SelfAttention2d
from attnkit.layers.linear import LinearAttention
from attnkit.layers.pooling import AttentionPooling
from attnkit.layers.relative import RelativePositionAttention, relative_attention

B, H, T, D = 2, 4, 40, 32
BS = 8  # small blocks: empty, full and partial blocks all occur
WINDOW = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(9))


def _block_and_dense(t: int = T) -> tuple[masks.BlockMask, Tensor]:
    bm = masks.create_block_mask(WINDOW, None, None, t, t, block_size=BS)
    dense = bm.to_dense()  # (1, 1, T, T)
    assert dense.dtype == torch.bool and 0 < int(dense.sum()) < t * t
    return bm, dense


def _x(t: int = T, seed: int = 0) -> Tensor:
    return torch.randn(B, t, D, generator=torch.Generator().manual_seed(seed))


def _run(fn: Callable[[Tensor], Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
    """Output and the input gradient for a fixed upstream gradient."""
    x = x.clone().requires_grad_()
    out = fn(x)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (grad,) = torch.autograd.grad(out, x, upstream)
    return out.detach(), grad


def _assert_same(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor]) -> None:
    for got, want in zip(a, b, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_block_mask_matches_the_dense_mask(norm_first: bool) -> None:
    torch.manual_seed(0)
    stack = TransformerEncoder(
        attnkit.blocks.TransformerEncoderLayer(D, H, 64, norm_first=norm_first), 2
    ).eval()
    bm, dense = _block_and_dense()
    x = _x()
    sparse = _run(lambda v: stack(v, mask=bm), x)
    assert attnkit.last_backend().name == "block-sparse"  # type: ignore[union-attr]
    _assert_same(sparse, _run(lambda v: stack(v, mask=dense), x))
    out, weights = stack(x, mask=bm, return_weights=True)
    ref, ref_weights = stack(x, mask=dense, return_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for w, w_ref in zip(weights, ref_weights, strict=True):
        torch.testing.assert_close(w, w_ref, atol=1e-5, rtol=1e-5)


def test_decoder_layer_self_attention_block_mask_matches_the_dense_mask() -> None:
    torch.manual_seed(0)
    layer = TransformerDecoderLayer(D, H, 64).eval()
    bm, dense = _block_and_dense()
    memory = _x(t=11, seed=2)
    memory_mask = masks.from_lengths(torch.tensor([11, 7]), 11)
    sparse = _run(lambda v: layer(v, memory, self_mask=bm, memory_mask=memory_mask, causal=False), _x())
    assert attnkit.last_backend() is not None
    dense_run = _run(lambda v: layer(v, memory, self_mask=dense, memory_mask=memory_mask, causal=False), _x())
    _assert_same(sparse, dense_run)
    causal_run = _run(lambda v: layer(v, memory, self_mask=dense, memory_mask=memory_mask), _x())
    _assert_same(sparse, causal_run)  # the window is causal, so causal=True adds nothing to the dense mask


def test_decoder_stack_takes_a_block_mask_and_refuses_causal_true() -> None:
    torch.manual_seed(0)
    decoder = TransformerDecoder(TransformerDecoderLayer(D, H, 64), 2).eval()
    bm, dense = _block_and_dense()
    memory = _x(t=11, seed=2)
    sparse = _run(lambda v: decoder(v, memory, self_mask=bm, causal=False), _x())
    _assert_same(sparse, _run(lambda v: decoder(v, memory, self_mask=dense, causal=False), _x()))
    with pytest.raises(ValueError, match=r"self_mask is a BlockMask: build causality into it"):
        decoder(_x(), memory, self_mask=bm)


def test_encoder_block_mask_for_other_shapes_is_refused_by_name() -> None:
    stack = TransformerEncoder(attnkit.blocks.TransformerEncoderLayer(D, H, 64), 2).eval()
    bm, _ = _block_and_dense(t=T + 1)
    with pytest.raises(ValueError, match=r"BlockMask built for \(B, H, Tq, Tk\)"):
        stack(_x(), mask=bm)
    band = masks.create_block_mask(masks.sliding_window_mod(9), None, None, T, T, block_size=BS)  # both ways
    causal_band = stack(_x(), mask=band, causal=True)  # the pairs the band and causality both allow
    torch.testing.assert_close(causal_band, stack(_x(), mask=band.to_dense(), causal=True))
    assert not torch.allclose(causal_band, stack(_x(), mask=band))


def test_padded_documents_go_into_the_block_mask() -> None:
    ids = torch.tensor([[0] * 25 + [1] * 15, [0] * 30 + [-1] * 10])  # example 2 padded after 30
    mod = masks.and_mods(WINDOW, masks.document_mod(ids))
    bm = masks.create_block_mask(mod, B, None, T, T, block_size=BS)
    torch.manual_seed(0)
    stack = TransformerEncoder(attnkit.blocks.TransformerEncoderLayer(D, H, 64), 2).eval()
    _assert_same(_run(lambda v: stack(v, mask=bm), _x()), _run(lambda v: stack(v, mask=bm.to_dense()), _x()))


def test_bert_and_image_attention_accept_a_block_mask() -> None:
    torch.manual_seed(0)
    bert = BertSelfAttention(D, H).eval()
    bm, dense = _block_and_dense()
    _assert_same(_run(lambda v: bert(v, mask=bm), _x()), _run(lambda v: bert(v, mask=dense), _x()))
    image = SelfAttention2d(16, reduction=2, num_heads=2).eval()
    with torch.no_grad():
        image.gamma.fill_(1.0)
    pix = torch.randn(B, 16, 5, 8, generator=torch.Generator().manual_seed(3))  # N = 40 positions
    first_30 = masks.create_block_mask(lambda b, h, qi, ki: (ki < 30) & (qi >= 0), None, None, T, T,
                                       block_size=BS)  # the same key mask as positions 0..29
    positions = (torch.arange(T) < 30).expand(B, T)  # (B, N)
    _assert_same(_run(lambda v: image(v, mask=first_30), pix), _run(lambda v: image(v, mask=positions), pix))


REFUSING: dict[str, Callable[[masks.BlockMask], object]] = {
    "AdditiveAttention": lambda bm: AdditiveAttention(D, D, 16)(_x(), _x(), mask=bm),
    "LinearAttention": lambda bm: LinearAttention(D, H)(_x(), mask=bm),
    "RelativePositionAttention": lambda bm: RelativePositionAttention(D, H, 4)(_x(), mask=bm),
    "relative_attention": lambda bm: relative_attention(
        *(torch.randn(B, H, T, 8) for _ in range(3)), torch.randn(9, 8), torch.randn(9, 8), mask=bm),  # type: ignore[arg-type]
    "AttentionPooling": lambda bm: AttentionPooling(D)(_x(), mask=bm),
}


@pytest.mark.parametrize("name", sorted(REFUSING))
def test_layers_that_cannot_use_a_block_mask_say_so_by_name(name: str) -> None:
    bm, _ = _block_and_dense()
    with pytest.raises(TypeError, match=rf"^{name} does not support a BlockMask"):
        REFUSING[name](bm)

