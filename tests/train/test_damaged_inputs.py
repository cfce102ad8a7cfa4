"""Damaged or odd run and model folders are refused before use, by one line naming the file and the field;
every check reads a file once (linear in its size)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.train.checkpoint import RunFileError, committed_dir, load_checkpoint
from attnkit.train.run_files import check_labels
from tests.support.cli import TINY, write_keyword_csv


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def _replace(path: Path, text: str) -> None:
    path.unlink()  # committed files may be linked between generations: never write through one
    path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, data_csv) -> Path:
    out = tmp_path_factory.mktemp("runs") / "good"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture()
def run_copy(good_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    return run


# --- labels.json ------------------------------------------------------------------------------------


def test_repeated_labels_are_found_in_linear_time(tmp_path) -> None:
    """40,000 labels, each twice: found in well under a second (the old search took about a minute)."""
    labels = [f"label{i}" for i in range(40_000)] * 2
    start = time.perf_counter()
    with pytest.raises(RunFileError, match=r"labels\.json lists label\(s\) \['label0', 'label1', 'label10'"):
        check_labels(tmp_path / "labels.json", {"labels": labels}, len(labels))
    assert time.perf_counter() - start < 2.0
