"""The shared argument validators of attnkit._checks and the layers that use them."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from collections.abc import Callable

import pytest

from attnkit import _checks
from attnkit._checks import (
    dataclass_kwargs,
    nested_paths_hint,
    non_negative_int,
    one_of,
    positive_float,
    positive_int,
    probability,
)
from attnkit.blocks import FeedForward, TransformerLayerConfig
from attnkit.layers.bert import BertSelfOutput
from attnkit.layers.multi_head import MultiHeadAttention
from attnkit.layers.pooling import AttentionPooling
from attnkit.train.config import TrainConfig


@pytest.mark.parametrize("value", [1, 7, 10**9])
def test_positive_int_accepts(value: int) -> None:
    assert positive_int("d_model", value) == value


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "3", None])
def test_positive_int_rejects_with_the_fixed_message(value: object) -> None:
    with pytest.raises(ValueError, match=rf"^d_model must be a positive int, got {value!r}$".replace("(", r"\(")):
        positive_int("d_model", value)


def test_non_negative_int() -> None:
    assert non_negative_int("offset", 0) == 0
    for bad in (-1, False, 0.0):
        with pytest.raises(ValueError, match=r"^offset must be a non-negative int, got "):
            non_negative_int("offset", bad)


def test_positive_float() -> None:
    assert positive_float("layer_norm_eps", 1) == 1.0 and isinstance(positive_float("eps", 1), float)
    for bad in (0, -1e-5, True, "1e-5", float("nan")):
        with pytest.raises(ValueError, match=r"^layer_norm_eps must be a positive float, got "):
            positive_float("layer_norm_eps", bad)


def test_probability() -> None:
    assert probability("dropout", 0) == 0.0 and probability("dropout", 0.5) == 0.5
    for bad in (1.0, -0.1, True, "0.1", float("nan")):
        with pytest.raises(ValueError, match=r"^dropout must be a float in \[0, 1\), got "):
            probability("dropout", bad)


def test_one_of_lists_the_valid_names() -> None:
    assert one_of("pooling", "mean", ("attention", "mean")) == "mean"
    with pytest.raises(ValueError, match=r"^pooling must be one of \['attention', 'mean'\], got 'max'$"):
        one_of("pooling", "max", ("attention", "mean"))


def test_checks_imports_nothing_from_attnkit() -> None:
    tree = ast.parse(pathlib.Path(_checks.__file__).read_text())
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.startswith("attnkit")]


def test_no_private_copies_of_the_positive_int_check_remain() -> None:
    """The validators live in attnkit._checks; modules that were cleaned up keep no copy."""
    root = pathlib.Path(_checks.__file__).parent
    cleaned = [
        "positional.py", "decoding/search.py", "decoding/translation.py", "layers/image.py", "layers/additive.py",
        "layers/pooling.py",
        "layers/multi_head.py", "layers/relative.py", "layers/linear.py", "layers/bert.py",
        "blocks/feed_forward.py", "blocks/cache.py", "blocks/config.py", "models/config.py",
        "train/config.py",
    ]
    for name in cleaned:
        text = (root / name).read_text()
        assert "must be a positive int" not in text, name


@pytest.mark.parametrize(
    "build",
    [
        lambda: AttentionPooling(0),
        lambda: MultiHeadAttention(8, 0),
        lambda: BertSelfOutput(True),  # type: ignore[arg-type]
        lambda: FeedForward(8, -2),
        lambda: TrainConfig(epochs=0),
    ],
)
def test_callers_keep_their_messages(build: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="must be a positive int, got"):
        build()


@dataclasses.dataclass(frozen=True)
class Outer:
    size: int
    encoder: TransformerLayerConfig


def test_dataclass_kwargs_builds_a_nested_config_and_names_its_fields_by_path() -> None:
    layer = {"d_model": 8, "num_heads": 2, "d_ff": 16}
    built = dataclass_kwargs(Outer, {"size": 3, "encoder": layer})
    assert built["encoder"] == TransformerLayerConfig(8, 2, 16)  # a dict became the dataclass
    with pytest.raises(TypeError, match=r"^Outer field encoder\.d_ff must be an int, got '16' \(str\)$"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": {**layer, "d_ff": "16"}})
    with pytest.raises(ValueError, match=r"unknown Outer field\(s\) \['encoder\.dff'\]; valid fields are "
                                         r"\['encoder\.d_model', 'encoder\.num_heads', 'encoder\.d_ff'"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": {"d_model": 8, "num_heads": 2, "dff": 16}})
    with pytest.raises(ValueError, match=r"Outer is missing required field\(s\) \['encoder\.d_ff'\]"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": {"d_model": 8, "num_heads": 2}})
    with pytest.raises(ValueError, match=r"^Outer field encoder\.d_ff must be a positive int, got 0$"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": {**layer, "d_ff": 0}})
    with pytest.raises(ValueError, match=r"^Outer field encoder: d_model=8 must be divisible by num_heads=3$"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": {**layer, "num_heads": 3}})
    with pytest.raises(TypeError, match=r"Outer field encoder must be TransformerLayerConfig, got 5 \(int\)"):
        dataclass_kwargs(Outer, {"size": 3, "encoder": 5})
    given = TransformerLayerConfig(8, 2, 16)
    assert dataclass_kwargs(Outer, {"size": 3, "encoder": given})["encoder"] is given


def test_a_nested_field_given_flat_is_named_by_its_path() -> None:
    with pytest.raises(ValueError, match=r"unknown Outer field\(s\) \['d_ff', 'widht'\]; valid fields are "
                                         r"\['size', 'encoder'\]; did you mean encoder\.d_ff\?$"):
        dataclass_kwargs(Outer, {"size": 3, "d_ff": 16, "widht": 1})
    assert nested_paths_hint(Outer, ["num_heads", "d_model"]) == "; did you mean encoder.num_heads, encoder.d_model?"
    assert nested_paths_hint(Outer, ["size", "other"]) == ""


@dataclasses.dataclass(frozen=True)
class WithDefault:
    encoder: TransformerLayerConfig = dataclasses.field(
        default_factory=lambda: TransformerLayerConfig(8, 2, 16, dropout=0.2))


def test_a_partial_nested_dict_is_laid_over_the_fields_default() -> None:
    built = dataclass_kwargs(WithDefault, {"encoder": {"d_ff": 32}})["encoder"]
    assert built == TransformerLayerConfig(8, 2, 32, dropout=0.2)
    assert dataclass_kwargs(WithDefault, {}) == {}  # the whole default, left to the class
