"""Classification metrics: accuracy, macro-F1 and the confusion matrix.

All three take integer class ids (``targets`` and ``predictions`` of equal
length) and work on tensors, NumPy arrays or plain sequences alike.

* accuracy = (number of i with pred_i == target_i) / N
* F1 of class c = 2 P_c R_c / (P_c + R_c), with precision P_c = TP_c / (TP_c + FP_c)
  and recall R_c = TP_c / (TP_c + FN_c); a class with no support and no
  prediction is left out of the macro average, a class with an empty
  denominator otherwise counts as F1 = 0.
* macro-F1 = mean of F1_c over the classes, so a small class counts as much as
  a large one (Sokolova and Lapalme, 2009).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["accuracy", "macro_f1", "confusion_matrix", "classification_report"]

IntArrayLike = Sequence[int] | np.ndarray | torch.Tensor


def _as_array(name: str, values: IntArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D class ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _pair(targets: IntArrayLike, predictions: IntArrayLike) -> tuple[np.ndarray, np.ndarray]:
    t, p = _as_array("targets", targets), _as_array("predictions", predictions)
    if t.shape != p.shape:
        raise ValueError(
            f"targets and predictions must have the same length, got {t.shape[0]} and {p.shape[0]}"
        )
    return t, p


def accuracy(targets: IntArrayLike, predictions: IntArrayLike) -> float:
    """Share of predictions equal to the target (0.0 for an empty input)."""
    t, p = _pair(targets, predictions)
    return float((t == p).mean()) if t.size else 0.0


def confusion_matrix(
    targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None
) -> np.ndarray:
    """Counts ``M[i, j]`` of examples of true class ``i`` predicted as class ``j``.

    Shape:
        returns ``(C, C)`` int64, C = ``num_classes`` (default: largest id + 1).
    """
    t, p = _pair(targets, predictions)
    if t.size and (t.min() < 0 or p.min() < 0):
        raise ValueError("class ids must be >= 0")
    seen = int(max(t.max(initial=-1), p.max(initial=-1))) + 1
    c = seen if num_classes is None else num_classes
    if c < seen:
        raise ValueError(f"num_classes={num_classes} is smaller than the largest class id + 1 ({seen})")
    matrix = np.zeros((c, c), dtype=np.int64)
    np.add.at(matrix, (t, p), 1)
    return matrix


def macro_f1(targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None) -> float:
    """Unweighted mean of the per-class F1 scores (see the module docstring)."""
    m = confusion_matrix(targets, predictions, num_classes).astype(np.float64)
    tp = np.diag(m)
    support, predicted = m.sum(axis=1), m.sum(axis=0)
    present = (support + predicted) > 0
    if not present.any():
        return 0.0
    denom = support + predicted  # 2TP + FP + FN
    f1 = np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)
    return float(f1[present].mean())


def classification_report(
    targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None
) -> dict[str, object]:
    """Accuracy, macro-F1 and the confusion matrix (as nested lists) in one JSON-ready dict."""
    return {
        "accuracy": accuracy(targets, predictions),
        "macro_f1": macro_f1(targets, predictions, num_classes),
        "confusion_matrix": confusion_matrix(targets, predictions, num_classes).tolist(),
    }
