"""The settings of a translation run as one tree (:class:`TranslationSettings`): the ``data`` (the parallel
files), the ``tokenizer`` (one vocabulary or one per language), the ``model`` (:class:`TranslationModelSettings`,
which becomes the :class:`~attnkit.models.seq2seq.Seq2SeqConfig` options) and the ``training``
(:class:`~attnkit.train.config.TranslationTrainConfig`, which also holds the vocabulary size, lowercasing and
sentence length a run records in its ``train_config``). Every leaf is a :func:`~attnkit._checks.setting`, so
``attnkit train --task translate``'s flags are built from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import check_settings, setting
from attnkit.decoding import BEAM_SIZE, LENGTH_PENALTY
from attnkit.train.config import TranslationTrainConfig

__all__ = ["TranslationSettings", "TranslationDataSettings", "TranslationTokenizerSettings",
           "TranslationModelSettings", "TranslationDecoding", "DECODING"]

@dataclass(frozen=True)
class TranslationDecoding:
    """How a translation run decodes unless told otherwise: ``attnkit translate``'s flags and
    ``Translator.translate``'s (``load_run(RUN).translate``) defaults, :func:`attnkit.decoding.beam_search`'s
    own (:data:`attnkit.decoding.BEAM_SIZE`, :data:`attnkit.decoding.LENGTH_PENALTY`, stated once there)."""

    beam_size: int = setting(BEAM_SIZE, "Beam size (1: greedy).", low=1)
    length_penalty: float = setting(LENGTH_PENALTY, "GNMT length-penalty exponent alpha (0: raw log-probability).",
                                    low=0)

    def __post_init__(self) -> None:
        check_settings(self)


DECODING = TranslationDecoding()


@dataclass(frozen=True)
class TranslationDataSettings:
    """The parallel corpus: training sentences, and optionally validation sentences (both sides or none)."""

    src: str | None = setting(None, "Training source sentences, one per line (plain or .gz).", path="file",
                             required=True)
    tgt: str | None = setting(None, "Training target sentences, line-aligned with --src.", path="file",
                             required=True)
    val_src: str | None = setting(None, "Validation source sentences.", path="file")
    val_tgt: str | None = setting(None, "Validation target sentences.", path="file")

    def __post_init__(self) -> None:
        if (self.val_src is None) != (self.val_tgt is None):
            raise ValueError("give both `val_src` and `val_tgt`, or neither")


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


@dataclass(frozen=True)
class TranslationSettings:
    """Train a Transformer translation model on a parallel corpus.

    \b
    Example:
      attnkit train --task translate --src train.de.gz --tgt train.en.gz \\
          --val-src val.de.gz --val-tgt val.en.gz --out runs/de-en --time-budget 60
    """

    data: TranslationDataSettings = dataclasses.field(default_factory=TranslationDataSettings)
    tokenizer: TranslationTokenizerSettings = dataclasses.field(default_factory=TranslationTokenizerSettings)
    model: TranslationModelSettings = dataclasses.field(default_factory=TranslationModelSettings)
    training: TranslationTrainConfig = dataclasses.field(default_factory=TranslationTrainConfig)

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> TranslationSettings:
        """The settings a run's ``config.json`` records: its ``train_config``, tokenizers and model config (the
        data paths are its data record's, :mod:`attnkit.train.runs.data_record`)."""
        layer = config["model_config"].get("layer", {})
        defaults = TranslationModelSettings()
        model = TranslationModelSettings(
            **{k: layer.get(k, getattr(defaults, k)) for k in ("d_model", "num_heads", "d_ff", "dropout",
                                                               "attention_dropout", "activation_dropout")},
            post_norm=not layer.get("norm_first", True),
            **{k: config["model_config"].get(k, getattr(defaults, k)) for k in ("encoder_layers", "decoder_layers",
                                                                                 "label_smoothing")})
        return cls(tokenizer=TranslationTokenizerSettings(separate_vocab=not config.get("shared_tokenizer", True)),
                   model=model, training=TranslationTrainConfig.from_dict(config.get("train_config", {})))
