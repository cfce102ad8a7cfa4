"""Subprocess worker that measures the peak memory of one call.

Run as ``python -m attnkit.bench.memory '{"workload": NAME, "params": {...}}'``;
prints one JSON line ``{"peak_mib": ..., "baseline_mib": ..., "how": ...}``. Running each
side in its own fresh process keeps one side's allocations (and allocator
caches) from hiding or inflating the other's.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Callable
from typing import Any

import torch

from attnkit.bench.workloads import load_naive_relative, relative_inputs

__all__ = ["WORKLOADS", "peak_rss_mib", "measure_peak"]

Call = Callable[[], object]


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (``getrusage`` ``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB elsewhere


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 2**10  # kB -> MiB
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (``VmHWM``) to the current RSS; Linux only."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure_peak(call: Callable[[], object]) -> dict[str, float | str]:
    """Run ``call()`` once to warm up, then once more, and return that call's peak extra memory.

    On Linux the peak mark ``VmHWM`` is reset to the current RSS first, so the
    figure is ``VmHWM after - VmRSS before``: exactly the extra memory at the
    call's high point. Elsewhere it falls back to the growth of ``ru_maxrss``,
    which misses a call that stays below an earlier peak of the process.
    """
    warm = call()  # lazy one-time set-up (thread pools, kernel caches) is not the call's cost
    del warm
    rss_before = _status_mib("VmRSS")
    if rss_before is not None and _reset_peak():
        result = call()
        hwm = _status_mib("VmHWM")
        del result
        if hwm is not None:
            return {"peak_mib": hwm - rss_before, "baseline_mib": rss_before, "how": "VmHWM"}
    before = peak_rss_mib()
    result = call()
    after = peak_rss_mib()
    del result
    return {"peak_mib": after - before, "baseline_mib": before, "how": "ru_maxrss"}


def _relative_attnkit(p: dict[str, Any]) -> Call:
    from attnkit.layers.relative import relative_attention

    q, k, v, rel_k, rel_v = relative_inputs(p)
    return lambda: relative_attention(q, k, v, rel_k, rel_v)


def _relative_naive(p: dict[str, Any]) -> Call:
    naive = load_naive_relative()
    if naive is None:
        raise RuntimeError("benchmarks/naive_relative.py not found")
    q, k, v, rel_k, rel_v = relative_inputs(p)
    return lambda: naive(q, k, v, rel_k, rel_v, p["max_rel"])


WORKLOADS: dict[str, Callable[[dict[str, Any]], Call]] = {
    "relative-attnkit": _relative_attnkit,
    "relative-naive": _relative_naive,
}


def main(argv: list[str]) -> int:
    """Build the named workload, run it once under ``torch.no_grad()``, print its peak memory."""
    spec = json.loads(argv[0])
    name = spec["workload"]
    if name not in WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}; valid: {', '.join(sorted(WORKLOADS))}")
    call = WORKLOADS[name](spec["params"])
    with torch.no_grad():
        report = measure_peak(call)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
