"""Metrics: accuracy, macro-F1 and the confusion matrix for classifiers; corpus BLEU for generators.

The classification metrics take integer class ids (``targets`` and ``predictions`` of equal
length) and work on tensors, NumPy arrays or plain sequences alike.

* accuracy = (number of i with pred_i == target_i) / N
* F1 of class c = 2 P_c R_c / (P_c + R_c), with precision P_c = TP_c / (TP_c + FP_c)
  and recall R_c = TP_c / (TP_c + FN_c); a class with no support and no
  prediction is left out of the macro average, a class with an empty
  denominator otherwise counts as F1 = 0.
* macro-F1 = mean of F1_c over the classes, so a small class counts as much as
  a large one (Sokolova and Lapalme, 2009).
* weighted-F1 = sum_c (support_c / N) F1_c, the F1 of each class weighed by its share of the targets.
* macro-recall = mean of R_c over the classes present in the targets (balanced accuracy).
* ``f1:<class>`` = F1 of one named class (e.g. the rare class of a detection task).

:data:`METRICS` lists the measures a run can be trained for (``--metric``):
early stopping, the best epoch, the weighing of a model's halves and the
class offsets tuned on the validation part follow it; :func:`check_metric`
validates a name, :func:`metric_score` computes it, and
:func:`classification_report` holds every measure at once.

BLEU (Papineni et al., 2002) is sacreBLEU's (Post, 2018), with its standard
``13a`` tokenization, so that figures compare with published ones:

* BLEU-N = BP · exp( (1/N) Σ_{n=1..N} log p_n ), with p_n the modified
  (clipped) n-gram precision over the corpus and BP = min(1, exp(1 − r/c))
  the brevity penalty (c hypothesis words, r the words of the closest
  reference of each hypothesis);
* with several references a hypothesis n-gram counts up to its largest count
  in any one reference; every hypothesis may have a different number of them.

:func:`corpus_bleu` is the one BLEU of attnkit (translation and captioning
both use it); :func:`bleu_scores` reports BLEU-1 ... BLEU-4 as Show, Attend and
Tell did (Xu et al., 2015).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:  # torch is not imported here: the captioning commands import BLEU and start quickly
    import torch

__all__ = ["CLASS_WEIGHTS", "accuracy", "macro_f1", "weighted_f1", "macro_recall", "confusion_matrix",
           "per_class_scores", "classification_report", "METRICS", "check_metric", "metric_class", "metric_score",
           "metric_title", "metrics_lines", "corpus_bleu", "bleu_scores"]

CLASS_WEIGHTS = ("none", "balanced")
"""The choices of ``--class-weight`` (the loss weights of
:func:`attnkit.train.tasks.classify.objective.class_weights`)."""

METRICS = ("accuracy", "macro_f1", "weighted_f1", "macro_recall")
"""The measures a classifier can be trained for, besides ``f1:<class>`` (the F1 of one named class)."""

IntArrayLike: TypeAlias = "Sequence[int] | np.ndarray | torch.Tensor"


def _as_array(name: str, values: IntArrayLike) -> np.ndarray:
    torch_module = sys.modules.get("torch")  # a tensor cannot exist before torch is imported
    if torch_module is not None and isinstance(values, torch_module.Tensor):
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


def per_class_scores(
    targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None
) -> list[dict[str, float]]:
    """Per class ``c`` (in id order): ``precision`` P_c, ``recall`` R_c, ``f1`` and ``support``.

    The formulas of the module docstring; an empty denominator gives 0.0
    (a class never predicted has precision 0, one absent from ``targets``
    recall 0). ``support`` is the number of targets of the class.
    """
    m = confusion_matrix(targets, predictions, num_classes).astype(np.float64)
    tp = np.diag(m)
    support, predicted = m.sum(axis=1), m.sum(axis=0)
    rows = []
    for c in range(m.shape[0]):
        p = tp[c] / predicted[c] if predicted[c] else 0.0
        r = tp[c] / support[c] if support[c] else 0.0
        f1 = 2 * tp[c] / (support[c] + predicted[c]) if support[c] + predicted[c] else 0.0
        rows.append({"precision": float(p), "recall": float(r), "f1": float(f1), "support": int(support[c])})
    return rows


def weighted_f1(targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None) -> float:
    """Per-class F1 weighed by each class's share of the targets (0.0 for an empty input)."""
    rows = per_class_scores(targets, predictions, num_classes)
    total = sum(r["support"] for r in rows)
    return float(sum(r["f1"] * r["support"] for r in rows) / total) if total else 0.0


