"""What this process may still allocate and what it has used: the readings every memory check shares.

:func:`available_memory` is the kernel's ``MemAvailable`` (physical memory where that cannot be read);
:func:`memory_budget` is the least of that, the room the address-space limit leaves (``RLIMIT_AS``,
``ulimit -v``) and the room the process's memory cgroup leaves, each named, so that a refusal can say
which one bound it; :func:`peak_rss_mib` is the peak resident set size so far, the figure runs and
benchmarks report.
"""

from __future__ import annotations

import errno
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["available_memory", "MemoryBudget", "memory_budget", "address_space_room", "cgroup_room",
           "format_bytes", "peak_rss_mib", "resident_bytes", "address_space_failure", "torch_room_failure",
           "TORCH_MAP_FACTOR", "START_MARGIN"]

_NO_LIMIT = 2**60
"""A cgroup v1 limit at or above this is the kernel's "no limit" (``9223372036854771712``)."""


def available_memory(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` on Linux, else physical memory), or None."""
    found = _available(meminfo)
    return None if found is None else found[0]


def _available(meminfo: str | Path) -> tuple[int, str] | None:
    """:func:`available_memory` and what it is, in :class:`MemoryBudget`'s words: ``MemAvailable`` of
    ``meminfo``, or physical memory where that file cannot be read (absent, unreadable, garbled)."""
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, f"available (MemAvailable of {meminfo})"
    except (OSError, ValueError, IndexError):
        pass
    try:
        physical = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None
    return physical, f"of physical memory (no MemAvailable could be read from {meminfo})"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    Linux's ``VmHWM`` where it can be read: ``getrusage``'s ``ru_maxrss`` starts a process forked from a
    larger one (a notebook, a test runner, a launcher) at that parent's peak, so it would report the parent's.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB elsewhere


def format_bytes(n: float) -> str:
    """``1.23 TB``, ``1.23 GB``, ``456 MB`` or ``789 kB`` (powers of 1000, as ``--max-memory`` sizes are read)."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 10**3:.3g} kB"


def status_bytes(field: str, status: str = "/proc/self/status") -> int | None:
    """Bytes of a ``kB`` field of ``status`` (``VmRSS``, ``VmSize``, ``VmHWM``), or None where it cannot be read."""
    try:
        with open(status, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes() -> int:
    """Bytes this process holds resident now (``VmRSS``; 0 where it cannot be read)."""
    return status_bytes("VmRSS") or 0


def address_space_room(status: str | Path = "/proc/self/status",
                       rlimit: Callable[[], int] | None = None) -> tuple[int, int] | None:
    """``(room, limit)``: the bytes of address space ``RLIMIT_AS`` (``ulimit -v``, ``prlimit --as``) leaves
    this process beyond what it maps now (``VmSize`` of ``status``), and the limit; None: no limit.

    The limit counts virtual memory, which starts far above the resident size (libraries, thread stacks,
    reserved arenas), so the room is the limit less the process's current virtual size, not less its
    resident size. ``rlimit`` returns the soft limit (default: :func:`resource.getrlimit`).
    """
    limit = _rlimit_as(rlimit)
    if limit is None:
        return None
    return max(0, limit - (status_bytes("VmSize", str(status)) or 0)), limit


def _rlimit_as(rlimit: Callable[[], int] | None = None) -> int | None:
    """The soft ``RLIMIT_AS`` in bytes (``rlimit``: a stand-in for :func:`resource.getrlimit`'s), None: none."""
    try:
        limit = rlimit() if rlimit is not None else resource.getrlimit(resource.RLIMIT_AS)[0]
    except (AttributeError, OSError, ValueError):
        return None
    return None if limit < 0 or limit == resource.RLIM_INFINITY or limit >= _NO_LIMIT else limit


TORCH_MAP_FACTOR = 1.1
"""Address space ``import torch`` takes, as a multiple of the size of torch's shared libraries on disk (their
code, data and relocations: 510 MB for 468 MB of CPU torch 2.13 on Linux)."""

START_MARGIN = 64 * 2**20
"""Address space a command needs beside torch before it plans its memory: one malloc arena (64 MiB on 64-bit
glibc) for the threads that start first (the tokenizer's). With less, an allocation in native code fails, and
native code ends the process without an error Python can name."""


def torch_room_failure(status: str | Path = "/proc/self/status", rlimit: Callable[[], int] | None = None,
                       libraries: int | None = None) -> str | None:
    """One line, before torch is imported, when the address-space limit leaves less room than loading it
    and starting a command take (:data:`TORCH_MAP_FACTOR` times its shared libraries, ``libraries`` bytes:
    None, measured on disk; and :data:`START_MARGIN`); None: no limit, or the room is enough. Failing inside
    ``import torch`` can end the process in C++'s ``std::bad_alloc`` instead of an error Python can name."""
    space = address_space_room(status, rlimit)
    if space is None:
        return None
    if libraries is None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return None
        folder = Path(spec.origin).parent
        libraries = sum(f.stat().st_size for f in [*folder.glob("*.so"), *(folder / "lib").glob("*.so*")])
    need = int(libraries * TORCH_MAP_FACTOR) + START_MARGIN
    if space[0] >= need:
        return None
    return (f"the address-space limit RLIMIT_AS (ulimit -v) of {format_bytes(space[1])} leaves "
            f"{format_bytes(space[0])} beside what is loaded already, less than the about {format_bytes(need)} "
            f"loading torch and starting take; raise that limit (ulimit -v, prlimit --as)")


_OUT_OF_MEMORY = ("failed to map segment", "cannot allocate memory", "can't allocate memory", "out of memory",
                  "bad_alloc", "failed to allocate")
"""How a failed allocation reads in the messages of the errors that are not :class:`MemoryError`: a shared
library that cannot be mapped (``ImportError``), torch's allocator (``RuntimeError``), ``SystemError``."""


def address_space_failure(err: BaseException, rlimit: Callable[[], int] | None = None) -> str | None:
    """One line for ``err`` when it is an allocation that failed under an address-space limit (``RLIMIT_AS``,
    ``ulimit -v``, ``prlimit --as``; ``rlimit`` as in :func:`address_space_room`): a :class:`MemoryError`, an
    ``ENOMEM`` :class:`OSError`, or an error whose message (or cause's) says that memory could not be had,
    such as ``import torch`` failing to map its libraries. None: no such limit, or another error.

    The error alone says nothing of the limit; the line names it, so that whatever was being loaded or
    allocated when the room ran out (torch, the data, a model) the answer is the same.
    """
    limit = _rlimit_as(rlimit)  # no file read: memory may have run out
    if limit is None:
        return None
    found, seen = "", 0
    cause: BaseException | None = err
    while cause is not None and seen < 20:  # the innermost failure says it best (numpy's wraps a page of advice)
        text = " ".join(str(cause).split())
        if isinstance(cause, MemoryError) or (isinstance(cause, OSError) and cause.errno == errno.ENOMEM) or (
                isinstance(cause, ImportError | OSError | RuntimeError | SystemError)
                and any(mark in text.lower() for mark in _OUT_OF_MEMORY)):
            found = type(cause).__name__ + (f": {text[:200]}" if text else "")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if not found:
        return None
    return (f"out of memory under the address-space limit RLIMIT_AS (ulimit -v) of {format_bytes(limit)} "
            f"({found}); raise that limit (ulimit -v, prlimit --as)")


def _read_int(path: Path) -> int | None:
    """The integer in the one-line file ``path`` (None: absent, unreadable or ``max``)."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def cgroup_room(cgroup: str | Path = "/proc/self/cgroup", root: str | Path = "/sys/fs/cgroup"
                ) -> tuple[int, Path] | None:
    """``(room, file)``: the bytes this process's memory cgroup lets it allocate beyond what the group uses
    now, and the limit file that binds; None: no limit found.

    cgroup v2 (a ``0::/path`` line of ``cgroup``): the least ``memory.max`` less ``memory.current`` of the
    group and each group above it under ``root``; cgroup v1 (a ``N:...memory...:/path`` line):
    ``memory.limit_in_bytes`` less ``memory.usage_in_bytes`` under ``root/memory``. A path missing under
    ``root`` (a container sees the host's path) falls back to ``root``'s own files.
    """
    try:
        lines = Path(cgroup).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    root = Path(root)
    found: list[tuple[int, Path]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.strip().strip("/")
        if controllers == "":  # v2: the group and every group above it
            folders = [root / rel] if (root / rel).is_dir() else []
            folders += list((root / rel).parents) if folders else [root]
            for folder in folders:
                if folder != root and root not in folder.parents:
                    continue
                limit, used = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
                if limit is not None:
                    found.append((max(0, limit - (used or 0)), folder / "memory.max"))
        elif "memory" in controllers.split(","):  # v1
            base = root / "memory"
            folder = base / rel if (base / rel).is_dir() else base
            limit = _read_int(folder / "memory.limit_in_bytes")
            used = _read_int(folder / "memory.usage_in_bytes")
            if limit is not None and limit < _NO_LIMIT:
                found.append((max(0, limit - (used or 0)), folder / "memory.limit_in_bytes"))
    return min(found, key=lambda x: x[0]) if found else None


@dataclass(frozen=True)
class MemoryBudget:
    """What this process may still allocate (``bytes``; None: unknown) and which limit says so (``source``,
    a phrase: ``"available (MemAvailable of /proc/meminfo)"``, ``"of physical memory (no MemAvailable could be
    read from /proc/meminfo)"``, ``"left by the address-space limit
    RLIMIT_AS (ulimit -v) of 6 GB"``, ``"left by the cgroup's /sys/fs/cgroup/.../memory.max"``)."""

    bytes: int | None
    source: str


def memory_budget(*, meminfo: str | Path = "/proc/meminfo", status: str | Path = "/proc/self/status",
                  cgroup: str | Path = "/proc/self/cgroup", cgroup_root: str | Path = "/sys/fs/cgroup",
                  rlimit: Callable[[], int] | None = None) -> MemoryBudget:
    """The least of the three limits on what this process may still allocate, and which one it is:
    :func:`available_memory` (``meminfo``), :func:`address_space_room` (``status``, ``rlimit``) and
    :func:`cgroup_room` (``cgroup``, ``cgroup_root``). The paths are arguments so that tests can point them
    at files of their own."""
    options: list[tuple[int, str]] = []
    free = _available(meminfo)
    if free is not None:
        options.append(free)
    space = address_space_room(status, rlimit)
    if space is not None:
        options.append((space[0], f"left by the address-space limit RLIMIT_AS (ulimit -v) of "
                                  f"{format_bytes(space[1])}"))
    group = cgroup_room(cgroup, cgroup_root)
    if group is not None:
        options.append((group[0], f"left by the memory cgroup's {group[1]}"))
    if not options:
        return MemoryBudget(None, "unknown")
    room, source = min(options, key=lambda x: x[0])
    return MemoryBudget(room, source)
