"""The settings a classification run records and a resume compares, as one tree: how text becomes ids
(``tokenizer``, :class:`~attnkit.train.config.DataSettings`) and how the classifier is trained (``training``,
:class:`~attnkit.train.config.TrainConfig`). Their :func:`~attnkit._checks.setting` leaves are flags of
``attnkit train``; ``--resume`` checks the ones given by the one rule (:mod:`attnkit.train.runs.resume`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit.train.config import DataSettings, TrainConfig

__all__ = ["ClassifySettings"]


@dataclass(frozen=True)
class ClassifySettings:
    """A classification run's ``tokenizer`` and ``training`` settings."""

    tokenizer: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> ClassifySettings:
        """The settings a run's config.json records (``data_settings``, ``train_config``)."""
        return cls(DataSettings(**config["data_settings"]), TrainConfig.from_dict(config["train_config"]))
