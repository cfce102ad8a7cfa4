"""Argument validators: the one home of the checks that every layer of attnkit repeats.

Each validator takes the argument's name and value, returns the value (with
its type narrowed) when it is acceptable, and otherwise raises ``ValueError``
naming the argument, what was expected and what came::

    positive_int("d_model", 0)       ValueError: d_model must be a positive int, got 0
    probability("dropout", 1.0)      ValueError: dropout must be a float in [0, 1), got 1.0
    one_of("pooling", "max", POOLINGS)
                                     ValueError: pooling must be one of ['attention', 'mean'], got 'max'

The message texts are part of the interface: users and tests match them.
``bool`` is rejected wherever a number is expected (``True`` is an ``int`` to
Python, but never a width or a rate).

This module sits below everything else and imports nothing from attnkit, so
any module may use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["positive_int", "non_negative_int", "positive_float", "probability", "one_of"]

T = TypeVar("T")


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int > 0: a width, a count of heads or layers, a length."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def non_negative_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 0: an offset, an index, a depth that may be zero."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def positive_float(name: str, value: object) -> float:
    """``value`` as a float if it is a number > 0 (an epsilon, a scale)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive float, got {value!r}")
    return float(value)


def probability(name: str, value: object) -> float:
    """``value`` as a float in ``[0, 1)``: a dropout rate (1 would drop everything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")
    return float(value)


def one_of(name: str, value: T, choices: Sequence[T]) -> T:
    """``value`` if it is one of ``choices``; the error lists the valid ones."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value
