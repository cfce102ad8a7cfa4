"""``--model-opt``: flat fields, dotted paths into a nested config (``layer.d_ff``), and what a run saves."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.cli.options import parse_model_options
from attnkit.models.document import DOCUMENT_LAYER
from attnkit.train.runs.rundir import committed_dir
from tests.support.cli import TINY, write_keyword_csv


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


def _parse(pairs: list[str], file_options: dict[str, Any] | None = None) -> dict[str, Any]:
    ctx = click.Context(click.Command("train"))
    if file_options is not None:
        ctx.meta["attnkit.model_options"] = file_options
    return parse_model_options(ctx, tuple(pairs))


def test_dotted_keys_set_fields_of_a_nested_config_over_the_config_file() -> None:
    file_layer = {"d_model": 32}
    options = _parse(["layer.d_ff=64", "num_layers=1", "layer.norm_first=false"],
                     {"layer": file_layer, "pooling": "mean"})
    assert options == {"layer": {"d_model": 32, "d_ff": 64, "norm_first": False}, "num_layers": 1,
                       "pooling": "mean"}
    assert file_layer == {"d_model": 32}  # the config file's table is copied, never changed
    assert _parse([], {"layer.d_model": 8}) == {"layer": {"d_model": 8}}  # a dotted key in a YAML file
    assert _parse(["layer.d_ff=1", 'layer={"d_model": 8}']) == {"layer": {"d_model": 8}}  # the last one wins


@pytest.mark.parametrize("pairs, message", [
    (["layer=3", "layer.d_ff=64"], r"layer.d_ff: layer is already set to 3, not a group of fields"),
    (["layer..d_ff=1"], r"'layer..d_ff' is not a field name or path"),
    (["layer.=1"], r"'layer.' is not a field name or path"),
])
def test_a_bad_path_is_named(pairs: list[str], message: str) -> None:
    with pytest.raises(click.BadParameter, match=message):
        _parse(pairs)


@pytest.mark.parametrize("opt, message", [
    ("layer.d_fff=3", "unknown DocumentClassifierConfig field(s) ['layer.d_fff']; valid fields are ['layer.d_model'"),
    ("d_model=8", "unknown document model option(s) ['d_model']"),
    ("d_model=8", "did you mean layer.d_model?"),
    ("layer.d_model=15", "field layer: d_model=15 must be divisible by num_heads=2"),
])
def test_train_names_an_unknown_or_bad_layer_field(tmp_path, data_csv, opt: str, message: str) -> None:
    result = CliRunner().invoke(cli, ["train", "--data", str(data_csv), "--out", str(tmp_path / "x"), *TINY,
                                      "--model-opt", opt])
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "x").exists()


def test_a_run_saves_the_whole_layer_and_loads_it_back(tmp_path, data_csv) -> None:
    out = tmp_path / "run"
    trained = CliRunner().invoke(cli, ["train", "--data", str(data_csv), "--out", str(out), *TINY,
                                       "--model-opt", "layer.d_ff=24", "--epochs", "1"])
    assert trained.exit_code == 0, trained.output
    layer = json.loads((committed_dir(out) / "config.json").read_text())["model_config"]["layer"]
    assert layer == {**DOCUMENT_LAYER.to_dict(), "d_model": 16, "num_heads": 2, "d_ff": 24, "dropout": 0.0}
    predicted = CliRunner().invoke(cli, ["predict", str(out), "a fine film"])
    assert predicted.exit_code == 0, predicted.output
