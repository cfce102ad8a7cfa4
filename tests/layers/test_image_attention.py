"""SelfAttention2d (SAGAN) against a readable einsum reference, its identity start and bad input."""

from __future__ import annotations

import re

import pytest
import torch

from attnkit.core.functional import last_backend
from attnkit.layers.image import SelfAttention2d


def reference_sagan(layer: SelfAttention2d, x: torch.Tensor,
                    keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's equations with einsum: s_ij = f(x_i)^T g(x_j), beta_j = softmax_i, o_j = sum_i beta_ji h(x_i)."""
    b, c, hh, ww = x.shape
    n, heads = hh * ww, layer.num_heads

    def conv1x1(conv: torch.nn.Conv2d, t: torch.Tensor) -> torch.Tensor:
        weight = conv.weight[:, :, 0, 0]  # (out, C)
        assert conv.bias is not None
        return torch.einsum("oc,bcn->bon", weight, t.reshape(b, c, n)) + conv.bias[None, :, None]

    g = conv1x1(layer.query_conv, x).reshape(b, heads, -1, n)  # queries, (B, heads, d, N)
    f = conv1x1(layer.key_conv, x).reshape(b, heads, -1, n)  # keys
    h = conv1x1(layer.value_conv, x).reshape(b, heads, -1, n)  # values
    scores = torch.einsum("bedj,bedi->beji", g, f) * layer.scale  # (B, heads, N query j, N key i)
    if keep is not None:
        scores = scores.masked_fill(~keep.reshape(b, 1, 1, n), float("-inf"))
    beta = torch.softmax(scores, dim=-1)
    o = torch.einsum("beji,bedi->bedj", beta, h).reshape(b, c, hh, ww)
    return x + layer.gamma * o, beta


def test_identity_at_init_and_shape() -> None:
    layer = SelfAttention2d(16)
    x = torch.randn(2, 16, 5, 3)
    y, w = layer(x, return_weights=True)
    choice = last_backend()
    assert choice is not None and choice.name == "fused"  # the output comes from the fused kernel
    assert y.shape == x.shape and torch.equal(y, x)
    assert w.shape == (2, 15, 15)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 15))


@pytest.mark.parametrize("heads, scaled", [(1, False), (2, False), (2, True)])
def test_matches_einsum_reference(heads: int, scaled: bool) -> None:
    layer = SelfAttention2d(16, reduction=4, num_heads=heads, scaled=scaled).double()
    with torch.no_grad():
        layer.gamma.fill_(0.7)
    x = torch.randn(2, 16, 4, 3, dtype=torch.float64)
    y, w = layer(x, return_weights=True, average_heads=False)
    ref_y, ref_w = reference_sagan(layer, x)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(w, ref_w)
    assert w.shape == (2, heads, 12, 12)
    y_avg, w_avg = layer(x, return_weights=True)
    torch.testing.assert_close(w_avg, ref_w.mean(1))
    assert torch.equal(layer(x), y) and torch.equal(y_avg, y)  # weights never change the output
    assert not torch.allclose(y, x)


def test_position_mask_matches_reference_and_zero_weight() -> None:
    layer = SelfAttention2d(8, reduction=2).double()
    with torch.no_grad():
        layer.gamma.fill_(-1.3)
    x = torch.randn(2, 8, 3, 4, dtype=torch.float64)
    keep = torch.rand(2, 3, 4) > 0.4
    keep[:, 0, 0] = True
    y, w = layer(x, mask=keep, return_weights=True)
    ref_y, ref_w = reference_sagan(layer, x, keep)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(w, ref_w[:, 0])
    assert (w.transpose(1, 2)[~keep.reshape(2, 12)] == 0).all()  # no query looks at a masked position
    y_flat = layer(x, mask=keep.reshape(2, 12))
    torch.testing.assert_close(y_flat, y)
    # with no position allowed, o = 0 and the block is the identity
    none_allowed = torch.zeros(2, 3, 4, dtype=torch.bool)
    assert torch.equal(layer(x, mask=none_allowed), x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_close_to_float32_and_no_nan(dtype: torch.dtype) -> None:
    layer = SelfAttention2d(16, reduction=4, num_heads=2)
    with torch.no_grad():
        layer.gamma.fill_(1.0)
    x = torch.randn(2, 16, 4, 4)
    keep = torch.ones(2, 4, 4, dtype=torch.bool)
    keep[1] = False  # the second map has no position to attend to
    y32, w32 = layer(x, mask=keep, return_weights=True)
    half = SelfAttention2d(16, reduction=4, num_heads=2).to(dtype)
    half.load_state_dict(layer.state_dict())
    y, w = half(x.to(dtype), mask=keep, return_weights=True)
    assert y.dtype == dtype and not y.isnan().any() and not w.isnan().any()
    torch.testing.assert_close(y.float(), y32, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(w.float(), w32, atol=1e-2, rtol=5e-2)
    assert torch.equal(y[1], x[1].to(dtype)) and (w[1] == 0).all()


def test_gradients() -> None:
    layer = SelfAttention2d(8, reduction=2)
    x = torch.randn(2, 8, 3, 3, requires_grad=True)
    layer(x).square().sum().backward()
    assert layer.gamma.grad is not None and layer.gamma.grad.abs().item() > 0
    # at gamma = 0 the attention branch is switched off, so only gamma learns at first
    assert layer.query_conv.weight.grad is not None and (layer.query_conv.weight.grad == 0).all()
    layer.zero_grad()
    with torch.no_grad():
        layer.gamma.fill_(0.5)
    layer(x).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "x, mask, error, text",
    [
        (torch.randn(2, 8, 3), None, ValueError, "x must be (B, 8, H, W)"),
        (torch.randn(2, 6, 3, 3), None, ValueError, "got shape (2, 6, 3, 3)"),
        (torch.ones(2, 8, 3, 3, dtype=torch.long), None, TypeError, "floating"),
        ([[1.0]], None, TypeError, "torch.Tensor"),
        (torch.randn(2, 8, 3, 3), torch.ones(2, 3, 3), TypeError, "boolean"),
        (torch.randn(2, 8, 3, 3), torch.ones(2, 3, 4, dtype=torch.bool), ValueError,
         "SelfAttention2d mask of shape (2, 3, 4) does not broadcast to (B, H, Tq, Tk) = (2, 1, 9, 9)"),
        (torch.randn(2, 8, 3, 3), torch.ones(2, 8, dtype=torch.bool), ValueError,
         "SelfAttention2d mask of shape (2, 8) does not broadcast"),
    ],
)
def test_bad_input(x: object, mask: torch.Tensor | None, error: type, text: str) -> None:
    with pytest.raises(error, match=re.escape(text)):
        SelfAttention2d(8, reduction=2)(x, mask=mask)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"in_channels": 0}, "in_channels must be a positive int"),
        ({"in_channels": 4, "reduction": 8}, "(which must be >= 1)"),
        ({"in_channels": 16, "reduction": 8, "num_heads": 4}, "num_heads=4 must divide"),
        ({"in_channels": 16, "reduction": 0}, "reduction must be a positive int"),
    ],
)
def test_bad_constructor(kwargs: dict, text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(text)):
        SelfAttention2d(**kwargs)
