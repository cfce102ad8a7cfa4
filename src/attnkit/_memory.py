"""What this process may still allocate and what it has used: the readings every memory check shares.

:func:`available_memory` is the kernel's ``MemAvailable`` (physical memory where that cannot be read);
:func:`memory_budget` is the least of that, the room the address-space limit leaves (``RLIMIT_AS``,
``ulimit -v``) and the room the process's memory cgroup leaves, each named, so that a refusal can say
which one bound it; :func:`peak_rss_mib` is the peak resident set size so far, the figure runs and
benchmarks report.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["available_memory", "MemoryBudget", "memory_budget", "address_space_room", "cgroup_room",
           "format_bytes", "peak_rss_mib", "resident_bytes"]

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
    try:
        limit = rlimit() if rlimit is not None else resource.getrlimit(resource.RLIMIT_AS)[0]
    except (AttributeError, OSError, ValueError):
        return None
    if limit < 0 or limit == resource.RLIM_INFINITY or limit >= _NO_LIMIT:
        return None
    return max(0, limit - (status_bytes("VmSize", str(status)) or 0)), limit


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
