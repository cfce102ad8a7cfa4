"""NumPy twins of :mod:`attnkit.masks` and the softmax of :mod:`attnkit.functional`, under the same names.

:func:`causal`, :func:`from_lengths`, :func:`combine`, :func:`check_mask` and
:func:`safe_softmax` are the NumPy forms of the torch core's functions of those names.
The mask rule is the torch core's: a boolean mask is True where a query MAY
attend to a key and broadcasts to ``(B, H, Tq, Tk)``; a float array is an
additive ``bias``, never a mask. A row with nothing to attend gets zero
weights and zero gradient.

Shape legend: B batch, H heads, Tq/Tk query/key length, Dh head width.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "safe_softmax",
    "softmax_backward",
    "causal",
    "from_lengths",
    "combine",
    "check_mask",
    "check_bias",
    "split_heads",
    "merge_heads",
]


def safe_softmax(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis that subtracts the row maximum and gives an
    all-zero row where no entry is allowed (``mask`` False or score ``-inf``).

    ``softmax(s)_j = exp(s_j - max s) / sum_k exp(s_k - max s)``

    Shape:
        scores ``(..., Tk)``; mask broadcastable to it; returns the shape of scores.
    """
    work = scores if mask is None else np.where(mask, scores, -np.inf)
    row_max = work.max(axis=-1, keepdims=True)
    # A row with nothing allowed has max -inf; shift by 0 so exp gives 0, not NaN.
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.exp(work - row_max)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def softmax_backward(weights: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Gradient through softmax: ``dS = P * (dP - sum_j dP_j P_j)``.

    Masked entries and empty rows have ``P = 0`` and so get zero gradient.
    """
    return weights * (grad - np.sum(grad * weights, axis=-1, keepdims=True))


def causal(tq: int, tk: int, *, align: str = "bottom_right") -> np.ndarray:
    """Query ``i`` may attend key ``j`` when ``j <= i + offset``; ``offset = Tk - Tq``
    for ``"bottom_right"`` (the torch core's default), ``0`` for ``"top_left"``.

    Shape:
        returns ``(Tq, Tk)`` bool.
    """
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align must be 'bottom_right' or 'top_left', got {align!r}")
    offset = tk - tq if align == "bottom_right" else 0
    return np.arange(tk)[None, :] <= np.arange(tq)[:, None] + offset  # (Tq, Tk)


def from_lengths(lengths: Sequence[int] | np.ndarray, max_len: int | None = None) -> np.ndarray:
    """Key-padding mask from lengths: key ``j`` of example ``b`` is valid when ``j < lengths[b]``.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, Tk)`` bool.
    """
    lens = np.asarray(lengths)
    if lens.ndim != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {lens.shape}")
    if not np.issubdtype(lens.dtype, np.integer):
        raise TypeError(f"lengths must hold integers, got dtype {lens.dtype}")
    longest = int(lens.max()) if lens.size else 0
    max_len = longest if max_len is None else max_len
    if longest > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    valid = np.arange(max_len)[None, :] < lens[:, None]  # (B, Tk)
    return valid[:, None, None, :]  # (B, 1, 1, Tk)


def combine(*masks: np.ndarray | None) -> np.ndarray | None:
    """Intersect boolean masks (``None`` entries are skipped; none left gives ``None``)."""
    result: np.ndarray | None = None
    for i, m in enumerate(masks):
        if m is None:
            continue
        if not isinstance(m, np.ndarray) or m.dtype != np.bool_:
            raise TypeError(f"combine() takes boolean masks; argument {i} is {getattr(m, 'dtype', type(m))}")
        result = m if result is None else result & m
    return result


def _check_broadcast(name: str, a: np.ndarray, target: tuple[int, ...]) -> None:
    if a.ndim > len(target):
        raise ValueError(
            f"{name} of shape {a.shape} has more than {len(target)} dims; "
            f"it must broadcast to (B, H, Tq, Tk) = {target}"
        )
    try:
        shape = np.broadcast_shapes(a.shape, target)
    except ValueError:
        shape = None
    if shape != tuple(target):
        raise ValueError(f"{name} of shape {a.shape} does not broadcast to (B, H, Tq, Tk) = {target}")


def check_mask(mask: object, target: tuple[int, ...], name: str = "mask") -> np.ndarray:
    """Validate a boolean mask against the ``(B, H, Tq, Tk)`` it must broadcast to."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"{name} must be a boolean numpy.ndarray, got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        hint = (
            "; a float array is an additive bias: pass it as bias=, or convert a "
            "True-means-ignore mask with ~mask"
            if np.issubdtype(mask.dtype, np.floating)
            else "; build it with attnkit.reference.functional or compare, e.g. mask = ids != pad_id"
        )
        raise TypeError(f"{name} must be a boolean array (True = may attend), got dtype {mask.dtype}{hint}")
    _check_broadcast(name, mask, target)
    return mask


def check_bias(bias: object, target: tuple[int, ...], name: str = "bias") -> np.ndarray:
    """Validate an additive float bias against the ``(B, H, Tq, Tk)`` it must broadcast to."""
    if not isinstance(bias, np.ndarray):
        raise TypeError(f"{name} must be a float numpy.ndarray, got {type(bias).__name__}")
    if not np.issubdtype(bias.dtype, np.floating):
        raise TypeError(
            f"{name} must be a floating array (an additive bias), got dtype {bias.dtype}; "
            "pass boolean masks as mask="
        )
    _check_broadcast(name, bias, target)
    return bias


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """Shape: x ``(B, T, heads * Dh)``; returns ``(B, heads, T, Dh)``."""
    b, t, d = x.shape
    return x.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # (B, H, T, Dh)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Shape: x ``(B, H, T, Dh)``; returns ``(B, T, H * Dh)``."""
    b, h, t, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * dh)  # (B, T, H*Dh)
