"""Settings fields that say everything once: their range is checked by the dataclass, and the training
commands' flags are built from them, so a field and its flag cannot disagree."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attnkit._checks import parse_duration, setting_fields, tree_from_flat
from attnkit.cli import cli
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.tasks.caption.caption_settings import CaptionSettings
from attnkit.train.tasks.translate.settings import TranslationModelSettings, TranslationSettings
from tests.support.cli import train_caption, train_translate


def _options(command: click.Command) -> dict[str, click.Option]:
    return {p.name: p for p in command.params if isinstance(p, click.Option) and p.name}


@pytest.mark.parametrize(("command", "cls", "count"), [(train_caption, CaptionSettings, 28),
                                                      (train_translate, TranslationSettings, 30)])
def test_each_settings_field_is_a_flag_with_its_default_help_and_range(command: click.Command, cls: type,
                                                                      count: int) -> None:
    options = _options(command)
    leaves = setting_fields(cls)
    assert len(leaves) == count
    def build(values: dict[str, Any]) -> Any:
        return tree_from_flat(cls, values)
    for f, _ in leaves:
        meta = f.metadata["attnkit"]
        option = options[f.name]
        assert option.default == f.default, f.name
        assert option.help == meta["help"], f.name
        if meta["low"] is not None and not meta["duration"]:
            below = meta["low"] - (0 if meta["low_open"] else 1)
            with pytest.raises(ValueError, match=f.name):
                build({f.name: type(f.default)(below) if f.default is not None else below})
            with pytest.raises(click.BadParameter):
                option.type.convert(below, option, None)


def test_the_dataclass_refuses_what_its_flag_refuses_naming_the_field_and_range() -> None:
    with pytest.raises(ValueError, match=r"epochs must be a positive int, got 0"):
        tree_from_flat(CaptionSettings, {"epochs": 0})
    with pytest.raises(ValueError, match=r"dropout must be a number >= 0 and < 1, got 1.0"):
        tree_from_flat(CaptionSettings, {"dropout": 1.0})
    with pytest.raises(ValueError, match=r"attend_with must be one of \['current_state', 'previous_state'\]"):
        tree_from_flat(CaptionSettings, {"attend_with": "next_state"})
    with pytest.raises(ValueError, match=r"vocab_size must be an int >= 8, got 4"):
        TranslationTrainConfig(vocab_size=4)
    with pytest.raises(ValueError, match=r"lr must be a number > 0, got 0.0"):
        TranslationTrainConfig(lr=0.0)
    with pytest.raises(ValueError, match=r"time_budget_s must be a number > 0, got -1"):
        TranslationTrainConfig(time_budget_s=-1)
    assert TranslationTrainConfig(time_budget_s=None).time_budget_s is None


@pytest.mark.parametrize(("given", "seconds"), [("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0), ("2", 120.0),
                                                ("0.5", 30.0)])
def test_a_time_budget_is_one_duration_in_seconds_everywhere(given: str, seconds: float,
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    assert parse_duration(given) == seconds
    seen: dict[str, Any] = {}

    def fake_run(settings: CaptionSettings, run: Any) -> None:
        seen["settings"] = settings

    monkeypatch.setattr("attnkit.train.tasks.caption.captioning.train_caption_run", fake_run)
    result = CliRunner().invoke(cli, ["train", "--task", "caption", "--out", str(tmp_path / "run"),
                                      "--time-budget", given, "--epochs", "3"])
    assert result.exit_code == 0, result.output
    assert seen["settings"].training.time_budget_s == seconds and seen["settings"].training.epochs == 3


@pytest.mark.parametrize("task", ["caption", "translate"])
def test_a_bad_duration_or_range_is_refused_by_its_flag(task: str, tmp_path: Any) -> None:
    (tmp_path / "src.txt").write_text("ein haus\n")
    (tmp_path / "tgt.txt").write_text("a house\n")
    command = ["train", "--task", task] + (["--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt")]
                                           if task == "translate" else [])
    for flag, value in (("--time-budget", "5 weeks"), ("--time-budget", "0"), ("--epochs", "0")):
        result = CliRunner().invoke(cli, [*command, "--out", str(tmp_path / "run"), flag, value])
        assert result.exit_code == 2 and flag in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_a_caption_run_records_its_settings_as_a_tree_and_reads_the_older_flat_form() -> None:
    settings = tree_from_flat(CaptionSettings, {"epochs": 3, "backbone": "resnet18", "min_frequency": 2, "images": "im",
                                          "captions": "c.txt"})
    tree = dataclasses.asdict(settings)
    assert set(tree) == {"data", "tokenizer", "model", "training"}
    assert (tree["training"]["epochs"], tree["model"]["backbone"], tree["tokenizer"]["min_frequency"],
            tree["data"]["images"]) == (3, "resnet18", 2, "im")
    assert CaptionSettings.from_saved(tree) == settings
    flat = {k: v for group in tree.values() for k, v in group.items() if k != "time_budget_s"}
    assert CaptionSettings.from_saved({**flat, "time_budget": 2}) == dataclasses.replace(
        settings, training=dataclasses.replace(settings.training, time_budget_s=120.0))
    with pytest.raises(TypeError, match="options field training.epochs must be an int"):
        CaptionSettings.from_saved({**tree, "training": {**tree["training"], "epochs": "3"}})


def test_the_translation_flags_build_one_tree_and_the_model_options_it_trains() -> None:
    settings = tree_from_flat(TranslationSettings, {"d_model": 64, "post_norm": True, "separate_vocab": True,
                                                    "lr": 1e-3, "vocab_size": 900, "warmup_steps": 4})
    assert settings.tokenizer.separate_vocab and settings.training.vocab_size == 900
    options = settings.model.model_options()
    assert options["layer"]["d_model"] == 64 and options["layer"]["norm_first"] is False
    assert settings.training == TranslationTrainConfig(lr=1e-3, vocab_size=900, warmup_steps=4)
    with pytest.raises(ValueError, match=r"attention_dropout must be a number >= 0 and < 1, got 1.5"):
        TranslationModelSettings(attention_dropout=1.5)
