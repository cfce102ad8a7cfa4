"""The settings of a translation run as one tree (:class:`TranslationSettings`): the ``data`` (the parallel
files), the ``tokenizer`` (one vocabulary or one per language), the ``model`` (:class:`TranslationModelSettings`,
which becomes the :class:`~attnkit.models.seq2seq.Seq2SeqConfig` options) and the ``training``
(:class:`~attnkit.train.config.TranslationTrainConfig`, which also holds the vocabulary size, lowercasing and
sentence length). Every leaf is a :func:`~attnkit._checks.setting`, so ``attnkit train --task translate``'s flags
are built from them, and a run records the tree whole in its ``config.json`` (``settings``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import check_settings, dataclass_kwargs, setting, tree_from_flat
from attnkit.decoding import BEAM_SIZE, LENGTH_PENALTY
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.runs.resume import flat_config

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
        """The :class:`~attnkit.models.seq2seq.Seq2SeqConfig` options these settings give (tied embeddings): each
        field of the layer's config in ``layer``, the others as they are named."""
        from attnkit.blocks import TransformerLayerConfig

        options = dataclasses.asdict(self)
        layer = {f.name: options.pop(f.name) for f in dataclasses.fields(TransformerLayerConfig) if f.name in options}
        return {"layer": {**layer, "norm_first": not options.pop("post_norm")}, **options, "tie_embeddings": True}


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
        """The settings a run's ``config.json`` records: its ``settings`` tree, or (a run saved before it was
        recorded) its ``train_config``, tokenizers and model config; the data paths are its data record's
        (:mod:`attnkit.train.runs.data_record`), which finds data that moved."""
        if "settings" in config:
            return cls(**dataclass_kwargs(cls, {**config["settings"], "data": {}}, what="settings"))
        model = {key.rsplit(".", 1)[-1]: value for key, value in flat_config(config["model_config"]).items()}
        model["post_norm"] = not model.get("norm_first", True)
        return cls(tokenizer=TranslationTokenizerSettings(separate_vocab=not config.get("shared_tokenizer", True)),
                   model=tree_from_flat(TranslationModelSettings, model),
                   training=TranslationTrainConfig.from_dict(config.get("train_config", {})))
