"""One name per idea: the vocabulary table of docs/design.md against the command line and the configs.

Every flag the table names exists on some command; no command has a flag, and
no config (model, layer, training, data) has a field, that the table's last
column rules out. The negative controls show the check can fail.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from attnkit.layer_config import TransformerLayerConfig
from attnkit.models import MODELS
from attnkit.models.captioning.config import CaptionerConfig
from attnkit.models.seq2seq import Seq2SeqConfig
from attnkit.reference.models import ClassifierConfig
from attnkit.train.config import TrainConfig
from attnkit.train.tasks.caption.caption_settings import CaptionSettings
from attnkit.train.tasks.classify.pipeline import DataSettings
from attnkit.train.tasks.numpy.numpy_backend import NumpyTrainSettings
from attnkit.train.tasks.translate.translation import TranslationTrainConfig
from tests.cli.test_flag_hints import ALL_FLAGS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "design.md"
CONFIGS = [TransformerLayerConfig, ClassifierConfig, Seq2SeqConfig, CaptionerConfig, TrainConfig,
           NumpyTrainSettings, TranslationTrainConfig, CaptionSettings, DataSettings,
           *(config for _, config in MODELS.values())]


def vocabulary(page: str) -> list[tuple[str, set[str], set[str]]]:
    """``(idea, flags, names ruled out)`` of each row of the page's vocabulary table."""
    lines = [line.strip() for line in page.splitlines()]
    first = next(i for i, line in enumerate(lines) if line.startswith("| idea | name in code")) + 2
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        idea, _, flags, ruled_out = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((idea, set(re.findall(r"`(--[a-z-]+)`", flags)), set(re.findall(r"`([a-z_]+)`", ruled_out))))
    return rows


def field_names() -> set[str]:
    return {f.name for cls in CONFIGS for f in dataclasses.fields(cls)}


def problems(rows: list[tuple[str, set[str], set[str]]], flags: set[str], fields: set[str]) -> list[str]:
    found = []
    for idea, kept, ruled_out in rows:
        found += [f"{idea}: no command has {flag}" for flag in sorted(kept - flags)]
        found += [f"{idea}: a command has --{name.replace('_', '-')}" for name in sorted(ruled_out)
                  if f"--{name.replace('_', '-')}" in flags]
        found += [f"{idea}: a config has the field {name}" for name in sorted(ruled_out & fields)]
    return found


def test_the_table_holds_every_row() -> None:
    rows = vocabulary(PAGE.read_text(encoding="utf-8"))
    ideas = [idea for idea, _, _ in rows]
    assert len(rows) >= 12 and "attention heads" in ideas and "beam width" in ideas, ideas


def test_flags_and_config_fields_follow_the_vocabulary() -> None:
    assert problems(vocabulary(PAGE.read_text(encoding="utf-8")), ALL_FLAGS, field_names()) == []


@pytest.mark.parametrize("change, expected", [
    (lambda flags, fields: (flags | {"--heads"}, fields), "attention heads: a command has --heads"),
    (lambda flags, fields: (flags, fields | {"min_count"}),
     "keep words seen this often: a config has the field min_count"),
    (lambda flags, fields: (flags - {"--beam-size"}, fields), "beam width: no command has --beam-size"),
])
def test_the_check_finds_a_second_name(change, expected: str) -> None:  # type: ignore[no-untyped-def]
    flags, fields = change(set(ALL_FLAGS), field_names())
    assert expected in problems(vocabulary(PAGE.read_text(encoding="utf-8")), flags, fields)
