"""attnkit's text classifier as a scikit-learn estimator: ``fit(texts, labels)``, ``predict``, ``save``.

::

    from attnkit import TextClassifier

    clf = TextClassifier(epochs=5).fit(texts, labels)
    clf.predict(["a wonderful film"])        # array(['positive'], dtype=object)
    clf.save("runs/reviews")                 # a run directory: attnkit predict runs/reviews "..."

:class:`TextClassifier` trains with the recipe of ``attnkit train`` (the same
:func:`attnkit.train.pipeline.fit_classifier`, the same defaults per model,
see :mod:`attnkit.train.recipe`); each constructor argument is one of that
command's flags and None leaves the recipe's value. The fitted model is a
:class:`attnkit.Predictor`, so predictions are the ones ``attnkit predict``
prints for the saved run. It follows scikit-learn's conventions
(``__init__`` stores its arguments, ``get_params``/``set_params``,
``classes_``, ``score``), so it works in a ``Pipeline``, ``GridSearchCV`` and
``cross_val_score``. It needs scikit-learn (the ``tasks`` extra): importing
it without says so in one line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnkit._lazy import require_extra

require_extra("attnkit.TextClassifier", "sklearn")

from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402
from sklearn.utils.validation import check_is_fitted  # noqa: E402

from attnkit.api import Predictor  # noqa: E402

__all__ = ["TextClassifier"]

# constructor argument -> the TrainConfig / DataSettings field it sets (None: the recipe's value)
_TRAIN_FIELDS = ("epochs", "batch_size", "lr", "weight_decay", "warmup_ratio", "patience", "label_smoothing",
                 "seed", "device", "metric", "class_weight")
_DATA_FIELDS = ("tokenizer", "vocab_size", "min_frequency", "max_len")


class TextClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A text classifier trained by ``attnkit train``'s recipe, in scikit-learn's manner.

    Args:
        model: the registered model (``--model``; None: the default recipe's ``wide``).
        model_options: its config fields (``--model-opt KEY=VALUE``), e.g. ``{"layer": {"d_model": 64}}``.
        epochs, batch_size, lr, weight_decay, warmup_ratio, patience, label_smoothing, seed, metric,
            class_weight: the training flags of the same names (None: the recipe's value).
        device: where to train (``"cpu"``, ``"cuda"``, ``"auto"``); the fitted model is kept on the CPU.
        tokenizer, vocab_size, min_frequency, max_len: how text becomes token ids (the flags of the
            same names).
        val_ratio: the share of ``fit``'s texts held out for early stopping and the decision
            (``--val-ratio``; 0: train on all of them).

    Attributes:
        classes_: the labels seen by ``fit``, sorted; the columns of :meth:`predict_proba`.
        predictor_: the fitted :class:`attnkit.Predictor` (its ``model``, ``config``, ``explain``).

    Shape:
        ``predict(X)`` returns ``(N,)`` labels and ``predict_proba(X)`` ``(N, C)`` for N texts and
        the C classes of ``classes_``.
    """

    def __init__(self, model: str | None = None, model_options: dict[str, Any] | None = None, *,
                 epochs: int | None = None, batch_size: int | None = None, lr: float | None = None,
                 weight_decay: float | None = None, warmup_ratio: float | None = None,
                 patience: int | None = None, label_smoothing: float | None = None, seed: int = 0,
                 device: str = "cpu", metric: str | None = None, class_weight: str | None = None,
                 tokenizer: str | None = None, vocab_size: int | None = None, min_frequency: int | None = None,
                 max_len: int | None = None, val_ratio: float = 0.1) -> None:
        self.model = model
        self.model_options = model_options
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.warmup_ratio = warmup_ratio
        self.patience = patience
        self.label_smoothing = label_smoothing
        self.seed = seed
        self.device = device
        self.metric = metric
        self.class_weight = class_weight
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.min_frequency = min_frequency
        self.max_len = max_len
        self.val_ratio = val_ratio

    def fit(self, X: Sequence[str], y: Sequence[Any]) -> TextClassifier:
        """Train on texts ``X`` with labels ``y`` (any hashable values; ``classes_`` keeps them)."""
        from attnkit.data.batching import LabelVocab
        from attnkit.data.readers import Example
        from attnkit.data.sources import split_examples
        from attnkit.train.pipeline import DataSettings, fit_classifier
        from attnkit.train.recipe import DEFAULT_MODEL, data_defaults

        texts = _texts(X)
        labels = np.asarray(y).reshape(-1)
        if len(texts) != len(labels):
            raise ValueError(f"X and y must be as long, got {len(texts)} texts and {len(labels)} labels")
        self.classes_ = np.unique(labels)
        names = [str(c) for c in self.classes_.tolist()]
        if len(set(names)) != len(names):
            raise ValueError(f"y holds labels that read the same as text: {names}")
        model_name = self.model or DEFAULT_MODEL
        train_config = _train_config(model_name, {f: getattr(self, f) for f in _TRAIN_FIELDS})
        given = {f: getattr(self, f) for f in _DATA_FIELDS if getattr(self, f) is not None}
        data = DataSettings(**{**data_defaults(model_name), **given})
        examples = [Example(t, str(label)) for t, label in zip(texts, labels.tolist(), strict=True)]
        train, val, _ = split_examples(examples, val=self.val_ratio, test=0.0, seed=train_config.seed)
        result = fit_classifier(train, val, [], model_name=model_name, model_options=dict(self.model_options or {}),
                                train_config=train_config, data=data, quiet=True,
                                label_vocab=LabelVocab(names))
        config = {"model_name": model_name, "model_config": result.model_config,
                  "train_config": train_config.to_dict(), "data_settings": dataclasses.asdict(data),
                  "data": {"source": "TextClassifier.fit", "examples": len(examples)},
                  "epochs_run": len(result.history),
                  "metrics": {"test": None, "decision": result.extra.get("decision")}}
        self.predictor_ = Predictor(Path("."), config,
                                    torch_parts=(result.model, result.tokenizer, result.label_vocab))
        return self

    def predict_proba(self, X: Sequence[str]) -> np.ndarray:
        """Class probabilities ``(len(X), len(classes_))``; column ``j`` is ``classes_[j]``."""
        check_is_fitted(self, "predictor_")
        return self.predictor_.predict_proba(_texts(X))

    def predict(self, X: Sequence[str]) -> np.ndarray:
        """The predicted label of each text, as given to ``fit`` (what ``attnkit predict`` prints first)."""
        check_is_fitted(self, "predictor_")
        index = {str(c): i for i, c in enumerate(self.classes_.tolist())}
        return self.classes_[[index[name] for name in self.predictor_.predict(_texts(X))]]

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the fitted classifier as a run directory that ``attnkit predict``, ``evaluate``,
        ``visualize`` and :func:`attnkit.load_run` read (``overwrite`` as in
        :meth:`attnkit.Predictor.save_pretrained`). Returns ``path``."""
        check_is_fitted(self, "predictor_")
        return self.predictor_.save_pretrained(path, overwrite=overwrite)


def _texts(X: Any) -> list[str]:
    """``X`` as a list of texts: a list, tuple, 1-D array or Series of strings (a single string is refused)."""
    if isinstance(X, str):
        raise TypeError("X must be a sequence of texts, got a single str (wrap it in a list)")
    values = np.asarray(X, dtype=object)
    if values.ndim == 2 and values.shape[1] == 1:  # one text column, as a ColumnTransformer passes it
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError(f"X must be a 1-D sequence of texts, got shape {values.shape}")
    bad = [i for i, t in enumerate(values.tolist()) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"X must hold strings; item {bad[0]} is {type(values[bad[0]]).__name__}")
    return [str(t) for t in values.tolist()]


def _train_config(model_name: str, given: dict[str, Any]) -> Any:
    """The TrainConfig of ``model_name``'s recipe with the given (non-None) fields over it (as ``train`` builds it)."""
    from attnkit.train.config import TrainConfig
    from attnkit.train.recipe import train_defaults

    return TrainConfig.from_dict({**train_defaults(model_name), **{k: v for k, v in given.items() if v is not None}})
