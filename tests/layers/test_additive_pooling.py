"""AdditiveAttention and AttentionPooling against readable references, masks and bad input."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import masks
from attnkit.layers.additive import AdditiveAttention
from attnkit.layers.pooling import AttentionPooling


def loop_additive(layer: AdditiveAttention, s: torch.Tensor, h: torch.Tensor,
                  valid: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
    """One query, one key at a time: e_j = v . tanh(W_q s + W_k h_j + b); softmax over valid j."""
    wq, wk, bk = layer.query_proj.weight, layer.key_proj.weight, layer.key_proj.bias
    v = layer.score.weight[0]
    scores = []
    with torch.no_grad():
        for j in range(h.shape[0]):
            scores.append(float(v @ torch.tanh(wq @ s + wk @ h[j] + bk)))
    exps = [math.exp(e) if ok else 0.0 for e, ok in zip(scores, valid, strict=True)]
    total = sum(exps)
    alpha = torch.tensor([x / total if total else 0.0 for x in exps], dtype=torch.float64)
    context = sum(alpha[j] * h[j] for j in range(h.shape[0]))
    return torch.as_tensor(context, dtype=torch.float64), alpha


# ---------------------------------------------------------------- additive attention


def test_additive_matches_loop_reference_with_mask() -> None:
    layer = AdditiveAttention(4, 6, 5).double()
    query, keys = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 7, 6, dtype=torch.float64)
    lengths = [7, 3, 1]
    key_mask = masks.from_lengths(lengths, 7)[:, 0, 0]  # (B, Tk)
    context, weights = layer(query, keys, mask=key_mask, return_weights=True)
    assert context.shape == (3, 6) and weights.shape == (3, 7)
    for b in range(3):
        ref_c, ref_w = loop_additive(layer, query[b], keys[b], key_mask[b].tolist())
        torch.testing.assert_close(weights[b], ref_w, atol=1e-12, rtol=1e-10)
        torch.testing.assert_close(context[b], ref_c, atol=1e-12, rtol=1e-10)
    # masked keys carry exactly zero weight, rows sum to one
    assert (weights[~key_mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=torch.float64))


def test_additive_separate_values_and_query_sequence() -> None:
    layer = AdditiveAttention(4, 6, 5, value_dim=3)
    query, keys, values = torch.randn(2, 5, 4), torch.randn(2, 7, 6), torch.randn(2, 7, 3)
    mask = torch.rand(2, 5, 7) > 0.3
    mask[1, 2] = False  # one query with no key at all
    context, weights = layer(query, keys, values, mask=mask, return_weights=True)
    assert context.shape == (2, 5, 3) and weights.shape == (2, 5, 7)
    sums = weights.sum(-1)
    assert torch.allclose(sums[mask.any(-1)], torch.ones(()), atol=1e-6)
    assert (weights[~mask] == 0).all() and (context[1, 2] == 0).all()
    # each query row equals the 2-D call for that query alone
    for t in range(5):
        c_t, w_t = layer(query[:, t], keys, values, mask=mask[:, t], return_weights=True)
        torch.testing.assert_close(c_t, context[:, t])
        torch.testing.assert_close(w_t, weights[:, t])
    torch.testing.assert_close(context, weights @ values)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), tq=st.integers(1, 4), tk=st.integers(1, 8),
       keep=st.floats(0.0, 1.0))
def test_additive_weights_rows_sum_to_one_or_zero(seed: int, tq: int, tk: int, keep: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    layer = AdditiveAttention(3, 4, 5)
    query, keys = torch.randn(2, tq, 3, generator=gen), torch.randn(2, tk, 4, generator=gen)
    mask = torch.rand(2, tq, tk, generator=gen) < keep
    context, weights = layer(query, keys, mask=mask, return_weights=True)
    sums = weights.sum(-1)
    has_key = mask.any(-1)
    assert torch.allclose(sums[has_key], torch.ones(()), atol=1e-6)
    assert (sums[~has_key] == 0).all() and (context[~has_key] == 0).all()
    assert (weights[~mask] == 0).all() and (weights >= 0).all()


def test_additive_projected_keys_reused_gives_same_result() -> None:
    layer = AdditiveAttention(4, 6, 5)
    keys = torch.randn(2, 7, 6)
    projected = layer.project_keys(keys)
    assert projected.shape == (2, 7, 5)
    for _ in range(3):  # a decoder reuses the projection at every step
        s = torch.randn(2, 4)
        a = layer(s, keys, projected_keys=projected, return_weights=True)
        b = layer(s, keys, return_weights=True)
        torch.testing.assert_close(a[0], b[0])
        torch.testing.assert_close(a[1], b[1])


def test_additive_gradients_reach_every_parameter() -> None:
    layer = AdditiveAttention(4, 6, 5)
    query = torch.randn(2, 4, requires_grad=True)
    keys = torch.randn(2, 7, 6, requires_grad=True)
    context, weights = layer(query, keys, mask=torch.rand(2, 7) > 0.2, return_weights=True)
    (context.square().sum() + weights[:, 0].sum()).backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert query.grad is not None and query.grad.abs().sum() > 0
    assert keys.grad is not None and keys.grad.abs().sum() > 0


def test_additive_fully_masked_row_zero_context_zero_grad_no_nan() -> None:
    layer = AdditiveAttention(4, 6, 5)
    query = torch.randn(2, 4, requires_grad=True)
    keys = torch.randn(2, 7, 6, requires_grad=True)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1] = False
    context, weights = layer(query, keys, mask=mask, return_weights=True)
    assert (context[1] == 0).all() and (weights[1] == 0).all()
    context[1].sum().backward(retain_graph=True)
    assert query.grad is not None and keys.grad is not None
    assert (query.grad == 0).all() and (keys.grad == 0).all()
    for p in layer.parameters():
        assert p.grad is not None and (p.grad == 0).all() and not p.grad.isnan().any()
    # the valid row still gets gradients
    context[0].sum().backward()
    assert query.grad[0].abs().sum() > 0 and (query.grad[1] == 0).all()


def test_additive_half_precision_no_nan() -> None:
    layer = AdditiveAttention(4, 6, 5).to(torch.bfloat16)
    keys = torch.randn(2, 7, 6, dtype=torch.bfloat16)
    mask = torch.tensor([[True] * 7, [False] * 7])
    context, weights = layer(torch.randn(2, 4, dtype=torch.bfloat16), keys, mask=mask, return_weights=True)
    assert context.dtype == torch.bfloat16 and not context.isnan().any()
    assert (weights[1] == 0).all()
    assert abs(float(weights[0].detach().float().sum()) - 1.0) < 1e-2


def test_additive_accepts_from_lengths_mask() -> None:
    layer = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    a = layer(query, keys, mask=masks.from_lengths([7, 2]), return_weights=True)  # (B, 1, 1, Tk)
    b = layer(query, keys, mask=masks.from_lengths([7, 2])[:, 0, 0], return_weights=True)  # (B, Tk)
    torch.testing.assert_close(a[1], b[1])
    assert (a[1][1, :, 2:] == 0).all()


@pytest.mark.parametrize(
    "args, kwargs, error, text",
    [
        ((torch.randn(2, 4, 1, 1), torch.randn(2, 7, 6)), {}, ValueError, "query"),
        ((torch.randn(2, 3), torch.randn(2, 7, 6)), {}, ValueError, "query must be (B, 4)"),
        ((torch.randn(2, 4), torch.randn(2, 7, 5)), {}, ValueError, "key must be (B, Tk, 6)"),
        ((torch.randn(3, 4), torch.randn(2, 7, 6)), {}, ValueError, "B=3"),
        ((torch.randn(2, 4), torch.randn(2, 7, 6), torch.randn(2, 6, 6)), {}, ValueError, "value must be (B, Tk, Dv)"),
        ((torch.randn(2, 4), torch.randn(2, 7, 6)), {"mask": torch.ones(2, 7)}, TypeError, "boolean"),
        ((torch.randn(2, 4), torch.randn(2, 7, 6)), {"mask": torch.ones(2, 6, dtype=torch.bool)},
         ValueError, "AdditiveAttention mask of shape (2, 6) does not broadcast to (B, H, Tq, Tk) = (2, 1, 1, 7)"),
        ((torch.randn(2, 4), torch.randn(2, 7, 6)), {"projected_keys": torch.randn(2, 7, 4)},
         ValueError, "projected_keys"),
        ((torch.ones(2, 4, dtype=torch.long), torch.randn(2, 7, 6)), {}, TypeError, "floating"),
        (([1.0] * 4, torch.randn(2, 7, 6)), {}, TypeError, "torch.Tensor"),
    ],
)
def test_additive_bad_input(args: tuple, kwargs: dict, error: type, text: str) -> None:
    layer = AdditiveAttention(4, 6, 5)
    with pytest.raises(error, match=re.escape(text)):
        layer(*args, **kwargs)


@pytest.mark.parametrize("kwargs", [{"query_dim": 0}, {"hidden_dim": -1}, {"key_dim": 2.0},
                                    {"value_dim": 0}, {"query_dim": True}])
def test_additive_bad_constructor(kwargs: dict) -> None:
    full: dict = {"query_dim": 4, "key_dim": 6, "hidden_dim": 5} | kwargs
    value_dim = full.pop("value_dim", None)
    with pytest.raises(ValueError, match="must be a positive int"):
        AdditiveAttention(full["query_dim"], full["key_dim"], full["hidden_dim"], value_dim=value_dim)


# ---------------------------------------------------------------- attention pooling


@pytest.mark.parametrize("hidden_dim", [None, 7])
def test_pooling_is_weighted_sum_with_masked_positions_zero(hidden_dim: int | None) -> None:
    pool = AttentionPooling(5, hidden_dim=hidden_dim).double()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    mask = masks.from_lengths([6, 4, 1], 6)[:, 0, 0]  # (B, T)
    out, weights = pool(x, mask=mask, return_weights=True)
    assert out.shape == (3, 5) and weights.shape == (3, 6)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(out, torch.einsum("bt,btd->bd", weights, x))
    # readable reference of the score: s_t = u . tanh(W x_t + b), or w . x_t
    hidden = x if pool.proj is None else torch.tanh(x @ pool.proj.weight.T + pool.proj.bias)
    scores = hidden @ pool.score.weight[0]
    ref = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    torch.testing.assert_close(weights, ref)
    # padding content cannot leak into the output
    x2 = x.clone()
    x2[~mask] = 1e3
    torch.testing.assert_close(pool(x2, mask=mask), out)
    assert torch.equal(pool(x, mask=mask), out)  # weights on request never change the output


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), t=st.integers(1, 9), hidden=st.sampled_from([None, 4]))
def test_pooling_permutation_invariant(seed: int, t: int, hidden: int | None) -> None:
    gen = torch.Generator().manual_seed(seed)
    pool = AttentionPooling(5, hidden_dim=hidden).double()
    x = torch.randn(2, t, 5, generator=gen, dtype=torch.float64)
    perm = torch.randperm(t, generator=gen)
    out, w = pool(x, return_weights=True)
    out_p, w_p = pool(x[:, perm], return_weights=True)
    torch.testing.assert_close(w_p, w[:, perm])
    torch.testing.assert_close(out_p, out)


def test_pooling_all_masked_row_zero_output_zero_grad() -> None:
    pool = AttentionPooling(5, hidden_dim=4)
    x = torch.randn(2, 6, 5, requires_grad=True)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0] = False
    out, weights = pool(x, mask=mask, return_weights=True)
    assert (out[0] == 0).all() and (weights[0] == 0).all()
    out[0].sum().backward(retain_graph=True)
    assert x.grad is not None and (x.grad == 0).all()
    assert all(p.grad is not None and (p.grad == 0).all() for p in pool.parameters())
    out[1].sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pool.parameters())


def test_pooling_multiple_queries() -> None:
    pool = AttentionPooling(5, hidden_dim=4, num_queries=3)
    x = torch.randn(2, 6, 5)
    mask = masks.from_lengths([6, 2])  # (B, 1, 1, T) is accepted too
    out, weights = pool(x, mask=mask, return_weights=True)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 6)
    assert (weights[1, :, 2:] == 0).all()
    torch.testing.assert_close(out, weights @ x)
    assert not torch.allclose(weights[0, 0], weights[0, 1])  # distinct learned queries


@pytest.mark.parametrize(
    "x, mask, error, text",
    [
        (torch.randn(2, 6), None, ValueError, "x must be (B, T, 5)"),
        (torch.randn(2, 6, 4), None, ValueError, "got shape (2, 6, 4)"),
        (torch.ones(2, 6, 5, dtype=torch.long), None, TypeError, "floating"),
        (torch.randn(2, 6, 5), torch.ones(2, 6), TypeError, "boolean"),
        (torch.randn(2, 6, 5), torch.ones(2, 5, dtype=torch.bool), ValueError,
         "does not broadcast to (B, H, Tq, Tk) = (2, 1, 1, 6)"),
        (torch.randn(2, 6, 5), torch.ones(3, 6, dtype=torch.bool), ValueError,
         "AttentionPooling mask of shape (3, 6) is neither"),
    ],
)
def test_pooling_bad_input(x: torch.Tensor, mask: torch.Tensor | None, error: type, text: str) -> None:
    with pytest.raises(error, match=re.escape(text)):
        AttentionPooling(5)(x, mask=mask)


@pytest.mark.parametrize("kwargs", [{"d_model": 0}, {"hidden_dim": 0}, {"num_queries": 0},
                                    {"num_queries": True}])
def test_pooling_bad_constructor(kwargs: dict) -> None:
    full: dict = {"d_model": 5} | kwargs
    d = full.pop("d_model")
    with pytest.raises(ValueError, match="must be a positive int"):
        AttentionPooling(d, **full)


def test_additive_returns_the_context_alone_unless_weights_are_asked_for() -> None:
    layer = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    context = layer(query, keys)
    assert isinstance(context, torch.Tensor) and context.shape == (2, 3, 6)
    again, weights = layer(query, keys, return_weights=True)
    assert torch.equal(again, context) and weights.shape == (2, 3, 7)
