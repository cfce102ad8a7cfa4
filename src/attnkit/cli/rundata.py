"""Where a run's data came from, recorded so that ``--resume`` trains on exactly the same data.

A run stores each data path resolved (absolute), relative to the run
directory, and with the SHA-256 of its content. ``attnkit train --out RUN
--resume`` finds the data at the stored path, or next to the run by the same
relative path (a run copied with its data), or where ``--data`` (``--val``,
``--test``) points; in every case the content must match the hash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from attnkit.train.runs.rundir import check_output_path, data_fingerprint

__all__ = ["data_source", "resumed_data_source", "data_changes", "flat_config", "DATA_PATHS", "RUN_FLAGS"]

# option name -> flag, for the paths a classification run reads
DATA_PATHS = {"data": "--data", "val_path": "--val", "test_path": "--test"}
# setting -> flag, for the run directory's refusals (attnkit.train.runs.rundir.check_run_dir) of a command
# that trains into --out and has --overwrite and --resume
RUN_FLAGS = {"out": "--out", "overwrite": "--overwrite", "resume": "--resume"}
READER_KEYS = ("val_ratio", "test_ratio", "data_format", "encoding", "text_field", "label_field",
               "skip_bad_rows", "delimiter")


def data_source(values: dict[str, Any], out: Path) -> dict[str, Any]:
    """The JSON-ready record of the data options in ``values`` (paths resolved, with content hashes).

    A hash already in ``values`` (put there by :func:`resumed_data_source`, which
    has just checked it against the file) is kept rather than computed again.
    """
    source: dict[str, Any] = {k: values[k] for k in READER_KEYS if k in values}
    run = check_output_path(out, flags=RUN_FLAGS).resolve()
    for key in DATA_PATHS:
        path = values.get(key)
        if not path:
            source[key] = None
            continue
        resolved = Path(path).resolve()
        source[key] = str(resolved)
        source[f"{key}_relative_to_run"] = os.path.relpath(resolved, run)
        source[f"{key}_sha256"] = values.get(f"{key}_sha256") or data_fingerprint(resolved)
    return source


def resumed_data_source(saved: dict[str, Any], values: dict[str, Any], out: Path) -> dict[str, Any]:
    """The data options for resuming run ``out``: the saved ones, with each path located and checked.

    A path given on the command line replaces the stored one; its content must
    match the stored hash. Raises ``click.UsageError`` naming the flag when the
    data cannot be found or differs.
    """
    resolved: dict[str, Any] = {k: saved[k] for k in READER_KEYS if k in saved}
    for key, flag in DATA_PATHS.items():
        stored = saved.get(key)
        given = values.get(key)
        if not stored:
            if given:
                raise click.UsageError(f"{flag}: run {out} was trained without {flag}; leave it out to resume")
            resolved[key] = None
            continue
        digest = saved.get(f"{key}_sha256")
        candidates = [Path(given)] if given else _stored_candidates(saved, key, out)
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            where = " or ".join(str(c) for c in candidates)
            raise click.UsageError(
                f"the data run {out} was trained on is gone ({where}); give {flag} PATH to a copy"
                + (f" (its content has SHA-256 {digest[:16]}…)" if digest else ""))
        if digest is not None and data_fingerprint(found) != digest:
            raise click.UsageError(
                f"{flag} {found} is not the data run {out} was trained on (its content changed: SHA-256 "
                f"{data_fingerprint(found)[:16]}…, expected {digest[:16]}…); resuming needs the same data — "
                "start a new run for new data")
        resolved[key] = str(found)
        for suffix in ("_relative_to_run", "_sha256"):
            if f"{key}{suffix}" in saved:
                resolved[f"{key}{suffix}"] = saved[f"{key}{suffix}"]
    return resolved


def _stored_candidates(saved: dict[str, Any], key: str, out: Path) -> list[Path]:
    paths = [Path(saved[key])]
    relative = saved.get(f"{key}_relative_to_run")
    if relative:
        beside = (out / relative).resolve()
        if beside not in paths:
            paths.append(beside)
    return paths


def data_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the data record of a committed run (``before``, its config.json ``data``) differs from the data of
    a new command (``now``): a path by its flag's setting, a file that holds other content by its path."""
    changes = []
    for key in sorted(set(before) | set(now)):
        if key.endswith("_relative_to_run") or before.get(key) == now.get(key):
            continue
        path = key.removesuffix("_sha256")
        if key == path:
            changes.append(f"`{key}` {before.get(key)!r} there, {now.get(key)!r} now")
        elif before.get(path) == now.get(path):  # the same file, another content
            changes.append(f"`{path}` {now.get(path)} holds other data than the run was trained on")
    return changes


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as ``{"layer.d_model": 16, ...}``, as ``--model-opt`` names its fields."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
