"""attnkit's text classifier as a scikit-learn estimator: ``fit(texts, labels)``, ``predict``, ``save``.

::

    from attnkit import TextClassifier

    clf = TextClassifier(epochs=5).fit(texts, labels)
    clf.predict(["a wonderful film"])        # array(['positive'], dtype=object)
    clf.save("runs/reviews")                 # a run directory: attnkit predict runs/reviews "..."

:class:`TextClassifier` trains with the recipe of ``attnkit train`` (the same
:func:`attnkit.train.tasks.classify.pipeline.fit_classifier`, the same defaults per model,
see :mod:`attnkit.train.tasks.classify.recipe`); each constructor argument is one of that
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
import inspect
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnkit._lazy import require_extra

require_extra("attnkit.TextClassifier", "sklearn")

from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402
from sklearn.utils.multiclass import check_classification_targets  # noqa: E402
from sklearn.utils.validation import check_is_fitted, column_or_1d  # noqa: E402

from attnkit.api import Predictor  # noqa: E402
from attnkit.train.config import USER_DATA_FIELDS, USER_TRAIN_FIELDS  # noqa: E402
from attnkit.train.tasks.classify.settings import ModelChoice  # noqa: E402

__all__ = ["TextClassifier"]

# the training settings whose default is not None (the recipe's value)
_TRAIN_DEFAULTS = {"seed": 0, "device": "cpu"}
# the parameters that choose where a run starts from, and every training and tokenizer setting a flag sets
_CHOICE_FIELDS = tuple(f.name for f in dataclasses.fields(ModelChoice))
_SETTING_FIELDS = (*USER_TRAIN_FIELDS, *USER_DATA_FIELDS)


class TextClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A text classifier trained by ``attnkit train``'s recipe, in scikit-learn's manner.

    Args:
        model: the registered model (``--model``; None: the default recipe's ``wide``, or ``bert``
            when fine-tuning).
        model_options: its config fields (``--model-opt KEY=VALUE``), e.g. ``{"layer": {"d_model": 64}}``.
        preset: ``"fast"`` (None: the default recipe), ``"balanced"`` or ``"accurate"``: fine-tune the
            all-MiniLM-L6-v2 folder of the ``pretrained`` extra with that preset's settings (``--preset``,
            :data:`attnkit.train.tasks.classify.recipe.PRETRAINED_PRESETS`; without the extra, ``fit``
            raises the one-line install hint).
        init_from: a Hugging Face BERT folder to fine-tune (``--init-from``), with ``model`` None or
            ``"bert"``. Fine-tuning uses the folder's tokenizer: ``tokenizer``, ``vocab_size`` and
            ``min_frequency`` are refused beside it, and the other settings default to fine-tuning's
            (:data:`attnkit.train.tasks.classify.finetune.FINETUNE_DEFAULTS`, ``max_len`` 128).
        epochs, batch_size, lr, ...: every training setting ``attnkit train`` has a flag for, by its
            field name (:data:`attnkit.train.config.USER_TRAIN_FIELDS`, each a keyword argument; what each
            means: ``attnkit train --help``, docs/cli.md "Training"). None leaves the recipe's value, except
            ``seed`` (0: the seed of the validation split, the weights, dropout and the batch order) and
            ``device`` (``"cpu"``; the fitted model is kept on the CPU).
        tokenizer: how text becomes token ids (``--tokenizer``). Like the three below, None leaves the
            recipe's value.
        vocab_size: the most token ids the tokenizer keeps (``--vocab-size``).
        min_frequency: how often a token must occur to be kept (``--min-frequency``).
        max_len: the most tokens read of a text (``--max-len``).
        val_ratio: the share of ``fit``'s texts held out for early stopping and the decision
            (``--val-ratio``; 0: train on all of them).
        max_memory: the memory the fit may plan to use (``--max-memory``): bytes, or a size such as
            ``"4GB"`` or ``"800MB"``; None: 80% of the memory available when ``fit`` starts. Above it the
            n-gram half keeps fewer bigram rows, and says so, or ``fit`` is refused before anything
            large is allocated (:mod:`attnkit.train.memory_budget`).

    Attributes:
        classes_: the labels seen by ``fit``, sorted; the columns of :meth:`predict_proba`.
        predictor_: the fitted :class:`attnkit.Predictor` (its ``model``, ``config``, ``explain``).

    Shape:
        ``predict(X)`` returns ``(N,)`` labels and ``predict_proba(X)`` ``(N, C)`` for N texts and
        the C classes of ``classes_``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # scikit-learn reads the parameters off the signature (_SIGNATURE, set below): stored as given
        try:
            bound = _SIGNATURE.bind(self, *args, **kwargs)
        except TypeError as err:
            raise TypeError(f"TextClassifier: {err} (its parameters: {', '.join(list(_SIGNATURE.parameters)[1:])})"
                            ) from None
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)

    def fit(self, X: Sequence[str], y: Sequence[Any]) -> TextClassifier:
        """Train on texts ``X`` with labels ``y`` (``classes_`` keeps them as given).

        ``y`` holds one class label per text, as scikit-learn's classifiers take it (binary or
        multiclass): a missing label (None, NaN) and a continuous or multi-output target are refused
        in a ValueError. A fit that fails leaves the estimator as it was: fitted as before, or not fitted.
        """
        from attnkit.data.batching import LabelVocab
        from attnkit.data.readers import Example
        from attnkit.data.sources import split_examples
        from attnkit.train.tasks.classify.pipeline import fit_classifier

        labels = _labels(y)
        texts = _texts(X)
        if len(texts) != len(labels):
            raise ValueError(f"X and y must be as long, got {len(texts)} texts and {len(labels)} labels")
        classes = np.unique(labels)
        names = [str(c) for c in classes.tolist()]
        if len(set(names)) != len(names):
            raise ValueError(f"y holds labels that read the same as text: {names}")
        limit = self._memory_limit()
        _cap_tokenizer_threads()
        recipe = self._recipe()
        examples = [Example(t, str(label)) for t, label in zip(texts, labels.tolist(), strict=True)]
        train, val, _ = split_examples(examples, val=self.val_ratio, test=0.0, seed=recipe.train_config.seed)
        result = fit_classifier(train, val, [], model_name=recipe.model_name, model_options=recipe.model_options,
                                train_config=recipe.train_config, data=recipe.data, quiet=True,
                                label_vocab=LabelVocab(names), tokenizer=recipe.tokenizer,
                                init_model=recipe.init_model(), max_memory=limit)
        config = {"model_name": recipe.model_name, "model_config": result.model_config,
                  "train_config": recipe.train_config.to_dict(), "data_settings": dataclasses.asdict(recipe.data),
                  "data": {"source": "TextClassifier.fit", "examples": len(examples)},
                  "epochs_run": len(result.history),
                  "metrics": {"test": None, "decision": result.extra.get("decision")},
                  **({"init_from": recipe.folder} if recipe.folder else {})}
        predictor = Predictor(None, config, torch_parts=(result.model, result.tokenizer, result.label_vocab))
        # only now, with the model trained: a fit that failed above left the earlier state whole
        self.classes_, self.predictor_ = classes, predictor
        return self

    def _memory_limit(self) -> int | None:
        """``max_memory`` in bytes (None: the pipeline's default share of the available memory)."""
        from attnkit.train.memory_budget import parse_memory_size

        return None if self.max_memory is None else parse_memory_size(self.max_memory, name="max_memory")

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: ``X`` is a 1-D sequence of texts (strings), ``y`` the labels fit requires."""
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags

    def _recipe(self) -> Any:
        """What ``fit`` trains (:func:`attnkit.train.tasks.classify.start.recipe`, as ``attnkit train`` chooses it):
        the recipe of ``model`` with this estimator's arguments over it, or fine-tuning's when a BERT folder is
        given (``preset='balanced'`` or ``'accurate'``, ``init_from``); arguments that cannot go together are
        refused by name."""
        from attnkit._checks import spell_settings
        from attnkit.train.tasks.classify.start import recipe

        given = {f: getattr(self, f) for f in ("model", *_CHOICE_FIELDS, *_SETTING_FIELDS)}
        try:
            return recipe(given, self.model_options or {},
                          extra=("attnkit.TextClassifier(preset={!r})", "choose preset='fast'"))
        except (ValueError, OSError) as err:  # settings named as the arguments they are here
            spelt = spell_settings(str(err))
            if spelt == str(err):
                raise
            raise type(err)(spelt) from None

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


def _cap_tokenizer_threads() -> None:
    """Give the tokenizers' thread pool (Rust's rayon, ``RAYON_NUM_THREADS``) the cap ``OMP_NUM_THREADS`` sets.

    joblib's workers (``cross_val_score(n_jobs=...)``, ``GridSearchCV``) start with ``OMP_NUM_THREADS`` at
    their share of the CPUs, which torch follows; rayon reads only its own variable, so without it every
    worker's tokenizer would start a thread per CPU. A ``RAYON_NUM_THREADS`` already set is kept; the pool
    reads it when it starts, at the process's first tokenizer.
    """
    cap = os.environ.get("OMP_NUM_THREADS", "")
    if cap.isdigit() and int(cap) > 0:
        os.environ.setdefault("RAYON_NUM_THREADS", cap)


def _labels(y: Any) -> np.ndarray:
    """``y`` as a 1-D array of class labels, checked by scikit-learn's rules for classifiers (binary or
    multiclass; a one-column ``y`` is read as 1-D with scikit-learn's DataConversionWarning). A missing label
    (None, NaN, pandas' NA) is named with its index first, in scikit-learn's words (``Input y contains NaN``), read
    from ``y`` as given: a list of strings and NaN would otherwise make the class ``'nan'``."""
    if y is None:
        raise ValueError("TextClassifier requires y to be passed, but the target y is None: give one label "
                         "per text")
    given = np.asarray(y, dtype=object)  # as given: a list of str and NaN would become the str 'nan'
    if given.ndim == 1 or (given.ndim == 2 and given.shape[1] == 1):
        values = given.ravel().tolist()
        missing = [i for i, v in enumerate(values) if _missing(v)]
        if missing:
            raise ValueError(f"Input y contains {_missing(values[missing[0]])} at item {missing[0]} "
                             f"({len(missing)} labels missing in all): every text needs a class label")
    labels = column_or_1d(y, warn=True)
    check_classification_targets(labels)
    return labels


def _missing(value: Any) -> str:
    """What missing value ``value`` is (``None``, ``NaN``, ``NA``: pandas' ``pd.NA`` and ``NaT``), or ``""``."""
    if value is None:
        return "None"
    if type(value).__name__ in ("NAType", "NaTType"):
        return "NA"
    return "NaN" if isinstance(value, float | np.floating) and math.isnan(value) else ""


def _signature() -> inspect.Signature:
    """``TextClassifier.__init__``'s parameters: ``model`` and ``model_options``, then keyword arguments:
    where the run starts from (:class:`~attnkit.train.tasks.classify.settings.ModelChoice`: ``preset``,
    ``init_from``; None: ``fast``, none), every training and data setting a flag sets (:data:`USER_TRAIN_FIELDS`,
    :data:`USER_DATA_FIELDS`), ``val_ratio`` and ``max_memory``; a new setting is a parameter."""
    positional = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
                  for name in ("model", "model_options")]
    keyword = {**dict.fromkeys(_CHOICE_FIELDS), **{f: _TRAIN_DEFAULTS.get(f) for f in _SETTING_FIELDS},
               "val_ratio": 0.1, "max_memory": None}
    return inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *positional,
                              *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value)
                                for name, value in keyword.items())])


_SIGNATURE = _signature()
TextClassifier.__init__.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
