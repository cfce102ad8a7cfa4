"""The NumPy twin's block-sparse chunked attention: the same block structure as a torch BlockMask,
the same skipped blocks, gradient-checked, equal to the dense readable path and to PyTorch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from attnkit import masks
from attnkit.core.functional import attention
from attnkit.core.kernels.tiles import block_kinds
from attnkit.reference import BlockLayout, block_layout
from attnkit.reference.attention import attention_backward, attention_forward
from attnkit.reference.block_sparse import _query_blocks
from attnkit.reference.checking import module_gradcheck
from attnkit.reference.chunked import (
    ChunkedAttention,
    chunked_attention_backward,
    chunked_attention_forward,
)

B, H, T, DH, BS = 2, 2, 40, 8, 8
IDS = torch.tensor([0] * 10 + [1] * 15 + [2] * 12 + [-1] * 3)


def _random(bi: torch.Tensor, hi: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
    return (torch.rand(B, H, T, T, generator=torch.Generator().manual_seed(5)) < 0.25)[bi, hi, qi, ki]


MODS: dict[str, tuple[Callable[..., torch.Tensor], int | None, int | None]] = {
    "causal": (masks.causal_mod, None, None),
    "causal_window": (masks.and_mods(masks.causal_mod, masks.sliding_window_mod(9)), None, None),
    "document": (masks.document_mod(IDS), None, None),
    "prefix_lm": (masks.prefix_lm_mod(12), None, None),
    "random": (_random, B, H),
}


def _layout(name: str) -> tuple[masks.BlockMask, BlockLayout]:
    mod, b, h = MODS[name]
    bm = masks.create_block_mask(mod, b, h, T, T, block_size=BS)
    return bm, BlockLayout.from_arrays(BS, (T, T), block_kinds(bm).numpy(), bm.elements.numpy())


def _qkv(dtype: type, hkv: int = H) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((B, H, T, DH)).astype(dtype), rng.standard_normal((B, hkv, T, DH)).astype(dtype),
            rng.standard_normal((B, hkv, T, DH)).astype(dtype))


@pytest.mark.parametrize("name", sorted(MODS))
def test_equals_the_dense_readable_path_and_pytorch(name: str) -> None:
    bm, layout = _layout(name)
    assert np.array_equal(layout.to_dense(), bm.to_dense().numpy())
    q, k, v = _qkv(np.float64, hkv=1)
    dense = layout.to_dense()
    out, lse = chunked_attention_forward(q, k, v, blocks=layout)
    ref, cache = attention_forward(q, k, v, mask=dense)
    np.testing.assert_allclose(out, ref, atol=1e-10)
    grad = np.random.default_rng(1).standard_normal(out.shape)
    got = chunked_attention_backward(grad, q, k, v, out, lse, blocks=layout)
    want = attention_backward(grad, cache)
    for g, w in zip(got[:3], want[:3], strict=True):
        np.testing.assert_allclose(g, w, atol=1e-10)
    assert got[3] is None
    # float32 against the torch block-sparse path, outputs and gradients
    q32, k32, v32 = (torch.tensor(x, dtype=torch.float32, requires_grad=True) for x in (q, k, v))
    t_out = attention(q32, k32, v32, mask=bm)
    t_grads = torch.autograd.grad(t_out, (q32, k32, v32), torch.tensor(grad, dtype=torch.float32))
    out32, lse32 = chunked_attention_forward(*(x.detach().numpy() for x in (q32, k32, v32)), blocks=layout)
    np.testing.assert_allclose(out32, t_out.detach().numpy(), atol=1e-5)
    got32 = chunked_attention_backward(grad.astype(np.float32), *(x.detach().numpy() for x in (q32, k32, v32)),
                                       out32, lse32, blocks=layout)
    for g, w in zip(got32[:3], t_grads, strict=True):
        np.testing.assert_allclose(g, w.numpy(), atol=1e-5)


@pytest.mark.parametrize("name", ["causal_window", "document", "random"])
def test_gradcheck(name: str) -> None:
    _, layout = _layout(name)
    attn = ChunkedAttention()
    q, k, v = _qkv(np.float64)

    def call(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        return attn.forward(q, k, v, blocks=layout)

    assert module_gradcheck(attn, {"q": q, "k": k, "v": v}, call).worst < 1e-6


def test_skips_the_empty_blocks_and_zeroes_rows_without_keys() -> None:
    bm, layout = _layout("causal_window")
    computed = sum(keys.size for _, keys, _ in _query_blocks(layout, 0, 0, T)) // BS
    assert computed == bm.counts["full"] + bm.counts["partial"] < (T // BS) ** 2
    _, doc = _layout("document")  # the last 3 positions are padding: no key at all
    q, k, v = _qkv(np.float64)
    out, lse = chunked_attention_forward(q, k, v, blocks=doc)
    assert np.all(out[:, :, 37:] == 0) and np.all(np.isinf(lse[:, :, 37:]))
    dq, _, _, _ = chunked_attention_backward(np.ones_like(out), q, k, v, out, lse, blocks=doc)
    assert np.all(dq[:, :, 37:] == 0) and np.isfinite(dq).all()


def test_numpy_mask_mod_gives_the_same_layout() -> None:
    bm = masks.create_block_mask(masks.prefix_lm_mod(12), None, None, T, T, block_size=BS)
    layout = block_layout(lambda b, h, qi, ki: (ki < 12) | (ki <= qi), None, None, T, T, block_size=BS)
    assert np.array_equal(layout.kinds, block_kinds(bm).numpy())
    assert np.array_equal(layout.elements, bm.elements.numpy())


def test_bad_layouts() -> None:
    q, k, v = _qkv(np.float64)
    _, layout = _layout("causal")
    with pytest.raises(ValueError, match="blocks= takes neither"):
        chunked_attention_forward(q, k, v, blocks=layout, causal=True)
    with pytest.raises(ValueError, match="cannot be used with"):
        chunked_attention_forward(q[:, :, :32], k[:, :, :32], v[:, :, :32], blocks=layout)
    with pytest.raises(ValueError, match="kinds must be"):
        BlockLayout.from_arrays(BS, (T, T), np.zeros((1, 1, 2, 5), np.int64), layout.elements)
    with pytest.raises(ValueError, match="kinds must lie in"):
        BlockLayout.from_arrays(BS, (T, T), layout.kinds + 100, layout.elements)
    with pytest.raises(TypeError, match="bool array"):
        block_layout(lambda b, h, qi, ki: ki - qi, None, None, T, T, block_size=BS)
    with pytest.raises(TypeError, match="must be a BlockLayout"):
        chunked_attention_forward(q, k, v, blocks="causal")  # type: ignore[arg-type]
