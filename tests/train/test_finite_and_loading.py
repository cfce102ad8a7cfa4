"""Finite or nothing: a diverging training stops (or skips the step) and commits nothing; a load refuses
non-finite weights and labels, tokenizers and vocabularies that disagree with the model, naming the file."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from attnkit._finite import MAX_SKIPS_IN_A_ROW, NonFiniteError, StepGuard
from attnkit.cli import cli
from attnkit.data.tokenization import save_tokenizer, train_tokenizer
from attnkit.train.config import TrainConfig
from attnkit.train.loop.trainer import Trainer
from attnkit.train.runs.checkpoint import RunFileError, committed_dir, load_checkpoint
from attnkit.train.tasks.numpy.numpy_backend import load_numpy_run
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import recorded
from tests.train.test_train_helpers import TinyClassifier, TokenDataset, collate


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


# --- the step guard --------------------------------------------------------------------------------


def test_guard_stops_or_skips_and_counts() -> None:
    assert StepGuard().allow(0.5, 1.0, epoch=1, step=1)
    with pytest.raises(NonFiniteError, match=r"epoch 3, step 7: the loss is nan .*lr.*set `on_nan` to skip-step"):
        StepGuard("stop").allow(math.nan, 1.0, epoch=3, step=7)
    guard = StepGuard("skip-step", max_skips=3)
    assert not guard.allow(1.0, math.inf, epoch=1, step=1)
    assert not guard.allow(math.nan, math.nan, epoch=1, step=2)
    assert guard.allow(1.0, 1.0, epoch=1, step=3)  # a finite step resets the count in a row
    assert (guard.skipped, guard.in_a_row) == (2, 0)
    guard.allow(math.nan, 1.0, epoch=1, step=4)
    guard.allow(math.nan, 1.0, epoch=1, step=5)
    with pytest.raises(NonFiniteError, match="3th non-finite step in a row"):
        guard.allow(math.nan, 1.0, epoch=1, step=6)
    with pytest.raises(ValueError, match="on_nan must be one of"):
        TrainConfig(on_nan="ignore")


# --- the torch loop --------------------------------------------------------------------------------


def _poisoned_trainer(on_nan: str, bad_steps: set[int], epochs: int = 2) -> Trainer:
    """A trainer whose task returns a NaN loss on the given (1-based) steps."""
    torch.manual_seed(0)
    train = TokenDataset(64, seed=1)
    trainer = Trainer(TinyClassifier(dropout=0.0), TrainConfig(epochs=epochs, batch_size=16, on_nan=on_nan, seed=0,
                                                                device="cpu"),
                      train, TokenDataset(16, seed=2), collate_fn=collate, quiet=True)
    step = trainer.task.step
    calls = [0]

    def poisoned(net, batch):
        out = step(net, batch)
        calls[0] += 1
        if calls[0] in bad_steps:
            out.loss = out.loss * float("nan")
        return out

    trainer.task.step = poisoned  # type: ignore[method-assign]
    return trainer


def test_trainer_stops_on_a_nan_loss_naming_epoch_step_and_flag() -> None:
    trainer = _poisoned_trainer("stop", {6})  # 4 steps per epoch: epoch 2, step 6
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(NonFiniteError,
                       match=r"epoch 2, step 6: the loss is nan.*learning rate `lr`.*set `on_nan` to skip-step"):
        trainer.fit()
    assert len(trainer.history) == 1  # epoch 1 finished, epoch 2 never recorded
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_skip_step_leaves_the_weights_and_counts_the_skip() -> None:
    trainer = _poisoned_trainer("skip-step", {3})
    weights = []
    step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        weights.append(trainer.model.classifier.weight.detach().clone())
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step  # type: ignore[method-assign]
    history = trainer.fit()
    assert [h["train_skipped_steps"] for h in history] == [1, 0]
    assert len(weights) == 2 * 4 - 1  # one optimizer step fewer
    assert all(math.isfinite(h["train_loss"]) for h in history)


def test_skip_step_stops_after_too_many_in_a_row() -> None:
    trainer = _poisoned_trainer("skip-step", set(range(2, 2 + MAX_SKIPS_IN_A_ROW)), epochs=4)
    with pytest.raises(NonFiniteError, match=f"{MAX_SKIPS_IN_A_ROW}th non-finite step in a row"):
        trainer.fit()


# --- the command line: a diverged training never replaces a good run -------------------------------


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, data_csv) -> Path:
    out = tmp_path_factory.mktemp("runs") / "good"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    return out


def test_lr_1e30_overwrite_keeps_the_good_run(good_run, data_csv, tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    weights = committed_dir(run) / "model.safetensors"
    before = weights.read_bytes()
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY, "--lr", "1e30", "--overwrite")
    assert result.exit_code != 0
    assert "training diverged at epoch 1, step" in result.output, result.output
    # the library names its settings; train writes them as its own flags
    assert "learning rate --lr or clip the gradient norm with --clip-norm, or set --on-nan to skip-step" \
        in result.output, result.output
    assert "Traceback" not in result.output
    assert (committed_dir(run) / "model.safetensors").read_bytes() == before
    assert json.loads((committed_dir(run) / "config.json").read_text())["status"] == "done"


def test_skip_step_never_commits_a_diverged_model(data_csv, tmp_path) -> None:
    run = tmp_path / "run"
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY, "--lr", "1e30",
                     "--on-nan", "skip-step")
    assert result.exit_code != 0 and "training diverged" in result.output, result.output
    assert not (run / "checkpoints").exists()


def test_numpy_backend_stops_and_commits_no_diverged_epoch(data_csv, tmp_path) -> None:
    run = tmp_path / "np"
    result = _invoke("train", "--backend", "numpy", "--data", str(data_csv), "--out", str(run), "--epochs", "2",
                     "--lr", "1e30")
    assert result.exit_code != 0
    assert "training diverged at epoch 1, step 2" in result.output, result.output
    assert "set --on-nan to skip-step" in result.output and "`" not in result.output, result.output
    assert not (run / "checkpoints").exists()
    result = _invoke("train", "--backend", "numpy", "--data", str(data_csv), "--out", str(run), "--epochs", "2",
                     "--lr", "1e30", "--on-nan", "skip-step")
    assert result.exit_code != 0 and "training diverged by epoch 2" in result.output, result.output
    progress = json.loads((committed_dir(run) / "config.json").read_text())["progress"]
    assert progress["epoch"] == 1  # the epoch that ended finite, and no more


# --- loading: the files agree with the model, or the load is refused naming the file ----------------


@pytest.fixture()
def run_copy(good_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    return run


def _replace(path: Path, text: str) -> None:
    path.unlink()  # committed files may be linked between generations: never write through one
    path.write_text(text, encoding="utf-8")
    recorded(path)


def _refused(run: Path, data_csv: Path, *needles: str) -> None:
    """The Python load, ``predict`` and ``evaluate`` all refuse ``run`` with a message holding ``needles``."""
    with pytest.raises(RunFileError) as err:
        load_checkpoint(run)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    for args in (["predict", str(run), "a fine film"], ["evaluate", str(run), "--data", str(data_csv)]):
        result = _invoke(*args)
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output
        for needle in needles:
            assert needle in result.output, result.output


def test_labels_that_are_not_a_list_are_refused(run_copy, data_csv) -> None:
    _replace(committed_dir(run_copy) / "labels.json", json.dumps({"labels": "posneg"}))
    _refused(run_copy, data_csv, "labels.json", "'posneg'")


def test_three_labels_for_a_two_class_model_are_refused(run_copy, data_csv) -> None:
    _replace(committed_dir(run_copy) / "labels.json", json.dumps({"labels": ["a", "b", "c"]}))
    _refused(run_copy, data_csv, "labels.json", "3 labels", "2 outputs")


def test_one_label_and_repeated_labels_are_refused(run_copy, data_csv) -> None:
    labels = committed_dir(run_copy) / "labels.json"
    _replace(labels, json.dumps({"labels": ["pos"]}))
    _refused(run_copy, data_csv, "labels.json", "at least 2")
    _replace(labels, json.dumps({"labels": ["pos", "pos"]}))
    _refused(run_copy, data_csv, "labels.json", "more than once")


def test_a_tokenizer_of_another_vocabulary_size_is_refused(run_copy, data_csv) -> None:
    path = committed_dir(run_copy) / "tokenizer.json"
    rows = json.loads((committed_dir(run_copy) / "config.json").read_text())["model_config"]["vocab_size"]
    other = train_tokenizer(["alpha beta gamma delta epsilon zeta eta theta"])
    assert other.get_vocab_size() != rows
    path.unlink()
    save_tokenizer(other, path)
    recorded(path)
    _refused(run_copy, data_csv, "tokenizer.json", f"vocabulary of {other.get_vocab_size()} tokens",
             f"{rows} rows")


def test_nan_weights_are_refused(run_copy, data_csv) -> None:
    path = committed_dir(run_copy) / "model.safetensors"
    tensors = load_file(path)
    tensors = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in tensors.items()}
    path.unlink()
    save_file(tensors, path, metadata={"format": "pt"})
    recorded(path)
    _refused(run_copy, data_csv, "model.safetensors", "NaN or infinite")


# --- the numpy run's loader ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory, data_csv) -> Path:
    out = tmp_path_factory.mktemp("runs") / "np"
    result = _invoke("train", "--backend", "numpy", "--data", str(data_csv), "--out", str(out), "--epochs", "1",
                     "--model-opt", "layer.d_model=16")
    assert result.exit_code == 0, result.output
    return out


def test_numpy_run_refuses_bad_labels_vocab_and_nan_weights(numpy_run, tmp_path) -> None:
    from safetensors.numpy import load_file as load_np
    from safetensors.numpy import save_file as save_np

    cases = {
        "labels.json": (json.dumps({"labels": "posneg"}), "'posneg'"),
        "vocab.json": (json.dumps({"itos": ["<pad>", "<unk>", "w"]}), "vocabulary of 3 tokens"),
    }
    for i, (name, (text, needle)) in enumerate(cases.items()):
        run = tmp_path / f"r{i}"
        shutil.copytree(numpy_run, run)
        _replace(committed_dir(run) / name, text)
        with pytest.raises(RunFileError, match=name) as err:
            load_numpy_run(run)
        assert needle in str(err.value)
    run = tmp_path / "nan"
    shutil.copytree(numpy_run, run)
    path = committed_dir(run) / "model.safetensors"
    arrays = {k: np.full_like(v, np.nan) for k, v in load_np(path).items()}
    path.unlink()
    save_np(arrays, path)
    recorded(path)
    with pytest.raises(RunFileError, match="model.safetensors holds NaN or infinite"):
        load_numpy_run(run)
    result = _invoke("predict", str(run), "a fine film")
    assert result.exit_code == 1 and "NaN or infinite" in result.output, result.output


# --- config.json values: checked by type and range, the field and the file named ---------------------


def _edit_config(run: Path, layer: dict | None = None, **fields) -> Path:
    path = committed_dir(run) / "config.json"
    meta = json.loads(path.read_text())
    meta["model_config"].update(fields)
    meta["model_config"]["layer"].update(layer or {})
    _replace(path, json.dumps(meta))
    return path


@pytest.mark.parametrize(("fields", "needles"), [
    ({"layer": {"d_model": [16]}}, ["field layer.d_model must be an int", "[16] (list)"]),
    ({"layer": {"activation": ["relu"]}}, ["field layer.activation must be a string", "['relu'] (list)"]),
    ({"layer": {"dropout": "0.1"}}, ["field layer.dropout must be a finite number"]),
    ({"layer": {"d_model": 0}}, ["layer.d_model must be a positive int, got 0"]),
    ({"layer": {"num_heads": -2}}, ["layer.num_heads must be a positive int, got -2"]),
    ({"layer": {"num_heads": 3}}, ["layer: d_model=16 must be divisible by num_heads=3"]),
    ({"layer": {"num_heads": 32}}, ["layer: d_model=16 must be divisible by num_heads=32"]),  # Dh would be 0
    ({"colour": "blue"}, ["unknown DocumentClassifierConfig field(s) ['colour']"]),
    ({"layer": {"d_model": 10**12}}, ["weights", "layer.d_model=1000000000000"]),
    ({"layer": {"d_modle": 16}}, ["unknown DocumentClassifierConfig field(s) ['layer.d_modle']"]),
])
def test_config_values_are_checked_naming_field_and_file(run_copy, data_csv, fields, needles) -> None:
    _edit_config(run_copy, **fields)
    _refused(run_copy, data_csv, "config.json", *needles)


def test_a_missing_field_is_named(run_copy, data_csv) -> None:
    path = committed_dir(run_copy) / "config.json"
    meta = json.loads(path.read_text())
    del meta["model_config"]["num_classes"]
    _replace(path, json.dumps(meta))
    _refused(run_copy, data_csv, "config.json", "missing required field(s) ['num_classes']")


def test_absurd_sizes_are_refused_before_allocating(run_copy) -> None:
    """A model whose weights exceed the memory is refused from its shapes alone (nothing is allocated)."""
    from attnkit._memory import available_memory

    available = available_memory()
    assert available is not None
    d = 2 ** (int(math.log2(available / 4 / 50)) + 2)  # an embedding of 50 rows x d floats > the memory
    _edit_config(run_copy, layer={"d_model": d}, vocab_size=50)
    with pytest.raises(RunFileError, match=rf"GiB of weights, more than the .*layer.d_model={d}"):
        load_checkpoint(run_copy)


def test_train_config_values_are_typed() -> None:
    with pytest.raises(TypeError, match=r"TrainConfig field epochs must be an int, got \[3\] \(list\)"):
        TrainConfig.from_dict({"epochs": [3]})
    with pytest.raises(TypeError, match="TrainConfig field device must be a string"):
        TrainConfig.from_dict({"device": ["cpu"]})
    with pytest.raises(TypeError, match="TrainConfig field lr must be a finite number, got nan"):
        TrainConfig.from_dict({"lr": float("nan")})
    assert TrainConfig.from_dict({"lr": 1, "on_nan": "skip-step"}).lr == 1


def test_numpy_run_config_values_are_typed(numpy_run, tmp_path) -> None:
    run = tmp_path / "np"
    shutil.copytree(numpy_run, run)
    path = committed_dir(run) / "config.json"
    meta = json.loads(path.read_text())
    meta["model_config"]["layer"]["d_model"] = [16]
    _replace(path, json.dumps(meta))
    with pytest.raises(RunFileError,
                       match=r"config.json .*model_config field layer\.d_model must be an int, got \[16\]"):
        load_numpy_run(run)


def test_a_config_nested_too_deeply_is_named(tmp_path: Path) -> None:
    """JSON nested past Python's recursion limit is one error naming the file, not a RecursionError."""
    from attnkit.train.runs.fileops import read_json

    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    recorded(path)
    with pytest.raises(RunFileError, match=r"config\.json.*nested too deeply"):
        read_json(path)


def test_a_model_over_the_address_space_limit_is_refused_naming_it(run_copy, monkeypatch) -> None:
    """The size check at load time reads the whole budget (here RLIMIT_AS), not only MemAvailable."""
    from attnkit._memory import MemoryBudget
    from attnkit.train.runs import checkpoint

    limit = MemoryBudget(64 * 2**20, "left by the address-space limit RLIMIT_AS (ulimit -v) of 1 GB")
    monkeypatch.setattr(checkpoint, "memory_budget", lambda: limit)
    _edit_config(run_copy, layer={"d_model": 2**18}, vocab_size=64)  # 64 MiB of embedding alone
    with pytest.raises(RunFileError, match=r"more than the 0.1 GiB of memory left by the address-space limit "
                                           r"RLIMIT_AS \(ulimit -v\) of 1 GB"):
        load_checkpoint(run_copy)
