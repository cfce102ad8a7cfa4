"""One writer per run directory: an ``flock`` on ``RUN/.lock``, dropped by the OS when its holder dies."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from attnkit.train.runs import fileops

__all__ = ["LOCK", "RunLockedError", "RunLock", "check_unlocked"]

LOCK = ".lock"


class RunLockedError(BlockingIOError):
    """Another live process is writing the run."""


class RunLock:
    """An exclusive lock on a run directory, held while a process writes it.

    ``flock`` on ``RUN/.lock``: the operating system drops it when the holder
    dies, however it dies, so a lock left by a killed process is taken over
    without a question. The file records the holder (pid, host, start time)
    for the message a second writer gets.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK
        self._fd: int | None = None
        self.took_over: dict[str, Any] | None = None

    def acquire(self) -> RunLock:
        fileops.fs.mkdir(self.directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - platforms without flock
            fcntl = None  # type: ignore[assignment]
        previous = self._holder(fd)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                who = previous or {}
                raise RunLockedError(
                    f"{self.directory} is being written by another process (pid {who.get('pid', '?')} on "
                    f"{who.get('host', '?')}, since {who.get('since', '?')}); wait for it to end or stop it"
                ) from None
        self.took_over = previous if previous and previous.get("pid") != os.getpid() else None
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> dict[str, Any] | None:
        try:
            raw = os.pread(fd, 4096, 0)
            data = json.loads(raw.decode()) if raw else None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_unlocked(directory: str | os.PathLike[str]) -> None:
    """Raise :class:`RunLockedError` now if another process writes the run (touches nothing new)."""
    path = Path(directory)
    if not (path / LOCK).is_file():
        return
    RunLock(path).acquire().release()
