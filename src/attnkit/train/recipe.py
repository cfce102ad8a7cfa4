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

__all__ = ["DEFAULT_MODEL", "MODEL_TRAIN_DEFAULTS", "train_defaults"]

DEFAULT_MODEL = "wide"
"""The registered model ``train`` and ``cv`` build without ``--model``."""

MODEL_TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "wide": {"lr": 5e-3, "batch_size": 64},
}
"""TrainConfig fields that differ from its defaults for a model, by registered model name."""


def train_defaults(model_name: str) -> dict[str, Any]:
    """The TrainConfig fields of ``model_name``'s recipe (empty: TrainConfig's own defaults)."""
    return dict(MODEL_TRAIN_DEFAULTS.get(model_name, {}))
