"""The settings a classification run records and a resume compares, as one tree: how text becomes ids
(``tokenizer``, :class:`~attnkit.train.config.DataSettings`) and how the classifier is trained (``training``,
:class:`~attnkit.train.config.TrainConfig`). Their :func:`~attnkit._checks.setting` leaves are flags of
``attnkit train``; ``--resume`` checks the ones given by the one rule (:mod:`attnkit.train.runs.resume`). The
data a run reads (:class:`ClassifyData`: its files, the shares split off, how they are read) are flags too, and
its data record (:mod:`attnkit.train.runs.data_record`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import flag_name, setting, setting_fields
from attnkit.data.readers import ReaderSettings
from attnkit.data.sources import DataSource
from attnkit.train.config import DataSettings, TrainConfig
from attnkit.train.tasks.classify.recipe import PRESET_HELP, PRESETS

__all__ = ["ClassifySettings", "ClassifyData", "ModelChoice", "DATA_PATHS", "DATA_KEYS"]


@dataclass(frozen=True)
class ModelChoice:
    """Where a classification run starts from besides its model (:func:`~attnkit.train.tasks.classify.start.recipe`
    decides from these with the model and the other settings): a preset, or a BERT folder to fine-tune."""

    preset: str = setting("fast", PRESET_HELP, choices=PRESETS)
    init_from: str | None = setting(
        None, "Fine-tune a local Hugging Face BERT folder (config.json, model.safetensors, tokenizer.json or "
              "vocab.txt) with --model bert; defaults become lr 5e-5, 3 epochs, max-len 128, no early stopping.")


@dataclass(frozen=True)
class _DataFiles:
    data: str | None = setting(None, "Labelled training data (file or folder).", path="any")
    val_path: str | None = setting(None, "Validation data (default: split from --data).", path="any", flag="--val")
    test_path: str | None = setting(None, "Test data (default: split from --data).", path="any", flag="--test")
    val_ratio: float = setting(DataSource.val_ratio, "Share of --data held out for validation when --val is absent.",
                               low=0, high=1, high_open=True)
    test_ratio: float = setting(DataSource.test_ratio, "Share of --data held out for testing when --test is absent.",
                                low=0, high=1, high_open=True)


@dataclass(frozen=True)
class ClassifyData(ReaderSettings, _DataFiles):
    """The labelled data of a classification run: the training file or folder, validation and test files or
    the shares of the training data split off for them (by the run's seed), and how the files are read
    (:class:`~attnkit.data.readers.ReaderSettings`)."""


DATA_PATHS = {f.name: flag_name(f.name, f.metadata["attnkit"]) for f, _ in setting_fields(ClassifyData)
              if f.metadata["attnkit"]["path"]}
"""Option -> flag of the files a classification run reads (recorded with their sizes and SHA-256)."""
DATA_KEYS = tuple(f.name for f, _ in setting_fields(ClassifyData) if f.name not in DATA_PATHS)
"""The data settings recorded beside them: the shares split off and how the files are read."""


@dataclass(frozen=True)
class ClassifySettings:
    """A classification run's ``data``, ``tokenizer`` and ``training`` settings."""

    data: ClassifyData = dataclasses.field(default_factory=ClassifyData)
    tokenizer: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> ClassifySettings:
        """The settings a run's config.json records (its data record, ``data_settings``, ``train_config``)."""
        return cls(data=ClassifyData.of(config.get("data") or {}), tokenizer=DataSettings(**config["data_settings"]),
                   training=TrainConfig.from_dict(config["train_config"]))
