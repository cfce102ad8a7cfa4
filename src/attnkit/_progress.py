"""Progress of long work, on a terminal and off it.

On a terminal, :func:`progress` is a tqdm bar. Elsewhere (a log file,
``nohup``, a notebook's ``!attnkit``, a pipe) a bar would print nothing
useful, so it writes one plain line to stderr at a steady interval instead::

    epoch 2/10: 41% (123/300), loss=0.4213, 1m32s elapsed

The interval is ``ATTNKIT_PROGRESS_SECONDS`` (default
:data:`PROGRESS_INTERVAL_S`; ``0`` prints a line per update, ``off`` none).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

__all__ = ["progress", "PlainProgress", "PROGRESS_INTERVAL_S", "progress_interval"]

PROGRESS_INTERVAL_S = 30.0
ENV = "ATTNKIT_PROGRESS_SECONDS"


def progress_interval() -> float | None:
    """Seconds between plain progress lines: ``ATTNKIT_PROGRESS_SECONDS`` or the default; None when ``off``."""
    raw = os.environ.get(ENV, "").strip().lower()
    if not raw:
        return PROGRESS_INTERVAL_S
    if raw in ("off", "none", "no"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV} must be a number of seconds or 'off', got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{ENV} must be a number of seconds >= 0 or 'off', got {raw!r}")
    return value


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class PlainProgress:
    """tqdm's ``update`` / ``set_postfix`` / ``close``, as a plain line every ``interval`` seconds."""

    def __init__(self, total: int, desc: str, *, interval: float, unit: str = "", stream: TextIO | None = None,
                 clock: Any = time.monotonic) -> None:
        self.total, self.desc, self.interval, self.unit = total, desc, interval, unit
        self.stream = stream
        self.clock = clock
        self.start = self.last = clock()
        self.done = 0
        self.postfix = ""
        self.lines = 0
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.interval and self.done < self.total:
            self.last = now
            self.write(now)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def write(self, now: float) -> None:
        share = f"{100 * self.done / self.total:.0f}% ({self.done}/{self.total}{' ' + self.unit if self.unit else ''})"
        parts = [f"{self.desc}: {share}", *([self.postfix] if self.postfix else []),
                 f"{_clock(now - self.start)} elapsed"]
        print(", ".join(parts), file=self.stream or sys.stderr, flush=True)
        self.lines += 1

    def close(self) -> None:
        """Done: a last line, when the work was long enough to have printed any."""
        if self.lines and not self.closed:
            self.write(self.clock())
        self.closed = True

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress(total: int, desc: str, *, enabled: bool = True, unit: str = "") -> Any:
    """A progress reporter for ``total`` steps: a tqdm bar on a terminal, else :class:`PlainProgress`
    lines on stderr at :func:`progress_interval`; nothing when not ``enabled``."""
    if not enabled or total <= 0:
        return _Silent()
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, unit=unit or "it")
    interval = progress_interval()
    if interval is None:
        return _Silent()
    return PlainProgress(total, desc, interval=interval, unit=unit)
