"""Where a run's data came from, recorded so that ``--resume`` trains on exactly the same data.

The record and the rule that finds the data again are every task's
(:mod:`attnkit.train.runs.data_record`); this module names a classification
run's data settings by their flags (``--data``, ``--val``, ``--test``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from attnkit.train.runs.data_record import DataRecordError, locate_data, record_data
from attnkit.train.runs.resume import RUN_FLAGS
from attnkit.train.runs.rundir import check_output_path

__all__ = ["data_source", "resumed_data_source", "DATA_PATHS"]

# option name -> flag, for the paths a classification run reads
DATA_PATHS = {"data": "--data", "val_path": "--val", "test_path": "--test"}
READER_KEYS = ("val_ratio", "test_ratio", "data_format", "encoding", "text_field", "label_field",
               "skip_bad_rows", "delimiter")


def data_source(values: dict[str, Any], out: Path) -> dict[str, Any]:
    """The JSON-ready record of the data options in ``values`` (:func:`attnkit.train.runs.data_record.record_data`:
    paths resolved, with sizes and content hashes). A hash already in ``values`` (put there by
    :func:`resumed_data_source`, which has just checked it against the file) is kept rather than computed again.
    """
    source: dict[str, Any] = {k: values[k] for k in READER_KEYS if k in values}
    run = check_output_path(out, flags=RUN_FLAGS)
    return {**source, **record_data({key: values.get(key) for key in DATA_PATHS}, run, known=values)}


def resumed_data_source(saved: dict[str, Any], values: dict[str, Any], out: Path) -> dict[str, Any]:
    """The data options for resuming run ``out``: the saved ones, with each path located and checked
    (:func:`attnkit.train.runs.data_record.locate_data`); a ``click.UsageError`` names the flag when the data
    cannot be found or differs."""
    try:
        located = locate_data(saved, values, out, DATA_PATHS)
    except DataRecordError as err:
        raise click.UsageError(str(err)) from None
    return {**{k: saved[k] for k in READER_KEYS if k in saved}, **located}
