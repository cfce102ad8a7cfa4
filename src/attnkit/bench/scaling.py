"""Cases for the variants that change how attention scales with length.

* ``relative``: :func:`attnkit.layers.relative.relative_attention` (Shaw et al.,
  2018, computed through distance buckets) against the formula written out
  with ``(B, Tq, Tk, Dh)`` relative tensors (:mod:`attnkit.bench.naive_relative`).
* ``linear``: :func:`attnkit.layers.linear.linear_attention` (Katharopoulos et
  al., 2020), ``O(T Dh^2)``, against softmax :func:`attnkit.attention`, ``O(T^2 Dh)``.

Both run forward passes under ``torch.no_grad()`` on split-head inputs
``(B, H, T, Dh)``, so that projections common to both sides do not dilute the
comparison. A case whose module is missing reports ``N/A`` instead of failing.
"""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from attnkit.bench.naive_relative import naive_relative_attention as naive
from attnkit.bench.result import Result, completed, judge, unavailable
from attnkit.bench.timing import MEMORY_METHOD, TIMING_METHOD, peak_memory_mib, time_pair
from attnkit.bench.workloads import relative_inputs
from attnkit.core.functional import attention

__all__ = ["relative", "linear"]

# The long relative run reports MISS rather than holding the whole benchmark past this.
_LONG_TIMEOUT_S = 300.0


def _method(warmup: int, repeats: int, extra: str) -> str:
    text = TIMING_METHOD.format(warmup=warmup, repeats=repeats, threads=torch.get_num_threads())
    return f"{text}; {extra}"


def _no_grad(fn: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            fn()

    return run


def _import(module: str, name: str) -> tuple[Callable[..., Any] | None, str]:
    try:
        return getattr(importlib.import_module(module), name), ""
    except (ImportError, AttributeError) as exc:
        return None, f"{module}.{name} not available ({exc})"


def relative(quick: bool) -> list[Result]:
    """Relative-position attention: peak memory and time against the naive formula; a long run."""
    t, t_long = (256, 1024) if quick else (1024, 16384)
    p: dict[str, Any] = {"B": 1, "H": 8, "T": t, "Dh": 64, "max_rel": 16}
    a_label, b_label = "attnkit relative_attention", "naive_relative_attention"
    fast, why = _import("attnkit.layers.relative", "relative_attention")
    if fast is None:
        return [
            unavailable("relative", check, a_label, b_label, unit=unit, sense="<=", bound=bound,
                        why=why, params=p)
            for check, unit, bound in (("forward peak memory", "MiB", 0.05),
                                       ("forward time", "s", 0.2))
        ]
    mem_a, _ = peak_memory_mib("relative-attnkit", p)
    mem_b, _ = peak_memory_mib("relative-naive", p)
    q, k, v, rel_k, rel_v = relative_inputs(p)
    warmup, repeats = (1, 3) if quick else (1, 5)
    ta, tb = time_pair(_no_grad(lambda: fast(q, k, v, rel_k, rel_v)),
                       _no_grad(lambda: naive(q, k, v, rel_k, rel_v, p["max_rel"])),
                       warmup=warmup, repeats=repeats)
    long_p = {**p, "T": t_long}
    try:
        mem_long, t_run = peak_memory_mib("relative-attnkit", long_p, timeout=_LONG_TIMEOUT_S)
        long_note = f"peak memory {mem_long:.0f} MiB ({MEMORY_METHOD})"
    except subprocess.TimeoutExpired:
        t_run, long_note = None, f"did not finish within {_LONG_TIMEOUT_S:.0f} s"
    except RuntimeError as exc:
        t_run, long_note = None, f"failed: {exc}"
    long_result = completed(
        "relative", f"runs at T={t_long} (forward time)", f"{a_label} T={t_long}", t_run,
        f"{a_label} T={t}", ta, unit="s", params=long_p, note=long_note,
        method="one timed call in a fresh subprocess (the memory one), torch.no_grad()")
    return [
        judge("relative", "forward peak memory", a_label, mem_a, b_label, mem_b, unit="MiB",
              sense="<=", bound=0.05, method=MEMORY_METHOD, params=p,
              note="target: at least 20x less memory"),
        judge("relative", "forward time", a_label, ta, b_label, tb, unit="s", sense="<=",
              bound=0.2, method=_method(warmup, repeats, "torch.no_grad()"), params=p,
              note="target: at least 5x faster"),
        long_result,
    ]


def _heads(b: int, h: int, t: int, dh: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, dh, generator=gen) for _ in range(3))  # (B, H, T, Dh)
    return q, k, v


def linear(quick: bool) -> list[Result]:
    """Linear attention: speed against softmax attention, and growth when T doubles."""
    b, h, t, dh = (1, 8, 2048, 64) if quick else (1, 8, 16384, 64)
    p = {"B": b, "H": h, "T": t, "Dh": dh}
    a_label = "attnkit linear_attention"
    fn, why = _import("attnkit.layers.linear", "linear_attention")
    if fn is None:
        return [
            unavailable("linear", "forward time vs softmax", a_label, "attnkit.attention (softmax)",
                        unit="s", sense="<=", bound=0.1, why=why, params=p),
            unavailable("linear", "time growth when T doubles", f"{a_label} T={2 * t}",
                        f"{a_label} T={t}", unit="s", sense="<=", bound=2.2, why=why, params=p),
        ]
    q, k, v = _heads(b, h, t, dh)
    warmup, repeats, a_calls = 1, 3, 3
    ta, tb = time_pair(_no_grad(lambda: fn(q, k, v, causal=False)),
                       _no_grad(lambda: attention(q, k, v)), warmup=warmup, repeats=repeats,
                       a_calls=a_calls)
    q2, k2, v2 = _heads(b, h, 2 * t, dh)
    lin_repeats = 7
    t2, t1 = time_pair(_no_grad(lambda: fn(q2, k2, v2, causal=False)),
                       _no_grad(lambda: fn(q, k, v, causal=False)), warmup=1, repeats=lin_repeats)
    return [
        judge("linear", "forward time vs softmax", a_label, ta, "attnkit.attention (softmax)", tb,
              unit="s", sense="<=", bound=0.1, params=p,
              method=_method(warmup, repeats, f"torch.no_grad(); linear side {a_calls} calls per repeat"),
              note="target: at least 10x faster"),
        judge("linear", "time growth when T doubles", f"{a_label} T={2 * t}", t2,
              f"{a_label} T={t}", t1, unit="s", sense="<=", bound=2.2,
              method=_method(1, lin_repeats, "torch.no_grad(), non-causal"), params=p),
    ]
