"""Subprocess worker that measures the peak memory of one call.

Run as ``python -m attnkit.bench.memory '{"workload": NAME, "params": {...}}'``;
prints one JSON line ``{"peak_mib": ..., "baseline_mib": ..., "seconds": ..., "how": ...}``. Running each
side in its own fresh process keeps one side's allocations (and allocator
caches) from hiding or inflating the other's.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from attnkit._memory import peak_rss_mib, status_bytes
from attnkit.bench.naive_relative import naive_relative_attention
from attnkit.bench.workloads import relative_inputs

__all__ = ["WORKLOADS", "peak_rss_mib", "measure_peak"]

Call = Callable[[], object]


def _status_mib(field: str) -> float | None:
    found = status_bytes(field)
    return None if found is None else found / 2**20


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (``VmHWM``) to the current RSS; Linux only."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure_peak(call: Callable[[], object], warm_up: Callable[[], object] | None = None
                 ) -> dict[str, float | str]:
    """Run ``warm_up()`` (if given), then ``call()`` once; return the call's peak extra memory.

    The warm-up pays lazy one-time set-up (thread pools, kernel caches), which
    is not the call's cost. On Linux the peak mark ``VmHWM`` is then reset to
    the current RSS, so the figure is ``VmHWM after - VmRSS before``: exactly
    the extra memory at the call's high point. Elsewhere it falls back to the
    growth of ``ru_maxrss``, which misses a call that stays below an earlier
    peak of the process. ``seconds`` is the call's wall time.
    """
    if warm_up is not None:
        warm = warm_up()
        del warm
    rss_before = _status_mib("VmRSS")
    how = "VmHWM" if rss_before is not None and _reset_peak() else "ru_maxrss"
    before = rss_before if how == "VmHWM" else peak_rss_mib()
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    after = _status_mib("VmHWM") if how == "VmHWM" else peak_rss_mib()
    del result
    assert before is not None and after is not None
    return {"peak_mib": after - before, "baseline_mib": before, "seconds": seconds, "how": how}


def _relative_attnkit(p: dict[str, Any]) -> Call:
    from attnkit.layers.relative import relative_attention

    q, k, v, rel_k, rel_v = relative_inputs(p)
    return lambda: relative_attention(q, k, v, rel_k, rel_v)


def _relative_naive(p: dict[str, Any]) -> Call:
    q, k, v, rel_k, rel_v = relative_inputs(p)
    return lambda: naive_relative_attention(q, k, v, rel_k, rel_v, p["max_rel"])


def _alibi_score_mod(p: dict[str, Any]) -> Call:
    """Forward+backward of ALiBi as a score_mod on a causal BlockMask (gradients on inside the call)."""
    from attnkit.bench.sparse import qkv
    from attnkit.core import masks
    from attnkit.core.functional import attention
    from attnkit.core.score_mods import alibi_mod

    q, k, v = qkv(p["H"], p["T"], p["Dh"])
    bm = masks.create_block_mask(masks.causal_mod, None, None, p["T"], p["T"])
    mod = alibi_mod(p["H"])

    def call() -> object:
        with torch.enable_grad():
            attention(q, k, v, mask=bm, score_mod=mod).sum().backward()
        return None

    return call


def _alibi_bias(p: dict[str, Any]) -> Call:
    """Build the (1, H, T, T) ALiBi bias, then SDPA forward+backward with it."""
    from attnkit.bench.sparse import alibi_bias, qkv

    q, k, v = qkv(p["H"], p["T"], p["Dh"])

    def call() -> object:
        with torch.enable_grad():
            bias = alibi_bias(p["H"], p["T"], p["causal"])
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
        return None

    return call


WORKLOADS: dict[str, Callable[[dict[str, Any]], Call]] = {
    "relative-attnkit": _relative_attnkit,
    "relative-naive": _relative_naive,
    "alibi-score-mod": _alibi_score_mod,
    "alibi-bias": _alibi_bias,
}


def main(argv: list[str]) -> int:
    """Build the named workload, run it once under ``torch.no_grad()``, print its peak memory."""
    spec = json.loads(argv[0])
    name = spec["workload"]
    if name not in WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}; valid: {', '.join(sorted(WORKLOADS))}")
    params = spec["params"]
    call = WORKLOADS[name](params)
    # Warm up on a short sequence: same code path, negligible cost even when T is long.
    warm_up = WORKLOADS[name]({**params, "T": min(params.get("T", 128), 128)})
    with torch.no_grad():
        report = measure_peak(call, warm_up)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
