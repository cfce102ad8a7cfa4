"""The strong simple baseline beside every classification result: TF-IDF + logistic regression.

Before attention is worth its cost on a data set it has to beat a linear model
over word n-grams, which reaches most of the accuracy of neural sentence
classifiers in seconds (Wang and Manning, 2012, report 77.7% for such a
model on MR beside 79.4% for NB-SVM). The baseline here is

* features: TF-IDF over word 1- and 2-grams with sublinear term frequency,
  ``1 + log tf`` (scikit-learn's ``TfidfVectorizer(ngram_range=(1, 2),
  sublinear_tf=True)``, lower-cased, tokens of two or more word characters);
* classifier: L2-regularised logistic regression with ``C = 4``
  (``LogisticRegression(C=4, solver="lbfgs")``, multinomial over more than
  two classes; liblinear would be quicker on two classes but takes no
  multinomial loss), with the run's class weighting (``class_weight``:
  ``"none"``, or ``"balanced"``, scikit-learn's ``N / (C n_c)``, the rule of
  :func:`attnkit.train.tasks.classify.objective.class_weights`), so that the comparison stays fair.

It is scored on exactly the examples a model is scored on:
:func:`split_baseline` on the test part of ``attnkit train``'s split
(:func:`attnkit.data.sources.load_splits` with the run's seed),
:func:`fold_baselines` on the test part of every fold of ``attnkit cv``
(:func:`attnkit.data.splits.kfold` with the same seed and labels as
:func:`attnkit.train.tasks.classify.pipeline.cross_validate`). The baseline has nothing to
tune, so it learns from everything the model saw: the training part *and*
the validation part the model uses for early stopping.

:func:`paired_test` compares the two over folds: the mean per-fold
difference ``d̄ = mean(model_i - baseline_i)``, its 95% interval
``d̄ ± t_{0.975, k-1} · s_d / √k`` and the paired t-test (scipy's
``ttest_rel``). scikit-learn (and scipy with it) is the ``tasks`` extra and is
imported only when a baseline is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from attnkit.data.readers import Example
from attnkit.data.sources import DataSource, load_splits
from attnkit.data.splits import kfold

__all__ = ["BASELINE_NAME", "BASELINE_C", "BASELINE_BYTES", "baseline_features", "baseline_scores", "split_baseline",
           "fold_baselines", "paired_test"]

BASELINE_NAME = "tf-idf 1-2-grams + logistic regression"
"""How tables and reports name the baseline."""

BASELINE_C = 4.0
"""Inverse L2 regularisation strength of the logistic regression."""


BASELINE_BYTES = 8 * 32
"""Bytes the baseline's regression holds per class and feature: 32 float64 tables of ``(C, F)`` (scipy's
L-BFGS-B with ten correction pairs holds about 25, scikit-learn's loss and its gradient the rest)."""


def baseline_features(num_classes: int, memory: int | None = None, used: int | None = None) -> int | None:
    """The most TF-IDF features the baseline keeps for ``num_classes`` classes: what fits the room left under
    the limit :func:`attnkit.train.memory_budget.limit_and_source` sets for ``memory`` (``max_memory``; None:
    the default limit) at :data:`BASELINE_BYTES` a class and feature, beside the ``used`` bytes the process
    holds already (None: its resident memory now), so that the process as a whole stays within the limit the
    run's own plan keeps to; at least 1,000. None: no limit known, all of them."""
    from attnkit._memory import resident_bytes
    from attnkit.train.memory_budget import limit_and_source

    limit = limit_and_source(memory)[0]
    if limit is None:
        return None
    room = limit - (resident_bytes() if used is None else used)
    return max(1000, room // (BASELINE_BYTES * max(1, num_classes)))


def _pipeline(c: float, class_weight: str = "none", max_features: int | None = None) -> Any:
    from attnkit._lazy import require_extra

    require_extra("the TF-IDF baseline", "sklearn")
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True,
                                         max_features=max_features),
                         LogisticRegression(C=c, solver="lbfgs", max_iter=1000,
                                            class_weight=None if class_weight == "none" else class_weight))


