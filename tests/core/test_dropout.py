"""The one dropout of the attention kernels and the BERT models (``apply_dropout``, ``layers.multi_head.Dropout``)."""

import pytest
import torch

from attnkit.core.kernels.dense import apply_dropout
from attnkit.layers.multi_head import Dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drops_at_the_rate_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    x = torch.ones(1001, 997)  # an odd count: the last 64-bit draw is used in part
    out = apply_dropout(x, p)
    kept = out != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.003
    cut = round(p * 65536)
    assert torch.all(out[kept] == 65536 / (65536 - cut))
    assert abs(out.mean().item() - 1.0) < 0.01


def test_every_lane_of_a_draw_is_uniform():
    # the four 16-bit numbers of one 64-bit draw each drop at the rate (a sign bit left at 0 would not)
    torch.manual_seed(1)
    kept = apply_dropout(torch.ones(400_000, 4), 0.25) != 0
    for lane in range(4):
        assert abs(1 - kept[:, lane].float().mean().item() - 0.25) < 0.005


def test_seeded_alike_and_gradients_follow_the_mask():
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16, requires_grad=True)
    torch.manual_seed(2)
    a = apply_dropout(x, 0.3)
    torch.manual_seed(2)
    b = apply_dropout(x, 0.3)
    assert torch.equal(a, b) and a.dtype == torch.bfloat16
    a.sum().backward()
    assert torch.equal(x.grad != 0, a != 0)


def test_the_edges_of_p_and_the_module():
    x = torch.randn(4, 6)
    assert apply_dropout(x, 0.0) is x
    assert torch.equal(apply_dropout(x, 1.0), torch.zeros_like(x))
    assert torch.equal(apply_dropout(x, 1 - 1 / 200_000), torch.zeros_like(x))  # rounds to 1: all dropped
    layer = Dropout(0.5)
    assert torch.equal(layer.eval()(x), x)
    assert (layer.train()(torch.ones(1000)) == 0).sum() > 400
