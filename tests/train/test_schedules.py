"""Learning-rate schedules against the formulas they cite."""

from __future__ import annotations

import math

import pytest

from attnkit.train.loop.schedules import cosine, inverse_sqrt


def vaswani_eq3(step_number: int, warmup: int, d_model: int = 512) -> float:
    """Vaswani et al. (2017), eq. 3, with the 1-based step number of the paper."""
    return d_model ** -0.5 * min(step_number ** -0.5, step_number * warmup ** -1.5)


@pytest.mark.parametrize("warmup", [4000, 10])
def test_inverse_sqrt_is_vaswani_eq3_divided_by_its_peak(warmup: int) -> None:
    peak = vaswani_eq3(warmup, warmup)
    for s in (1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 2 * warmup, 4 * warmup, 100 * warmup):
        # schedule steps count optimizer steps already taken: the paper's step s is schedule step s - 1
        assert inverse_sqrt(s - 1, warmup) == pytest.approx(vaswani_eq3(s, warmup) / peak, rel=1e-12), s


def test_inverse_sqrt_landmarks() -> None:
    assert inverse_sqrt(0, 100) == pytest.approx(0.01)  # the first step: 1 / warmup of the peak
    assert inverse_sqrt(99, 100) == pytest.approx(1.0)  # the peak, at the warmup-th step
    assert inverse_sqrt(399, 100) == pytest.approx(0.5)  # 4 x warmup: half the peak (1 / sqrt(4))
    assert inverse_sqrt(9_999, 100) == pytest.approx(0.1)  # 100 x warmup: a tenth
    assert inverse_sqrt(12, 0) == 1.0  # no warm-up


def test_cosine_halfway_and_floor() -> None:
    assert cosine(0, 100) == pytest.approx(1.0)
    assert cosine(50, 100) == pytest.approx(0.5)
    assert cosine(50, 100, floor=0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    assert cosine(200, 100, floor=0.05) == pytest.approx(0.05)
    assert cosine(25, 100) == pytest.approx((1 + math.cos(math.pi / 4)) / 2)
