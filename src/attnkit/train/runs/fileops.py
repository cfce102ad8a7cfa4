"""Atomic file writes and careful reads, without torch: the file operations of a run directory.

Every file is written to a temporary name in the same folder, flushed to disk
and renamed over the old one (``os.replace``), so an interruption leaves the
old or the new file, never half of one. Every operation goes through
:data:`fs`, one small object, so that the fault-injection tests can make the
n-th operation fail (or kill the process) and prove the run-directory promise
for every point of a commit (:mod:`attnkit.train.runs.rundir`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["RunFileError", "RunWriteError", "FileOps", "fs", "atomic_write_bytes", "atomic_write_text",
           "atomic_write_json", "read_json", "umask", "os_error_message"]


class RunFileError(ValueError):
    """A file of a run (or a file given as one) is missing, damaged or foreign; the message names it."""


class RunWriteError(RunFileError):
    """A run could not be written (disk full, read-only folder...); the message names the path and
    says what stays intact."""


# What to do about the commonest reasons a path cannot be written or read.
_ADVICE = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "a symbolic link loop (a link that points back to itself)",
    errno.ENOENT: "no such file or folder (or a dangling symbolic link)",
    errno.EEXIST: "exists already (a dangling symbolic link, or a file where a folder belongs)",
    errno.ENOTDIR: "a file where a folder belongs",
}


def os_error_message(err: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line for an operating-system error: the path it concerns and the reason in words.

    ``path`` is used when the error itself carries no file name (``write`` on a full disk).
    """
    where = err.filename if err.filename is not None else path
    reason = _ADVICE.get(err.errno or -1) or err.strerror or " ".join(str(err).split())
    code = f" ({errno.errorcode[err.errno]})" if err.errno is not None and err.errno in errno.errorcode else ""
    return f"{os.fsdecode(where)}: {reason}{code}" if where is not None else f"{reason}{code}"


class FileOps:
    """The file operations a run writer performs (one method per kind of step).

    Files are created with the permissions the umask allows (``0o666 & ~umask``),
    as ``open`` would, not the ``0o600`` of a bare temporary file.
    """

    def write(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` (a new name) and flush it to disk."""
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def link(self, src: Path, dst: Path) -> None:
        """``dst`` gets ``src``'s content: a hard link where the file system allows one, else a copy."""
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    def remove_tree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def sync_dir(self, path: Path) -> None:
        """Make the names in folder ``path`` durable (a no-op where folders cannot be opened)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


fs = FileOps()


def umask() -> int:
    """The process's umask (read without changing it for long)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    The file gets the permissions the umask allows, like a file made by ``open``.
    """
    path = Path(path)
    fs.mkdir(path.parent)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~umask())
        fs.write(tmp, data)
        fs.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None:  # a failed write names no file: name the one being written
            raise OSError(err.errno, err.strerror or str(err), str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")



def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON in ``path``; a :class:`RunFileError` naming the file when it is not JSON or not UTF-8."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise RunFileError(f"{path} is missing") from None
    except UnicodeDecodeError as err:
        raise RunFileError(f"{path} is not valid JSON: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise RunFileError(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise RunFileError(f"{path} is not valid JSON for attnkit: nested too deeply") from None

