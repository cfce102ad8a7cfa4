"""What a run read, recorded so that resuming it reads exactly the same bytes: one rule for every task.

A run's ``config.json`` holds ``data``: for each data path a task reads (``data``, ``val_path``... for
classification, ``src`` and ``tgt`` for translation, ``images`` and ``captions`` for captioning) the path
resolved (absolute), relative to the run directory, its size in bytes and the SHA-256 of its content
(:func:`~attnkit.train.runs.rundir.data_fingerprint`: a folder's files, names and contents). Resuming
(:func:`locate_data`) finds each at the stored path, or beside the run by the same relative path (a run
moved with its data), or where the command's flag points; in every case the content must hash the same,
else a :class:`DataRecordError` names the flag, the path and both digests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnkit.train.runs.rundir import data_fingerprint

__all__ = ["DataRecordError", "record_data", "locate_data", "data_changes"]

_SUFFIXES = ("_relative_to_run", "_sha256", "_bytes")


class DataRecordError(ValueError):
    """The data a run was trained on cannot be found, or its content changed."""


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def record_data(paths: Mapping[str, str | os.PathLike[str] | None], run: str | os.PathLike[str],
                known: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The record of ``paths`` (setting -> path, or None when not given) for a run in ``run``: each path
    resolved, relative to the run, its size and SHA-256. A digest already in ``known`` (``{setting}_sha256``,
    put there by :func:`locate_data`, which has just checked it) is kept rather than computed again."""
    root = Path(run).resolve()
    record: dict[str, Any] = {}
    for key, path in paths.items():
        if not path:
            record[key] = None
            continue
        resolved = Path(path).resolve()
        record[key] = str(resolved)
        record[f"{key}_relative_to_run"] = os.path.relpath(resolved, root)
        record[f"{key}_bytes"] = _size(resolved)
        record[f"{key}_sha256"] = (known or {}).get(f"{key}_sha256") or data_fingerprint(resolved)
    return record


def _candidates(saved: Mapping[str, Any], key: str, run: Path) -> list[Path]:
    paths = [Path(saved[key])]
    relative = saved.get(f"{key}_relative_to_run")
    if relative:
        beside = (run / relative).resolve()
        if beside not in paths:
            paths.append(beside)
    return paths


def locate_data(saved: Mapping[str, Any], given: Mapping[str, str | os.PathLike[str] | None],
                run: str | os.PathLike[str], flags: Mapping[str, str]) -> dict[str, Any]:
    """The data paths for resuming the run in ``run`` whose record is ``saved``: each found and checked.

    ``flags`` names each recorded setting as the command spells it (``{"src": "--src"}``); ``given`` holds
    the paths the command was given, which replace the stored ones (their content must match). Returns the
    record for the resumed run (paths as found, the digests checked); a :class:`DataRecordError` names the
    flag when a path was given for data the run did not read, or the data is gone or changed."""
    out = Path(run)
    located: dict[str, Any] = {}
    for key, flag in flags.items():
        stored, path = saved.get(key), given.get(key)
        if not stored:
            if path:
                raise DataRecordError(f"{flag}: run {out} was trained without {flag}; leave it out to resume")
            located[key] = None
            continue
        digest = saved.get(f"{key}_sha256")
        candidates = [Path(path)] if path else _candidates(saved, key, out)
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            where = " or ".join(str(c) for c in candidates)
            raise DataRecordError(f"the data run {out} was trained on is gone ({where}); give {flag} PATH to a copy"
                                  + (f" (its content has SHA-256 {digest[:16]}…)" if digest else ""))
        if digest is not None and data_fingerprint(found) != digest:
            raise DataRecordError(
                f"{flag} {found} is not the data run {out} was trained on (its content changed: SHA-256 "
                f"{data_fingerprint(found)[:16]}…, expected {digest[:16]}…); resuming needs the same data — "
                "start a new run for new data")
        located[key] = str(found)
        located.update({f"{key}{s}": saved[f"{key}{s}"] for s in _SUFFIXES if f"{key}{s}" in saved})
    return located


def data_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """How the data record of a committed run (``before``) differs from the data of a new command (``now``):
    a path by its setting, a file that holds other content by its path."""
    changes = []
    for key in sorted(set(before) | set(now)):
        if key.endswith(("_relative_to_run", "_bytes")) or before.get(key) == now.get(key):
            continue
        path = key.removesuffix("_sha256")
        if key == path:
            changes.append(f"`{key}` {before.get(key)!r} there, {now.get(key)!r} now")
        elif before.get(path) == now.get(path):  # the same file, another content
            changes.append(f"`{path}` {now.get(path)} holds other data than the run was trained on")
    return changes
