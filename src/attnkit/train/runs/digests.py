"""A generation's bytes, recorded at its commit and verified before a reader uses them, without torch.

Each commit of a run writer (:class:`attnkit.train.runs.rundir.RunWriter`) records the SHA-256 and
size of every file the generation holds, as ``files`` (relative name -> ``{"sha256", "size"}``), in the
manifest ``current.json`` and in the generation's own mark ``.attnkit-generation``. The manifest's record
is the one a reader checks (:func:`verify_files`): a file whose bytes differ, that is shorter or longer,
or that is missing is refused in one line naming it, the recorded and the found digest and size, and
what to do. The mark's record says which files the generation's writer made, so that removing a
generation removes those and nothing a user put beside them.

A file is hashed once per process while it is unchanged: the digest is kept under the file's identity
and its modification and change times, so a reader that opens the run again costs a ``stat`` a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnkit.train.runs.fileops import RunFileError

__all__ = ["RunIntegrityError", "file_digest", "generation_files", "record_files", "verify_files", "check_record",
           "REMEDY"]

REMEDY = "restore the file from a copy of the run, or train the run again"

_DIGESTS: dict[tuple[Any, ...], str] = {}
_HEX = frozenset("0123456789abcdef")


class RunIntegrityError(RunFileError):
    """A committed file's bytes differ from those its commit recorded (or it is missing)."""


def _identity(path: Path, st: os.stat_result) -> tuple[Any, ...]:
    return str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of ``path`` (hex), remembered while the file is unchanged."""
    path = Path(path)
    with open(path, "rb") as fh:
        before = os.fstat(fh.fileno())
        known = _DIGESTS.get(_identity(path, before))
        if known is not None:
            return known
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
        if _identity(path, os.fstat(fh.fileno())) == _identity(path, before):  # not changed while read
            _DIGESTS[_identity(path, before)] = digest
    return digest


def generation_files(folder: Path, skip: str) -> list[str]:
    """The relative names of the files under ``folder`` (links followed), but those named ``skip``, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != skip)


def record_files(folder: Path, *, skip: str, carried_from: Path | None = None,
                 carried: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The record of every file under ``folder`` but those named ``skip``: ``{name: {"sha256", "size"}}``.

    A file that is the same file (a hard link) as that name in ``carried_from`` keeps its entry in
    ``carried``, that generation's record: what was recorded when it was written stays the truth."""
    out: dict[str, dict[str, Any]] = {}
    for name in generation_files(folder, skip):
        path = folder / name
        entry = (carried or {}).get(name)
        if (entry is not None and carried_from is not None and (carried_from / name).is_file()
                and os.path.samefile(path, carried_from / name) and _is_entry(name, entry)):
            out[name] = dict(entry)
            continue
        out[name] = {"sha256": file_digest(path), "size": path.stat().st_size}
    return out


def check_record(files: Any, where: str) -> dict[str, dict[str, Any]]:
    """``files`` when it is a record (names -> a 64-hex ``sha256`` and a ``size`` >= 0), else a
    :class:`RunFileError` naming ``where`` and the entry that is not."""
    if not isinstance(files, dict):
        raise RunFileError(f"{where}: 'files' is not a record of names, digests and sizes")
    for name, entry in files.items():
        if not _is_entry(name, entry):
            raise RunFileError(f"{where}: the record of {name!r} is not a SHA-256 digest and a size; "
                               f"{REMEDY}")
    return files


def _is_entry(name: Any, entry: Any) -> bool:
    return (isinstance(name, str) and bool(name) and not name.startswith("/") and ".." not in name.split("/")
            and isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64
            and set(entry["sha256"]) <= _HEX and type(entry.get("size")) is int and entry["size"] >= 0)


def verify_files(folder: Path, files: Mapping[str, dict[str, Any]], *, under: str = "",
                 skip: str | None = None) -> int:
    """Check the files of ``folder`` against their record ``files`` (those whose names start with
    ``under``, but not with ``skip``); returns the bytes checked. The first that differs, or is missing,
    raises :class:`RunIntegrityError` naming it, the recorded and the found digest and size."""
    checked = 0
    for name, entry in sorted(files.items()):
        if not name.startswith(under) or (skip and name.startswith(skip)):
            continue
        path = folder / name
        expected = f"sha256 {entry['sha256']} ({entry['size']:,} bytes)"
        if not path.is_file():
            raise RunIntegrityError(f"{path} is missing: its commit recorded {expected}; {REMEDY}")
        found = file_digest(path)
        size = path.stat().st_size
        if found != entry["sha256"] or size != entry["size"]:
            raise RunIntegrityError(f"{path} is not the file its commit recorded: expected {expected}, found "
                                    f"sha256 {found} ({size:,} bytes); {REMEDY}")
        checked += size
    return checked
