"""The word counter's settings: one tree, whose leaves are ``attnkit train --task count``'s flags."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import check_settings, setting, tree_from_flat


@dataclass(frozen=True)
class CountData:
    text: str | None = setting(None, "Text file to count the words of.", path="file", required=True)


@dataclass(frozen=True)
class CountTraining:
    epochs: int = setting(2, "Passes over the text.", low=1)
    lr: float = setting(0.5, "Share of each pass's count added to the running count.", low=0, low_open=True)
    stop_after: int = setting(0, "Stop (as if interrupted) after this many epochs (0: never).", low=0)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class CountSettings:
    """Count the words of a text, one committed epoch at a time."""

    data: CountData = dataclasses.field(default_factory=CountData)
    training: CountTraining = dataclasses.field(default_factory=CountTraining)

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> CountSettings:
        settings: CountSettings = tree_from_flat(cls, {**config["settings"]["data"], **config["settings"]["training"]})
        return settings
