"""Looking at results: accuracy, the most attended tokens, and attention statistics.

All functions take plain arrays, so they serve the NumPy twin and the torch
models alike (pass ``weights.numpy()``).

Shape legend: B batch, H heads, Tq/Tk lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["accuracy", "attention_received", "most_attended_positions", "most_attended_tokens", "attention_stats"]


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of ``predictions == labels``.

    Shape:
        predictions and labels ``(N,)``.
    """
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {predictions.shape} and labels {labels.shape} differ in shape")
    return float(np.mean(predictions == labels)) if labels.size else 0.0


def attention_received(weights: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Weight each key receives, averaged over heads and over the real queries.

    ``mask`` ``(B, T)`` True on real tokens (queries of padding are skipped).

    Shape:
        weights ``(B, H, Tq, Tk)`` or ``(B, Tk)`` (pooling); returns ``(B, Tk)``.
    """
    if weights.ndim == 2:
        return weights
    if weights.ndim != 4:
        raise ValueError(f"weights must be (B, H, Tq, Tk) or (B, Tk), got shape {weights.shape}")
    per_query = weights.mean(axis=1)  # (B, Tq, Tk)
    if mask is None:
        return per_query.mean(axis=1)
    m = mask.astype(weights.dtype)[:, :, None]  # (B, Tq, 1)
    return (per_query * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)


def most_attended_positions(weights: np.ndarray, k: int = 3, mask: np.ndarray | None = None) -> np.ndarray:
    """The ``k`` key positions that receive the most weight in each example.

    Shape:
        returns ``(B, k)`` ints, most attended first.
    """
    received = attention_received(weights, mask)
    if mask is not None:
        received = np.where(mask, received, -np.inf)
    return np.argsort(-received, axis=1, kind="stable")[:, :k]


def most_attended_tokens(
    weights: np.ndarray, ids: np.ndarray, vocab: Sequence[str], k: int = 10,
    mask: np.ndarray | None = None, min_frequency: int = 1,
) -> list[tuple[str, float, int]]:
    """Tokens ranked by the mean weight they receive over all their occurrences.

    Returns ``(token, mean weight, count)`` for the ``k`` best tokens seen at
    least ``min_frequency`` times.

    Shape:
        weights ``(B, H, Tq, Tk)`` or ``(B, Tk)`` (pooling); ids and mask ``(B, Tk)``.
    """
    received = attention_received(weights, mask)  # (B, T)
    valid = np.ones(ids.shape, dtype=bool) if mask is None else mask
    totals: Counter[int] = Counter()
    counts: Counter[int] = Counter()
    for tok, w in zip(ids[valid].tolist(), received[valid].tolist(), strict=True):
        totals[tok] += w
        counts[tok] += 1
    ranked = sorted(
        ((vocab[t], totals[t] / c, c) for t, c in counts.items() if c >= min_frequency),
        key=lambda r: -r[1],
    )
    return ranked[:k]


def attention_stats(weights: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float]:
    """Summary of attention rows: mean and spread (std) of the weights, the mean
    row maximum, and the mean row entropy in nats (``-sum p log p``) with its
    value relative to a uniform row over the allowed keys.

    Rows that are all zero (no key) are left out. ``mask`` (``(B, Tk)`` key
    mask) says which keys count for the uniform entropy.

    Shape:
        weights ``(..., Tk)``.
    """
    w = np.asarray(weights, dtype=np.float64)
    rows = w.reshape(-1, w.shape[-1])
    live = rows.sum(axis=1) > 0
    rows = rows[live]
    if rows.size == 0:
        return {"mean": 0.0, "spread": 0.0, "max": 0.0, "entropy": 0.0, "relative_entropy": 0.0}
    plogp = np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0)
    entropy = -plogp.sum(axis=1)
    if mask is not None:
        allowed = np.broadcast_to(mask.reshape(mask.shape[0], *([1] * (w.ndim - 2)), mask.shape[-1]), w.shape)
        n = allowed.reshape(-1, w.shape[-1]).sum(axis=1)[live]
    else:
        n = np.full(rows.shape[0], w.shape[-1])
    uniform = np.log(np.maximum(n, 1))
    rel = np.where(uniform > 0, entropy / np.where(uniform > 0, uniform, 1.0), 0.0)
    nonzero = rows[rows > 0]
    return {
        "mean": float(nonzero.mean()),
        "spread": float(nonzero.std()),
        "max": float(rows.max(axis=1).mean()),
        "entropy": float(entropy.mean()),
        "relative_entropy": float(rel.mean()),
    }