def macro_recall(targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None) -> float:
    """Mean recall over the classes present in ``targets`` (balanced accuracy; 0.0 for an empty input)."""
    rows = [r for r in per_class_scores(targets, predictions, num_classes) if r["support"]]
    return float(sum(r["recall"] for r in rows) / len(rows)) if rows else 0.0


def _metric_choices(labels: Sequence[str] | None) -> str:
    classes = ", ".join(f"f1:{lb}" for lb in labels) if labels is not None else "f1:<class>"
    return f"{', '.join(METRICS)}, {classes}"


def check_metric(metric: str, labels: Sequence[str] | None = None) -> str:
    """``metric`` if it is one of :data:`METRICS` or ``f1:<class>`` (with ``labels``: a class among them).

    Raises ValueError naming the valid choices otherwise.
    """
    if not isinstance(metric, str) or not (metric in METRICS or metric.startswith("f1:") and len(metric) > 3):
        raise ValueError(f"metric must be one of {_metric_choices(labels)}; got {metric!r}")
    name = metric_class(metric)
    if name is not None and labels is not None and name not in labels:
        raise ValueError(f"metric {metric!r} names class {name!r}, which is not among the classes "
                         f"{list(labels)}; valid metrics: {_metric_choices(labels)}")
    return metric


def metric_class(metric: str) -> str | None:
    """The class named by ``f1:<class>`` (None for the other measures)."""
    return metric[3:] if metric.startswith("f1:") else None


def metric_title(metric: str) -> str:
    """How tables name a measure: ``macro-F1``, ``F1 of spam``, ..."""
    name = metric_class(metric)
    if name is not None:
        return f"F1 of {name}"
    return {"accuracy": "accuracy", "macro_f1": "macro-F1", "weighted_f1": "weighted-F1",
            "macro_recall": "macro-recall"}[metric]


def metric_score(metric: str, targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None,
                 labels: Sequence[str] | None = None) -> float:
    """The value of ``metric`` (:func:`check_metric`); ``f1:<class>`` needs ``labels``, the class names in id order."""
    check_metric(metric, labels)
    name = metric_class(metric)
    if name is not None:
        if labels is None:
            raise ValueError(f"metric {metric!r} needs the class names (labels) to find its class")
        return per_class_scores(targets, predictions, num_classes or len(labels))[list(labels).index(name)]["f1"]
    functions = {"accuracy": lambda t, p, c: accuracy(t, p), "macro_f1": macro_f1, "weighted_f1": weighted_f1,
                 "macro_recall": macro_recall}
    return float(functions[metric](targets, predictions, num_classes))


def classification_report(
    targets: IntArrayLike, predictions: IntArrayLike, num_classes: int | None = None,
    labels: Sequence[str] | None = None,
) -> dict[str, object]:
    """Every measure in one JSON-ready dict.

    ``accuracy``, ``macro_f1``, ``weighted_f1``, ``macro_recall``,
    ``per_class`` (:func:`per_class_scores`, each row with its ``label`` when
    ``labels`` names the classes in id order) and ``confusion_matrix`` (nested lists).
    """
    rows: list[dict[str, Any]] = list(per_class_scores(targets, predictions, num_classes))
    if labels is not None:
        if len(labels) != len(rows):
            raise ValueError(f"labels must name the {len(rows)} classes, got {len(labels)} names")
        rows = [{"label": lb, **r} for lb, r in zip(labels, rows, strict=True)]
    return {
        "accuracy": accuracy(targets, predictions),
        "macro_f1": macro_f1(targets, predictions, num_classes),
        "weighted_f1": weighted_f1(targets, predictions, num_classes),
        "macro_recall": macro_recall(targets, predictions, num_classes),
        "per_class": rows,
        "confusion_matrix": confusion_matrix(targets, predictions, num_classes).tolist(),
    }


