"""The settings of a translation run as one tree: what ``attnkit train --task translate`` reads from its flags.

:class:`TranslationSettings` holds the ``tokenizer`` (one vocabulary or one per language), the ``model``
(:class:`TranslationModelSettings`, which becomes the :class:`~attnkit.models.seq2seq.Seq2SeqConfig`
options) and the ``training`` (:class:`~attnkit.train.config.TranslationTrainConfig`, which also holds the
vocabulary size, lowercasing and sentence length it has always recorded in a run's ``train_config``). Every
leaf is a :func:`~attnkit._checks.setting`, so the command's flags are built from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import check_settings, setting, tree_from_flat
from attnkit.train.config import TranslationTrainConfig

__all__ = ["TranslationSettings", "TranslationTokenizerSettings", "TranslationModelSettings", "BEAM_SIZE",
           "LENGTH_PENALTY"]

# How a translation run decodes unless told otherwise, once: ``attnkit translate`` and ``Translator.translate``
# (``load_run(RUN).translate``), as :func:`attnkit.decoding.beam_search`'s own defaults.
BEAM_SIZE = 4
LENGTH_PENALTY = 0.6


@dataclass(frozen=True)
class TranslationTokenizerSettings:
    """How sentences become subword ids (the BPE size and casing are the training config's fields)."""

    separate_vocab: bool = setting(False, "One vocabulary per language instead of a joint one.")


@dataclass(frozen=True)
class TranslationModelSettings:
    """The encoder-decoder Transformer: its layer (:class:`~attnkit.blocks.TransformerLayerConfig`'s fields)
    and depths."""

    d_model: int = setting(256, "Model width.", low=1)
    num_heads: int = setting(8, "Attention heads.", low=1)
    d_ff: int = setting(1024, "Feed-forward hidden width.", low=1)
    encoder_layers: int = setting(3, "Encoder layers.", low=1)
    decoder_layers: int = setting(3, "Decoder layers.", low=1)
    dropout: float = setting(0.1, "Dropout rate (0 trains faster on a CPU).", low=0, high=1, high_open=True)
    attention_dropout: float | None = setting(None, "Dropout on attention weights (default: the dropout rate).",
                                              low=0, high=1, high_open=True)
    activation_dropout: float | None = setting(None, "Dropout on the feed-forward hidden activations (default: "
                                               "the dropout rate).", low=0, high=1, high_open=True)
    post_norm: bool = setting(False, "Post-norm layers (the original Transformer) instead of pre-norm.")
    label_smoothing: float = setting(0.1, "Cross-entropy label smoothing.", low=0, high=1, high_open=True)

    def __post_init__(self) -> None:
        check_settings(self)

    def model_options(self) -> dict[str, Any]:
        """The :class:`~attnkit.models.seq2seq.Seq2SeqConfig` options these settings give (tied embeddings)."""
        layer = {"d_model": self.d_model, "num_heads": self.num_heads, "d_ff": self.d_ff, "dropout": self.dropout,
                 "attention_dropout": self.attention_dropout, "activation_dropout": self.activation_dropout,
                 "norm_first": not self.post_norm}
        return {"layer": layer, "encoder_layers": self.encoder_layers, "decoder_layers": self.decoder_layers,
                "label_smoothing": self.label_smoothing, "tie_embeddings": True}


TRAINING_FLAGS = ("vocab_size", "epochs", "max_tokens", "lr", "warmup_steps", "max_len", "time_budget_s",
                  "average_last", "seed")
"""The training config's fields the command sets (the others keep their defaults)."""


@dataclass(frozen=True)
class TranslationSettings:
    """Everything ``attnkit train --task translate`` is told, as one tree: ``tokenizer``, ``model``,
    ``training``."""

    tokenizer: TranslationTokenizerSettings = dataclasses.field(default_factory=TranslationTokenizerSettings)
    model: TranslationModelSettings = dataclasses.field(default_factory=TranslationModelSettings)
    training: TranslationTrainConfig = dataclasses.field(default_factory=TranslationTrainConfig)

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> TranslationSettings:
        """The tree from leaf values by name (a command's flags); other keys are ignored."""
        settings: TranslationSettings = tree_from_flat(cls, values)
        return settings
