"""Measures of attention: where it goes, how spread out it is, how it flows.

NumPy only; every function takes weights as a NumPy array, nested lists or a
torch tensor (converted without importing torch) of shape ``(..., Tq, Tk)``
whose rows sum to 1, or are all zero for a query with no key to attend to (the
attnkit rule for fully masked rows). Such zero rows are left out of averages.

* :func:`most_attended` — the keys that receive the most attention.
* :func:`attention_entropy` — Shannon entropy of each row, in nats.
* :func:`attention_rollout` — attention flow through a stack of layers
  (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers").
* :func:`attention_focus` — the share of attention mass that lands on known
  key positions (e.g. the aligned source word, the object in an image).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from attnkit.viz._arrays import as_array, check_ndim, check_tokens, stack_layers

__all__ = ["most_attended", "attention_entropy", "attention_rollout", "attention_focus"]

Reduce = Literal["mean", "none"]


def _weights(weights: Any, name: str = "weights") -> np.ndarray:
    w = as_array(weights, name, dtype=None)  # float32 stays float32: large stacks stay fast
    if w.ndim < 2:
        raise ValueError(f"{name}: expected shape (..., Tq, Tk), got {tuple(w.shape)}")
    if not np.isfinite(w.sum()) or w.min(initial=0.0) < -1e-6:
        raise ValueError(f"{name}: attention weights must be finite and non-negative")
    return w


def _row_mean(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over the last axis of ``values`` counting only ``valid`` entries (NaN if none)."""
    count = valid.sum(axis=-1)
    total = np.where(valid, values, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def most_attended(
    weights: Any, k: int = 5, tokens: Sequence[str] | None = None
) -> list[tuple[int, str, float]]:
    """The ``k`` keys that receive the most attention, most attended first.

    A key's score is the attention it receives averaged over every query row
    that attends somewhere (and over every leading axis: layers, heads,
    batch), so scores lie in [0, 1] and sum to 1 over all keys.

    Shape:
        weights: ``(..., Tq, Tk)``; tokens: ``Tk`` strings (default: positions).

    Returns:
        ``[(key_index, token, score), ...]`` of length ``min(k, Tk)``.
    """
    w = _weights(weights)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected a positive int, got {k!r}")
    tk = w.shape[-1]
    labels = check_tokens(tokens, tk)
    rows = w.reshape(-1, tk)  # (N, Tk)
    live = rows.sum(axis=-1) > 0
    if not live.any():
        scores = np.zeros(tk)
    else:
        scores = rows[live].mean(axis=0)  # (Tk,)
    order = np.argsort(-scores, kind="stable")[: min(k, tk)]
    return [(int(i), labels[i], float(scores[i])) for i in order]


def attention_entropy(
    weights: Any, *, query_mask: Any = None, reduce: Reduce = "mean"
) -> np.ndarray:
    """Shannon entropy of each attention row, in nats.

    ``H(q) = -sum_k w[q, k] * log w[q, k]`` with ``0 log 0 = 0``. A uniform row
    over ``n`` keys has entropy ``log n``; a row that puts all its mass on one
    key has entropy 0. Rows that are all zero (queries with no key to attend
    to) and rows excluded by ``query_mask`` have no entropy: they are NaN with
    ``reduce="none"`` and left out of the mean with ``reduce="mean"``.

    Shape:
        weights: ``(..., Tq, Tk)``, e.g. ``(L, H, Tq, Tk)``.
        query_mask: boolean, True for real queries, broadcastable to ``(..., Tq)``.
        returns: ``(...)`` (the mean entropy of each head) for ``reduce="mean"``,
        ``(..., Tq)`` for ``reduce="none"``.
    """
    w = _weights(weights)
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce: expected 'mean' or 'none', got {reduce!r}")
    log_w = np.zeros_like(w)
    np.log(w, out=log_w, where=w > 0)  # 0 log 0 = 0
    ent = -np.einsum("...k,...k->...", w, log_w)  # (..., Tq)
    valid = w.sum(axis=-1) > 0  # (..., Tq)
    if query_mask is not None:
        qm = as_array(query_mask, "query_mask", dtype=bool)
        try:
            valid = valid & np.broadcast_to(qm, valid.shape)
        except ValueError as err:
            raise ValueError(
                f"query_mask: expected a shape broadcastable to {valid.shape}, got {qm.shape}"
            ) from err
    if reduce == "none":
        return np.where(valid, ent, np.nan)
    return _row_mean(ent, valid)


def attention_rollout(
    attentions: Any, *, residual: bool = True, head_reduce: Literal["mean", "max"] = "mean"
) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token flows
    into each position after the whole stack of layers.

    For each layer ``l`` the heads are averaged (``head_reduce``), the residual
    connection is accounted for by adding the identity and the rows are
    renormalised, ``A_l = (W_l + I) / rowsum(W_l + I)`` (equal to
    ``0.5 W_l + 0.5 I`` when the rows of ``W_l`` sum to 1), and the layers are
    multiplied from the first up: ``R = A_L @ ... @ A_2 @ A_1``. ``R[i, j]`` is
    the share of position ``i``'s final representation that comes from input
    token ``j``; its rows sum to 1.

    Shape:
        attentions: ``(L, H, T, T)`` or ``(L, B, H, T, T)``, or a list of ``L``
        per-layer ``(H, T, T)`` / ``(B, H, T, T)`` weights (as ``output_attentions``
        returns them).
        returns: ``(T, T)`` or ``(B, T, T)``.
    """
    a = stack_layers(attentions)
    check_ndim(a, (4, 5), "attentions", "(L, H, T, T) or (L, B, H, T, T)")
    _weights(a, "attentions")
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions: rollout needs self-attention (T, T), got {tuple(a.shape)}")
    if head_reduce == "mean":
        per_layer = a.mean(axis=-3)  # (L, [B,] T, T)
    elif head_reduce == "max":
        per_layer = a.max(axis=-3)
    else:
        raise ValueError(f"head_reduce: expected 'mean' or 'max', got {head_reduce!r}")
    t = a.shape[-1]
    eye = np.eye(t)
    rollout = np.broadcast_to(eye, per_layer.shape[1:]).copy()  # ([B,] T, T)
    for layer in per_layer:
        step = layer + eye if residual else layer.copy()
        sums = step.sum(axis=-1, keepdims=True)
        step = np.divide(step, sums, out=np.zeros_like(step), where=sums > 0)
        rollout = step @ rollout  # later layers on the left
    return rollout


def attention_focus(weights: Any, key_positions: Any, *, reduce: Reduce = "mean") -> np.ndarray:
    """Share of each query's attention that lands on known key positions.

    ``focus(q) = sum_{k in K(q)} w[q, k] / sum_k w[q, k]``: 1 when all the
    attention goes to the expected keys, ``|K| / Tk`` on average for uniform
    attention. Rows with no attention are NaN (``reduce="none"``) or left out
    of the mean.

    Args:
        weights: attention weights.
        key_positions: either a sequence of key indices (the same set for every
            query) or a boolean array, True at the expected keys, broadcastable
            to ``(..., Tq, Tk)`` (e.g. a ``(Tq, Tk)`` gold alignment).
        reduce: ``"mean"`` over queries, or ``"none"``.

    Shape:
        weights: ``(..., Tq, Tk)``; returns ``(...)`` or ``(..., Tq)``.
    """
    w = _weights(weights)
    tk = w.shape[-1]
    kp = np.asarray(key_positions)
    if kp.dtype == bool:
        try:
            sel = np.broadcast_to(kp, w.shape)
        except ValueError as err:
            raise ValueError(
                f"key_positions: a boolean mask must broadcast to {w.shape}, got {kp.shape}"
            ) from err
    else:
        idx = kp.astype(np.int64).reshape(-1)
        if idx.size and (idx.min() < -tk or idx.max() >= tk):
            raise ValueError(f"key_positions: indices must lie in [0, {tk}), got {idx.tolist()}")
        row = np.zeros(tk, dtype=bool)
        row[idx] = True
        sel = np.broadcast_to(row, w.shape)
    total = w.sum(axis=-1)  # (..., Tq)
    on_keys = np.where(sel, w, 0.0).sum(axis=-1)
    valid = total > 0
    share = np.divide(on_keys, total, out=np.zeros_like(total), where=valid)
    if reduce == "none":
        return np.where(valid, share, np.nan)
    if reduce != "mean":
        raise ValueError(f"reduce: expected 'mean' or 'none', got {reduce!r}")
    return _row_mean(share, valid)
