"""What a classifier is trained for: the measure (``--metric``), class weights and tuned class offsets.

* **Class weights** (``--class-weight``): ``none`` (every example counts
  once) or ``balanced``, ``w_c = N / (C * n_c)`` with ``n_c`` the training
  examples of class ``c`` (scikit-learn's rule), so every class weighs as
  much in the loss as in a macro average. They weigh the cross-entropy of
  the network, the n-gram half's logistic regression and the baseline's.
* **Weighing the halves**: the stacking of a model's own logits and its
  n-gram half (:meth:`attnkit.models.ngram_half.NgramHalf.weigh_halves`)
  minimises cross-entropy weighed by :func:`stacking_weights`: balanced for
  the measures that count every class alike (``macro_f1``,
  ``macro_recall``, ``f1:<class>``) or under ``balanced`` class weights,
  none otherwise.
* **Class offsets** (``--tune-thresholds``, on by default when the measure
  is not accuracy and the class weights are ``none``; see :func:`tunes_offsets`):
  an offset ``o_c`` added to each class's logit, the
  decision ``argmax_c (z_c + o_c)`` (a class prior, or with two classes a
  decision threshold), chosen on the validation part by
  :func:`tune_offsets` to maximise the measure; they are folded into the
  bias of the model's final ``classifier`` layer, so the saved weights
  predict with them and nothing in the run's files changes shape.

:func:`tune_offsets` is coordinate ascent over a fixed grid of offsets,
class by class, a few rounds, starting at zero; a change is kept only when it
raises the validation measure by more than :data:`MIN_GAIN` (an offset that
helps only one or two validation documents is noise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attnkit.train.metrics import CLASS_WEIGHTS, check_metric, metric_class, metric_score

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["CLASS_WEIGHTS", "OFFSET_GRID", "MIN_GAIN", "class_weights", "stacking_weights", "tunes_offsets",
           "tune_offsets", "fold_offsets", "check_objective", "fit_decision"]

OFFSET_GRID = tuple(float(x) for x in np.round(np.arange(-3.0, 3.01, 0.25), 2))
"""The offsets (in logits) each class's offset is chosen among."""

MIN_GAIN = 1e-3
"""The least rise of the validation measure a changed offset must bring to be kept."""

_ROUNDS = 3


def class_weights(labels: Sequence[int], num_classes: int, mode: str,
                  names: Sequence[str] | None = None) -> list[float] | None:
    """Per-class loss weights for ``mode`` (:data:`CLASS_WEIGHTS`): None for ``none``, ``N / (C n_c)`` for balanced.

    ``labels`` are the training class ids. A class without a training example
    cannot be balanced: ValueError naming it (``names``: the class names in id order).
    """
    if mode not in CLASS_WEIGHTS:
        raise ValueError(f"class_weight must be one of {list(CLASS_WEIGHTS)}, got {mode!r}")
    if mode == "none":
        return None
    counts = np.bincount(np.asarray(list(labels), dtype=np.int64), minlength=num_classes)[:num_classes]
    absent = [int(c) for c in np.flatnonzero(counts == 0)]
    if absent:
        shown = [names[c] if names is not None else c for c in absent]
        raise ValueError(f"class_weight 'balanced' needs every class in the training data; class(es) {shown} have "
                         f"no training example: add some, or use class_weight 'none'")
    return [float(len(labels) / (num_classes * n)) for n in counts]


def stacking_weights(metric: str, labels: Sequence[int], num_classes: int, mode: str) -> list[float] | None:
    """The class weights of the halves' stacking loss for ``metric`` and class weighting ``mode`` (module docstring)."""
    counts_every_class = metric != "accuracy" and metric != "weighted_f1"
    if mode == "balanced" or counts_every_class:
        present = sorted(set(int(y) for y in labels))
        if len(present) < num_classes:  # a class absent from the validation part: weigh the present ones alike
            weights = [0.0] * num_classes
            counts = np.bincount(np.asarray(list(labels), dtype=np.int64), minlength=num_classes)
            for c in present:
                weights[c] = float(len(labels) / (len(present) * counts[c]))
            return weights
        return class_weights(labels, num_classes, "balanced")
    return None


def tunes_offsets(metric: str, tune: bool | None, class_weight: str = "none") -> bool:
    """Whether class offsets are tuned: ``tune`` when given, else when the measure is not accuracy and the
    loss is unweighted (``class_weight`` none).

    Balanced class weights already correct the class priors in every loss;
    offsets tuned on top of them fit the few rare-class documents of the
    validation part (AG News with three topics down-sampled: validation
    macro-F1 0.773 -> 0.816, test 76.02 -> 68.80; docs/results-metric.md).
    """
    if tune is not None:
        return bool(tune)
    return metric != "accuracy" and class_weight == "none"