def metrics_lines(title: str, metrics: Mapping[str, Any], labels: Sequence[str]) -> list[str]:
    """Accuracy, macro-F1 and the confusion matrix of ``metrics`` (:func:`classification_report`) under
    ``title``, as the commands print them (labels as a terminal may show them, :func:`attnkit._checks.shown`)."""
    from attnkit._checks import shown

    names = [shown(str(lb)) for lb in labels]
    width = max(8, *(len(lb) for lb in names))
    return [f"{title}: accuracy {metrics['accuracy']:.4f}  macro-F1 {metrics['macro_f1']:.4f}  "
            f"(n={metrics.get('n', '?')})", "confusion matrix (rows: true, columns: predicted)",
            " " * width + "".join(f"{lb[:width]:>{width + 1}}" for lb in names),
            *(f"{lb:<{width}}" + "".join(f"{v:>{width + 1}}" for v in row)
              for lb, row in zip(names, metrics["confusion_matrix"], strict=True))]


def _reference_streams(hypotheses: Sequence[str],
                       references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str | None]]:
    """sacreBLEU's layout: stream ``j`` holds the ``j``-th reference of every hypothesis (None: it has fewer)."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be sequences of strings, not a single str")
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"hypotheses and references must be equally long and not empty, got "
                         f"{len(hypotheses)} hypotheses and {len(references)} references")
    per_hypothesis = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
    for i, refs in enumerate(per_hypothesis):
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a string or a non-empty list of strings, got {refs!r}")
    most = max(len(refs) for refs in per_hypothesis)
    return [[refs[j] if j < len(refs) else None for refs in per_hypothesis] for j in range(most)]


def _bleu(hypotheses: Sequence[str], streams: list[list[str | None]], lowercase: bool, max_order: int) -> Any:
    from sacrebleu.metrics import BLEU

    if isinstance(max_order, bool) or not isinstance(max_order, int) or max_order < 1:
        raise ValueError(f"max_order must be a positive int, got {max_order!r}")
    # sacreBLEU documents None for "this hypothesis has fewer references"; its annotation omits it.
    return BLEU(lowercase=lowercase, max_ngram_order=max_order).corpus_score(
        list(hypotheses), streams)  # type: ignore[arg-type]


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], *,
                lowercase: bool = False, max_order: int = 4) -> float:
    """Corpus BLEU-``max_order`` on the 0–100 scale (sacreBLEU, ``13a`` tokenization).

    Args:
        hypotheses: one generated text per example.
        references: per example, one reference string, or a list of any
            number (at least one) of reference strings.
        lowercase: compare lower-cased text.
        max_order: the longest n-gram counted (4: the usual BLEU).
    """
    return float(_bleu(hypotheses, _reference_streams(hypotheses, references), lowercase, max_order).score)


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], *,
                lowercase: bool = False) -> dict[str, float]:
    """BLEU-1, BLEU-2, BLEU-3 and BLEU-4 (0–100) as ``{"bleu1": ..., "bleu4": ...}``.

    BLEU-N is :func:`corpus_bleu` with ``max_order=N``: the geometric mean of
    the 1- to N-gram precisions times the brevity penalty, the figures Show,
    Attend and Tell reports. ``references`` as in :func:`corpus_bleu`.
    """
    streams = _reference_streams(hypotheses, references)
    return {f"bleu{n}": float(_bleu(hypotheses, streams, lowercase, n).score) for n in range(1, 5)}
