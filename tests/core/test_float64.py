"""float64 in, float64 out: every block-sparse kernel keeps float64 (log-sum-exp included) forward and backward."""

from __future__ import annotations

import pytest
import torch

from attnkit import masks
from attnkit.core.functional import attention, last_backend
from attnkit.core.score_mods import bias_mod, soft_cap_mod

B, H, T, D = 2, 2, 40, 8
_BIAS = torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def _bias(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return _BIAS[0, h, q, k]


# case -> (mask mod, score mod, the kernel route it takes)
CASES = {
    "runs": (masks.and_mods(masks.causal_mod, masks.sliding_window_mod(7)), None, "runs"),
    "gather": (lambda b, h, q, k: (q + k) % 3 != 0, None, "gather"),  # with the weights asked for
    "fused bias tiles": (masks.causal_mod, bias_mod(_bias), "tiles"),
    "step-by-step tiles": (masks.causal_mod, soft_cap_mod(0.7), "tiles"),
}


def _reference(q, k, v, allowed, score_mod):  # (B, H, T, T) dense float64 softmax
    s = q @ k.transpose(-1, -2) / D ** 0.5
    if score_mod is not None:
        idx = torch.meshgrid(torch.arange(B), torch.arange(H), torch.arange(T), torch.arange(T), indexing="ij")
        s = score_mod(s, *idx)
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def _attend(q, k, v, bm, score_mod, route):
    if route == "gather":
        out, weights = attention(q, k, v, mask=bm, score_mod=score_mod, return_weights=True)
        assert weights.dtype == torch.float64
        return out
    return attention(q, k, v, mask=bm, score_mod=score_mod)


@pytest.mark.parametrize("route", list(CASES))
def test_block_mask_attention_in_float64_equals_the_dense_reference_to_1e_10(route):
    mod, score_mod, kernel = CASES[route]
    torch.manual_seed(0)
    bm = masks.create_block_mask(mod, None, None, T, T, block_size=8)
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = _attend(q, k, v, bm, score_mod, route)
    choice = last_backend()
    assert choice is not None and choice.route == kernel
    assert out.dtype == torch.float64
    want = _reference(q, k, v, bm.to_dense()[:1, :1].expand(B, H, T, T), score_mod)
    g = torch.randn_like(out)
    got_grads = torch.autograd.grad(out, (q, k, v), g)
    want_grads = torch.autograd.grad(want, (q, k, v), g)
    assert (out - want).abs().max() < 1e-10
    for got_g, want_g in zip(got_grads, want_grads, strict=True):
        assert got_g.dtype == torch.float64 and (got_g - want_g).abs().max() < 1e-10


@pytest.mark.parametrize("route", list(CASES))
def test_block_mask_attention_passes_gradcheck(route):
    mod, score_mod, _ = CASES[route]
    torch.manual_seed(1)
    t = 12
    bm = masks.create_block_mask(mod, None, None, t, t, block_size=4)
    q, k, v = (torch.randn(1, H, t, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    if score_mod is not None and route == "fused bias tiles":
        score_mod = bias_mod(lambda b, h, qi, ki: _BIAS[0, h, qi, ki])
    assert torch.autograd.gradcheck(lambda q, k, v: _attend(q, k, v, bm, score_mod, route), (q, k, v))
