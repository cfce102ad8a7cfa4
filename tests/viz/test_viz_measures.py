"""Measures of attention against small cases worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnkit.viz.measures import (
    attention_entropy,
    attention_focus,
    attention_rollout,
    most_attended,
)


def test_entropy_matches_hand_values_and_skips_masked_rows() -> None:
    w = np.array([[[0.5, 0.5, 0.0, 0.0],
                   [1.0, 0.0, 0.0, 0.0],
                   [0.25, 0.25, 0.25, 0.25],
                   [0.0, 0.0, 0.0, 0.0]]])  # (H=1, Tq=4, Tk=4); last query fully masked
    rows = attention_entropy(w, reduce="none")
    assert rows.shape == (1, 4)
    np.testing.assert_allclose(rows[0, :3], [math.log(2), 0.0, math.log(4)])
    assert np.isnan(rows[0, 3])
    np.testing.assert_allclose(attention_entropy(w), [(math.log(2) + math.log(4)) / 3])
    only_first = attention_entropy(w, query_mask=np.array([True, False, False, False]))
    np.testing.assert_allclose(only_first, [math.log(2)])


def test_entropy_per_layer_and_head_of_torch_weights() -> None:
    w = torch.softmax(torch.randn(3, 2, 5, 5, dtype=torch.float64), dim=-1)  # (L, H, Tq, Tk)
    got = attention_entropy(w)
    assert got.shape == (3, 2)
    want = (-(w * w.log()).sum(-1)).mean(-1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(got <= math.log(5) + 1e-12)


def test_rollout_two_layers_by_hand_and_in_order() -> None:
    layer1 = np.array([[[1.0, 0.0], [1.0, 0.0]]])  # (H=1, T, T): everyone reads token 0
    layer2 = np.array([[[0.0, 1.0], [0.0, 1.0]]])  # everyone reads token 1
    # A1 = norm(W1 + I) = [[1, 0], [.5, .5]]; A2 = [[.5, .5], [0, 1]]; R = A2 @ A1
    got = attention_rollout([layer1, layer2])
    np.testing.assert_allclose(got, [[0.75, 0.25], [0.5, 0.5]])
    reversed_order = attention_rollout([layer2, layer1])
    np.testing.assert_allclose(reversed_order, [[0.5, 0.5], [0.25, 0.75]])
    # without the residual term, the last layer alone decides: everything flows from token 0
    np.testing.assert_allclose(attention_rollout([layer1, layer2], residual=False),
                               [[1.0, 0.0], [1.0, 0.0]])


def test_rollout_averages_heads_and_handles_batches() -> None:
    heads = np.array([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]])  # (H=2, T, T)
    # mean = all 0.5; + I and renormalise = [[.75, .25], [.25, .75]]; squared for two layers
    np.testing.assert_allclose(attention_rollout(np.stack([heads, heads])),
                               [[0.625, 0.375], [0.375, 0.625]])
    rng = np.random.default_rng(0)
    w = rng.random((4, 3, 2, 6, 6))  # (L, B, H, T, T)
    w /= w.sum(-1, keepdims=True)
    r = attention_rollout(w)
    assert r.shape == (3, 6, 6)
    np.testing.assert_allclose(r.sum(-1), 1.0)
    np.testing.assert_allclose(r[1], attention_rollout(w[:, 1]))


def test_rollout_rejects_cross_attention_and_wrong_ranks() -> None:
    with pytest.raises(ValueError, match="attentions"):
        attention_rollout(np.ones((2, 2, 3, 4)) / 4)
    with pytest.raises(ValueError, match=r"\(L, H, T, T\)"):
        attention_rollout(np.ones((3, 3)) / 3)


def test_focus_share_on_key_positions() -> None:
    w = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(attention_focus(w, [0], reduce="none")[:2], [0.7, 0.1])
    assert np.isnan(attention_focus(w, [0], reduce="none")[2])
    np.testing.assert_allclose(attention_focus(w, [0]), 0.4)
    gold = np.array([[True, False, False], [False, False, True], [True, False, False]])
    np.testing.assert_allclose(attention_focus(w, gold), 0.75)  # (0.7 + 0.8) / 2
    with pytest.raises(ValueError, match="key_positions"):
        attention_focus(w, [5])


def test_most_attended_ranks_keys_by_received_attention() -> None:
    w = np.array([[[0.1, 0.6, 0.3], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]])
    top = most_attended(w, k=2, tokens=["a", "b", "c"])
    assert [(i, t) for i, t, _ in top] == [(1, "b"), (2, "c")]
    np.testing.assert_allclose([s for *_, s in top], [0.55, 0.4])  # the masked row is left out
    with pytest.raises(ValueError, match="tokens"):
        most_attended(w, tokens=["a"])


def test_weights_must_be_non_negative_and_finite() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        attention_entropy(np.array([[1.5, -0.5]]))
    with pytest.raises(ValueError, match=r"\(\.\.\., Tq, Tk\)"):
        attention_entropy(np.array([1.0]))
