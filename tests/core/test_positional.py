"""Sinusoidal, learned, rotary and ALiBi positions: formulas, properties and errors."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit import attention
from attnkit.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    clipped_relative_index,
    relative_distance,
    sinusoidal_table,
)


def test_sinusoidal_table_matches_formula():
    t, d = 12, 10
    table = sinusoidal_table(t, d, dtype=torch.float64)
    for pos in range(t):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    odd = sinusoidal_table(5, 7, dtype=torch.float64)
    assert odd.shape == (5, 7)
    expected = torch.sin(torch.arange(5, dtype=torch.float64) / 10000 ** (6 / 7))
    torch.testing.assert_close(odd[:, 6], expected)  # odd D: the last column is a sine


def test_sinusoidal_offset_and_extrapolation():
    pe = SinusoidalPositionalEncoding(8, max_len=16)
    x = torch.randn(2, 10, 8)
    full = pe(x)
    torch.testing.assert_close(full - x, sinusoidal_table(10, 8).expand(2, 10, 8))
    step = pe(x[:, 6:], offset=6)
    torch.testing.assert_close(step, full[:, 6:])
    long = pe(torch.zeros(1, 4, 8), offset=14)  # positions 14..17 go past max_len
    torch.testing.assert_close(long[0], sinusoidal_table(18, 8)[14:], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        pe(torch.randn(2, 3, 5))


def test_learned_embedding_adds_rows_and_rejects_long_input():
    emb = LearnedPositionalEmbedding(6, 4)
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(emb(x) - x, emb.weight[:5].expand(2, 5, 4))
    torch.testing.assert_close(emb(x[:, 3:], offset=3), emb(x)[:, 3:])
    with pytest.raises(ValueError, match="max_len=6"):
        emb(torch.randn(1, 7, 4))
    with pytest.raises(ValueError, match="offset=4"):
        emb(torch.randn(1, 3, 4), offset=4)


def test_rotary_logits_depend_only_on_distance():
    rope = RotaryEmbedding(16).double()
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, dtype=torch.float64)

    def logit(m: int, n: int) -> float:
        qm, _ = rope(q, q, offset=m)
        kn = rope.rotate(k, offset=n)
        return (qm * kn).sum().item()

    assert logit(3, 1) == pytest.approx(logit(103, 101), abs=1e-9)
    assert logit(7, 7) == pytest.approx((q * k).sum().item(), abs=1e-9)
    assert logit(5, 1) != pytest.approx(logit(5, 2), abs=1e-6)


def test_rotary_is_a_rotation_with_halves_layout():
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 10, 8)
    y = rope.rotate(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(y[:, :, 0], x[:, :, 0])  # position 0 is not rotated
    # Position 1, frequency 0 (theta = 1): features 0 and 4 form the rotated pair.
    c, s = math.cos(1.0), math.sin(1.0)
    torch.testing.assert_close(y[:, :, 1, 0], x[:, :, 1, 0] * c - x[:, :, 1, 4] * s)
    torch.testing.assert_close(y[:, :, 1, 4], x[:, :, 1, 4] * c + x[:, :, 1, 0] * s)


def test_rotary_offset_decoding_equals_full_sequence():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 2, 300, 8), torch.randn(1, 2, 300, 8)
    fq, fk = rope(q, k)
    for start in (0, 1, 255, 299):  # crosses the 256-row cache growth
        sq, sk = rope(q[:, :, start:], k[:, :, start:], offset=start)
        torch.testing.assert_close(sq, fq[:, :, start:])
        torch.testing.assert_close(sk, fk[:, :, start:])
    # One decoding step at a time against cached rotated keys gives the full causal output.
    full = attention(fq, fk, k, causal=True)
    step_q, _ = rope(q[:, :, -1:], k[:, :, -1:], offset=299)
    torch.testing.assert_close(attention(step_q, fk, k, causal=True), full[:, :, -1:])


def test_rotary_half_precision_and_errors():
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 1, 5, 8)
    torch.testing.assert_close(rope.rotate(x.bfloat16()).float(), rope.rotate(x), rtol=2e-2, atol=2e-2)
    assert rope.rotate(x.bfloat16()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match=r"\(B, H, T, 8\)"):
        rope.rotate(torch.randn(1, 5, 8))


def test_alibi_slopes_published_values():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** -(2 * (i + 1)) for i in range(4)]))
    # 12 heads: the 8-head slopes, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...).
    expected_12 = [2.0 ** -(i + 1) for i in range(8)] + [2.0 ** -(0.5 + i) for i in range(4)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected_12))
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


def test_alibi_bias_shape_sign_and_alignment():
    bias = alibi_bias(8, 3, 5)
    assert bias.shape == (1, 8, 3, 5)
    assert torch.all(bias <= 0)
    # Bottom-right: query 2 is key 4; the diagonal is zero and the penalty grows with distance.
    assert bias[0, 0, 2, 4] == 0 and bias[0, 0, 0, 2] == 0
    assert bias[0, 0, 2, 0].item() == pytest.approx(-0.5 * 4)
    assert bias[0, 7, 2, 1].item() == pytest.approx(-(2.0**-8) * 3)
    q, k = torch.randn(1, 8, 3, 4), torch.randn(1, 8, 5, 4)
    out = attention(q, k, k, bias=bias, causal=True)
    assert out.shape == (1, 8, 3, 4)


def test_relative_distance_tables():
    dist = relative_distance(3, 5)
    assert dist.tolist()[0] == [-2, -1, 0, 1, 2]
    assert torch.equal(relative_distance(4, 4), torch.arange(4)[None] - torch.arange(4)[:, None])
    idx = clipped_relative_index(4, 4, 1)
    assert idx.tolist() == [[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]]
    torch.testing.assert_close(clipped_relative_index(4, 4, 1, query_start=1, query_end=3), idx[1:3])
    with pytest.raises(ValueError, match="max_distance"):
        clipped_relative_index(4, 4, 0)


def test_rotary_frequencies_survive_module_dtype_casts():
    x = torch.randn(1, 1, 50, 8, dtype=torch.float64)
    ref = RotaryEmbedding(8).rotate(x)
    torch.testing.assert_close(RotaryEmbedding(8).half().double().rotate(x), ref, rtol=0, atol=1e-12)
