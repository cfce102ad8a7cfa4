"""What this process may still allocate and what it has used: the two readings every memory check shares.

:func:`available_memory` is the kernel's ``MemAvailable`` (physical memory where that cannot be read);
:func:`peak_rss_mib` is the peak resident set size so far, the figure runs and benchmarks report.
"""

from __future__ import annotations

import os
import resource
import sys

__all__ = ["available_memory", "peak_rss_mib"]


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` on Linux, else physical memory), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


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
