"""Honest timing and peak-memory measurement on a shared CPU.

Time: both sides run in the same process, after warm-up calls, interleaved
(a, b, then b, a, ...) so that a burst of load from elsewhere on the machine
hits both sides alike; each side reports the median of its repeats. Threads
stay at torch's default.

Memory: each side runs once in a fresh Python subprocess
(``python -m attnkit.bench.memory``), after its inputs are built and one
warm-up call on a short sequence (lazy one-time set-up is not the call's cost). The kernel's
peak-RSS mark is reset (``/proc/self/clear_refs``), the call runs, and the
figure is the peak RSS (``VmHWM``) minus the RSS just before the call. It
counts every byte the call made resident (temporaries, outputs), from torch's
allocator or elsewhere, and nothing left over from the other side. glibc's
mmap threshold is fixed at 64 KiB in the subprocess so that freed blocks go
back to the OS and resident memory follows live memory. Where the mark cannot
be reset, the growth of ``getrusage`` ``ru_maxrss`` is used.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["time_pair", "time_one", "time_rounds", "ratio_spread", "peak_memory_mib", "TIMING_METHOD",
           "MEMORY_METHOD"]

TIMING_METHOD = "median of {repeats} interleaved repeats after {warmup} warm-up(s), {threads} threads"
MEMORY_METHOD = (
    "fresh subprocess per side (glibc mmap threshold 64 KiB), after a short warm-up call: peak "
    "RSS (VmHWM, reset just before) during one call minus RSS just before it, inputs built"
)


def _check_counts(warmup: int, repeats: int) -> None:
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")


def _once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_one(fn: Callable[[], object], *, warmup: int = 1, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    _check_counts(warmup, repeats)
    for _ in range(warmup):
        fn()
    return statistics.median(_once(fn) for _ in range(repeats))


def time_pair(
    a: Callable[[], object], b: Callable[[], object], *, warmup: int = 1, repeats: int = 5,
    a_calls: int = 1,
) -> tuple[float, float]:
    """Median wall times ``(t_a, t_b)`` in seconds of two callables measured interleaved.

    Each repeat times both sides back to back, alternating which goes first.
    ``a_calls > 1`` times side ``a`` that many times per repeat (each call one
    sample), so that a short ``a`` gets enough samples spread over the same
    stretch of time as a long ``b``.
    """
    _check_counts(warmup, repeats)
    if a_calls < 1:
        raise ValueError(f"a_calls must be >= 1, got {a_calls}")
    for _ in range(warmup):
        a()
        b()
    times_a: list[float] = []
    times_b: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            times_a.extend(_once(a) for _ in range(a_calls))
            times_b.append(_once(b))
        else:
            times_b.append(_once(b))
            times_a.extend(_once(a) for _ in range(a_calls))
    return statistics.median(times_a), statistics.median(times_b)


def time_rounds(sides: dict[str, Callable[[], object]], *, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Wall and CPU seconds ``(wall, cpu)`` of every side's call, round by round.

    Each round calls every side once, in the given order on even rounds and
    reversed on odd ones (a b, b a, ...): two sides' calls of one round are
    neighbours in time, so a change in the machine's load reaches both, and
    their ratio is taken round by round (:func:`ratio_spread`). CPU time is the
    process' (``time.process_time``, all its threads): other processes' load
    changes it far less than the wall time, which is what a user waits.
    """
    _check_counts(0, rounds)
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    order = list(sides)
    for i in range(rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            sides[name]()
            out[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def ratio_spread(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """The median, least and greatest of the round-by-round ratios ``num[i] / den[i]``."""
    if not num or len(num) != len(den) or min(den) <= 0:
        raise ValueError(f"need equally many rounds on both sides and positive denominators, got {num}, {den}")
    ratios = [a / b for a, b in zip(num, den, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def peak_memory_mib(workload: str, params: dict[str, Any], *, timeout: float = 900.0
                    ) -> tuple[float, float]:
    """Peak extra resident memory in MiB, and wall time in s, of one call in a fresh subprocess.

    ``workload`` names an entry of :data:`attnkit.bench.memory.WORKLOADS`.
    Raises ``RuntimeError`` with the subprocess' error output when it fails.
    """
    spec = json.dumps({"workload": workload, "params": params})
    # A fixed mmap threshold makes glibc return freed blocks to the OS at once, so resident
    # memory follows live memory and one call cannot hide in blocks cached by an earlier one.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.bench.memory", spec],
        capture_output=True, text=True, timeout=timeout, check=False, env=env,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"memory worker for {workload!r} failed: {' | '.join(tail)}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(report["peak_mib"]), float(report["seconds"])
