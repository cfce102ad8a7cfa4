"""Run directories without torch: atomic writes, ``config.json`` reading, and the rule
that a directory holding a different run is never written into.

Every file is written to a temporary name in the same folder and renamed over
the old one (``os.replace``), so an interruption leaves either the old or the
new file, never half of one. :mod:`attnkit.train.checkpoint` (torch runs) and
:mod:`attnkit.train.numpy_backend` (NumPy runs) both build on these.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["RunExistsError", "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "read_run_config",
           "check_run_dir"]


class RunExistsError(FileExistsError):
    """The output directory already holds another run (or other files)."""


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None


def read_run_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``config.json`` of a run directory (ValueError if there is none)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise ValueError(f"{directory} is not an attnkit run directory (no config.json)")
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def check_run_dir(directory: str | os.PathLike[str], run_id: str, *, overwrite: bool = False,
                  resumable: bool = True) -> None:
    """Refuse to write run ``run_id`` into a directory that holds something else.

    Passes when the directory is missing or empty, when it holds the same run
    (same ``run_id`` in its config.json), or when ``overwrite`` is true. The
    error suggests ``--resume`` only for ``resumable`` kinds of run.
    """
    path = Path(directory)
    if overwrite or not path.exists():
        return
    if not path.is_dir():
        raise RunExistsError(f"output path {path} exists and is not a directory")
    if not any(path.iterdir()):
        return
    config = path / "config.json"
    if config.is_file():
        try:
            other = _read_json(config).get("run_id")
        except (ValueError, AttributeError):
            other = None
        if other == run_id:
            return
        hint = "use --overwrite to replace it or --resume to continue it" if resumable else "use --overwrite to replace it"
        raise RunExistsError(f"output directory {path} already holds a different run (run_id {other}); {hint}")
    raise RunExistsError(
        f"output directory {path} is not empty and holds no attnkit run; "
        "choose another --out or use --overwrite"
    )
