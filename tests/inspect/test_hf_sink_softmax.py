"""The sink softmax of Hugging Face captures (GPT-OSS) runs through the core's one masked softmax."""

import torch

from attnkit.inspect.hf import _sink_softmax


def test_sink_softmax_matches_the_formula_and_gives_a_masked_row_to_the_sink() -> None:
    torch.manual_seed(0)
    scores, sinks = torch.randn(2, 3, 4, 5), torch.randn(3)
    keep = torch.rand(2, 1, 4, 5) > 0.3
    keep[1, 0, 2] = False  # a query with no key: the sink takes all its weight
    logits = torch.cat([scores.masked_fill(~keep, float("-inf")), sinks.view(1, 3, 1, 1).expand(2, 3, 4, 1)], -1)
    expected = torch.softmax(logits, dim=-1)[..., :-1]
    got = _sink_softmax(scores, keep, sinks)
    torch.testing.assert_close(got, expected)
    assert torch.equal(got[1, :, 2], torch.zeros(3, 5))
    torch.testing.assert_close(_sink_softmax(scores, None, sinks),
                               torch.softmax(torch.cat([scores, sinks.view(1, 3, 1, 1).expand(2, 3, 4, 1)], -1),
                                             dim=-1)[..., :-1])
