"""The default recipe: what ``attnkit train`` and ``attnkit cv`` run when no flag says otherwise.

The default model is ``wide`` (:class:`attnkit.models.WideDeepClassifier`:
attention pooling over word embeddings plus naive Bayes over word 1-2-grams),
trained with :class:`~attnkit.train.TrainConfig`'s defaults except for the
settings in :data:`MODEL_TRAIN_DEFAULTS`, which suit that model (an embedding
bag learns at a higher rate than a recurrent or Transformer stack, and larger
batches halve the optimizer steps that dominate its cost on a CPU). A flag or
a config-file value still overrides each of them; a resumed run keeps the
settings it was saved with. The figures of this recipe beside the TF-IDF
baseline, and where it loses, are in the README (``evals/default_recipe.py``).

This module imports nothing heavy: the command line reads it to show its help.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_MODEL", "MODEL_TRAIN_DEFAULTS", "MODEL_DATA_DEFAULTS", "train_defaults", "data_defaults"]

DEFAULT_MODEL = "wide"
"""The registered model ``train`` and ``cv`` build without ``--model``."""

MODEL_TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "wide": {"lr": 5e-3, "batch_size": 64},
}
"""TrainConfig fields that differ from its defaults for a model, by registered model name."""


MODEL_DATA_DEFAULTS: dict[str, dict[str, Any]] = {
    "wide": {"max_len": 1024, "vocab_size": 100_000},
}
"""DataSettings fields that differ from its defaults for a model: the wide model reads whole reviews
(a linear half over n-grams loses what truncation cuts; IMDB: 88.5% at 256 tokens and 20,000 words,
90.6% at 1,024 and 100,000, one epoch each) at a cost linear in the length."""


def data_defaults(model_name: str) -> dict[str, Any]:
    """The DataSettings fields of ``model_name``'s recipe (empty: DataSettings' own defaults)."""
    return dict(MODEL_DATA_DEFAULTS.get(model_name, {}))


def train_defaults(model_name: str) -> dict[str, Any]:
    """The TrainConfig fields of ``model_name``'s recipe (empty: TrainConfig's own defaults)."""
    return dict(MODEL_TRAIN_DEFAULTS.get(model_name, {}))