def baseline_scores(train: Sequence[Example], test: Sequence[Example], *, c: float = BASELINE_C,
                    labels: Sequence[str] | None = None, class_weight: str = "none", memory: int | None = None
                    ) -> dict[str, Any]:
    """Fit the baseline on ``train`` and score it on ``test``.

    ``labels`` fixes the class order of the confusion matrix (default: the
    sorted labels of ``train``, the order of a run's label vocabulary); a test
    label outside it raises ValueError naming it. ``class_weight``: ``"none"``
    or ``"balanced"`` (a class of ``labels`` absent from ``train`` then raises ValueError naming it).
    ``memory``: the run's ``max_memory`` (None: the default limit), which bounds the features kept
    (:func:`baseline_features`).

    Returns:
        every measure of :func:`attnkit.train.metrics.classification_report`
        (``accuracy``, ``macro_f1``, ``weighted_f1``, ``macro_recall``,
        ``per_class``, ``confusion_matrix``), ``n`` (test examples), ``labels``,
        ``class_weight``, ``features`` (the TF-IDF features kept), ``feature_limit`` (the most that fit the
        memory limit, :func:`baseline_features`; None: no limit known) and ``predictions`` (one label per test
        example).
    """
    from attnkit.train.metrics import classification_report
    from attnkit.train.tasks.classify.objective import class_weights

    if not train or not test:
        raise ValueError(f"the baseline needs training and test examples, got {len(train)} and {len(test)}")
    classes = list(labels) if labels is not None else sorted({e.label for e in train})
    if len({e.label for e in train}) < 2:
        raise ValueError(f"the baseline needs at least 2 classes in the training data, got {classes}")
    index = {label: i for i, label in enumerate(classes)}
    unknown = sorted({e.label for e in (*train, *test)} - set(index))
    if unknown:
        raise ValueError(f"label(s) {unknown} are not among the baseline's classes {classes}")
    y = [index[e.label] for e in train]
    class_weights(y, len(classes), class_weight, classes)  # checks the choice and that no class is absent
    limit = baseline_features(len(classes), memory)
    model = _pipeline(c, class_weight, limit)
    model.fit([e.text for e in train], y)
    predicted = [int(p) for p in model.predict([e.text for e in test])]
    report = classification_report([index[e.label] for e in test], predicted, len(classes), classes)
    return {**report, "n": len(test), "labels": classes, "class_weight": class_weight,
            "features": len(model[0].vocabulary_), "feature_limit": limit,
            "predictions": [classes[p] for p in predicted]}


def split_baseline(source: DataSource, *, seed: int, c: float = BASELINE_C, class_weight: str = "none",
                   memory: int | None = None) -> dict[str, Any]:
    """The baseline on ``attnkit train``'s split of ``source`` with ``seed``: fit on train + validation,
    score on test (``memory``: as :func:`baseline_scores`)."""
    train, val, test = load_splits(source, seed=seed)
    if not test:
        raise ValueError("the split has no test part (--test-ratio 0 and no --test): nothing to score")
    return baseline_scores([*train, *val], test, c=c, class_weight=class_weight, memory=memory)


def fold_baselines(examples: Sequence[Example], *, folds: int, seed: int, max_folds: int | None = None,
                   c: float = BASELINE_C, class_weight: str = "none") -> list[dict[str, Any]]:
    """The baseline on each fold of ``attnkit cv``: same ``kfold`` call, same seed, same test indices.

    Returns one dict per fold (``fold``, 1-based, and :func:`baseline_scores`'s
    keys without ``predictions``) for the first ``max_folds`` folds.
    """
    parts = kfold(len(examples), folds, seed, labels=[e.label for e in examples])
    classes = sorted({e.label for e in examples})
    rows = []
    for index, (train_idx, test_idx) in enumerate(parts[: max_folds or folds]):
        scores = baseline_scores([examples[i] for i in train_idx], [examples[i] for i in test_idx], c=c,
                                 labels=classes, class_weight=class_weight)
        scores.pop("predictions")
        rows.append({"fold": index + 1, **scores})
    return rows


def paired_test(model: Sequence[float], baseline: Sequence[float], *, confidence: float = 0.95
                ) -> dict[str, Any]:
    """Paired comparison of per-fold scores: mean difference, its interval, t-test.

    Returns ``n``, ``mean_difference`` (model − baseline), ``ci_low`` and
    ``ci_high`` (the ``confidence`` interval of the mean difference, Student's
    t with ``n − 1`` degrees of freedom), ``t`` and ``p_value`` (two-sided,
    scipy's ``ttest_rel``). With one fold, or folds that all differ by the
    same amount, there is no spread to test: ``t`` and ``p_value`` are None and
    the interval is the mean difference itself (one fold: None).
    """
    if len(model) != len(baseline) or not model:
        raise ValueError(f"model and baseline need the same, non-zero number of folds, "
                         f"got {len(model)} and {len(baseline)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    diffs = [float(m) - float(b) for m, b in zip(model, baseline, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    out: dict[str, Any] = {"n": n, "mean_difference": mean, "confidence": confidence,
                           "ci_low": None, "ci_high": None, "t": None, "p_value": None}
    if n < 2:
        return out
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd <= 1e-12:  # equal differences up to rounding: no spread to test
        return {**out, "ci_low": mean, "ci_high": mean}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    result = stats.ttest_rel([float(m) for m in model], [float(b) for b in baseline])
    return {**out, "ci_low": mean - half, "ci_high": mean + half, "t": float(result.statistic),
            "p_value": float(result.pvalue)}