def tune_offsets(logits: torch.Tensor | np.ndarray, labels: Sequence[int], metric: str,
                 names: Sequence[str]) -> tuple[list[float], float, float]:
    """Per-class offsets that raise ``metric`` of ``argmax(logits + offsets)`` on held-out documents.

    ``f1:<class>`` moves only that class's offset; the others every class's
    but the first (a common shift changes nothing). Returns the offsets (in
    class id order), the measure before and after.

    Shape:
        logits ``(N, C)``; labels ``N`` class ids; names ``C`` class names.
    """
    check_metric(metric, names)
    z = np.asarray(logits.detach().cpu().numpy() if hasattr(logits, "detach") else logits, dtype=np.float64)
    y = np.asarray(list(labels), dtype=np.int64)
    if z.ndim != 2 or z.shape[0] != y.shape[0] or z.shape[1] != len(names) or not y.size:
        raise ValueError(f"need (N, C) logits for N > 0 labelled documents and C = {len(names)} classes, "
                         f"got {z.shape} and {y.size} labels")
    c = z.shape[1]
    offsets = np.zeros(c)

    def score(o: np.ndarray) -> float:
        return metric_score(metric, y, (z + o).argmax(1), c, names)

    start = best = score(offsets)
    named = metric_class(metric)
    movable = [list(names).index(named)] if named is not None else list(range(1, c)) if c == 2 else list(range(c))
    for _ in range(_ROUNDS):
        changed = False
        for k in movable:
            trials = []
            for value in OFFSET_GRID:  # ascending: among equal scores the first, then the one nearest zero
                trial = offsets.copy()
                trial[k] = value
                trials.append((score(trial), -abs(value), value))
            s, _, value = max(trials)
            if s > best + MIN_GAIN:
                offsets[k], best, changed = value, s, True
        if not changed:
            break
    return [float(o) for o in offsets], float(start), float(best)


def fold_offsets(model: nn.Module, offsets: Sequence[float]) -> None:
    """Add ``offsets`` to the bias of ``model``'s final ``classifier`` layer (its logits shift by them).

    A model without an ``nn.Linear`` named ``classifier`` raises ValueError.
    """
    import torch
    from torch import nn

    layer = getattr(model, "classifier", None)
    if not isinstance(layer, nn.Linear) or layer.bias is None or layer.bias.shape[0] != len(offsets):
        raise ValueError(f"tuned class offsets need a final nn.Linear 'classifier' layer with a bias of "
                         f"{len(offsets)} classes; {type(model).__name__} has none: pass tune_thresholds=False")
    with torch.no_grad():
        layer.bias.add_(torch.as_tensor(list(offsets), dtype=layer.bias.dtype, device=layer.bias.device))


def check_objective(metric: str, class_weight: str, train_labels: Sequence[int],
                    names: Sequence[str]) -> list[float] | None:
    """Validate ``metric`` against the class ``names`` and return the training class weights
    (before any file is written)."""
    check_metric(metric, names)
    return class_weights(train_labels, len(names), class_weight, names)


def fit_decision(model: nn.Module, predict: Callable[..., tuple[Any, ...]], val_data: Any, *, metric: str,
                 class_weight: str, tune: bool | None, names: Sequence[str],
                 log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """After training, on the validation part: weigh the halves (a model with an n-gram half), then tune offsets.

    ``predict(val_data)`` gives the model's logits ``(N, C)`` and labels, and ``predict(val_data, halves=True)``
    each half's logits and the labels
    (:meth:`~attnkit.train.tasks.classify.task.ClassificationTask.predict`: those the validation pass kept
    when it read the same weights); ``val_data`` has ``labels`` (a
    :class:`~attnkit.data.batching.TextClassificationDataset`). Returns what
    was fitted, for the run's metrics: ``halves`` ``[a, b]`` and
    ``offsets`` with the validation measure ``before`` and ``after`` them.
    """
    out: dict[str, Any] = {"metric": metric}
    if not len(val_data):
        return out
    if getattr(model, "has_ngram_half", False):
        weights = stacking_weights(metric, val_data.labels, len(names), class_weight)
        own, wide, _ = predict(val_data, halves=True)
        a, b = model.weigh_logits(own, wide, val_data.labels, class_weights=weights)  # type: ignore[operator]
        out["halves"] = [a, b]
        if log is not None:
            log(f"halves weighed on the validation part: network x {a:.3g}, n-gram regression x {b:.3g}")
    if tunes_offsets(metric, tune, class_weight):
        logits, labels = predict(val_data)
        offsets, before, after = tune_offsets(logits, labels.tolist(), metric, names)
        fold_offsets(model, offsets)
        out.update({"offsets": offsets, "before": before, "after": after})
        if log is not None:
            shown = ", ".join(f"{n} {o:+.2f}" for n, o in zip(names, offsets, strict=True))
            log(f"class offsets tuned on the validation part for {metric}: {shown} "
                f"(validation {metric} {before:.4f} -> {after:.4f})")
    return out
