"""Attention benchmarks: each case measures attnkit and a baseline in the same run.

Every figure is a ratio ``a / b`` of two sides timed (or weighed) together,
judged against a target; see :mod:`attnkit.bench.timing` for how time and
peak memory are measured. ``attnkit bench`` and ``benchmarks/run_all.py`` call
:func:`run`.

Cases (:data:`CASES`):

* ``mha`` — :class:`~attnkit.layers.multi_head.MultiHeadAttention`
  forward+backward within 1.05x of ``nn.MultiheadAttention(need_weights=False)``.
* ``mha-weights`` — ``return_weights=True`` costs at most 1.4x the time without.
* ``attention-flops`` — :func:`attnkit.attention` reaches 75% of a float32
  matmul's FLOP rate.
* ``relative`` — relative-position attention uses 20x less peak memory and is
  5x faster than the naive formula, and runs at T=16384.
* ``linear`` — linear attention is 10x faster than softmax attention at
  T=16384 and its time grows at most 2.2x when T doubles.
* ``block-sparse`` — a causal sliding window of 256 through a BlockMask reaches
  40% of dense SDPA's FLOP rate on its allowed entries; ALiBi as a score_mod
  takes at most 1.3x the time and 1/4 the peak memory of SDPA with a (T, T) bias.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable

import torch

from attnkit.bench.cases import attention_flops, mha, mha_weights
from attnkit.bench.result import Result, format_result
from attnkit.bench.scaling import linear, relative
from attnkit.bench.sparse import block_sparse

__all__ = ["CASES", "Result", "run"]

_CASE_FUNCTIONS: dict[str, Callable[[bool], list[Result]]] = {
    "mha": mha,
    "mha-weights": mha_weights,
    "attention-flops": attention_flops,
    "relative": relative,
    "linear": linear,
    "block-sparse": block_sparse,
}

CASES: tuple[str, ...] = tuple(_CASE_FUNCTIONS)
"""The benchmark cases, in the order `run` prints them."""


def _write_json(path: str, payload: dict[str, object]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bench-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run(
    cases: list[str] | None = None, *, quick: bool = False, out_json: str | None = None,
    echo: Callable[[str], object] = print,
) -> list[Result]:
    """Run benchmark cases, print each result as it comes, and return them all.

    Args:
        cases: names from :data:`CASES`; ``None`` or empty runs them all.
        quick: smaller sizes (the whole set in about a minute) for a fast check;
            the targets are set for the full sizes.
        out_json: also write the results and the machine's state to this JSON file.
        echo: where lines go (``print`` by default).

    Returns:
        One :class:`~attnkit.bench.result.Result` per measured comparison.
    """
    names = list(cases) if cases else list(CASES)
    unknown = [n for n in names if n not in _CASE_FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown benchmark case(s) {unknown}; valid: {', '.join(CASES)}")
    load = os.getloadavg()
    echo(
        f"attnkit bench ({'quick' if quick else 'full'} sizes): torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    results: list[Result] = []
    start = time.perf_counter()
    for name in names:
        case_start = time.perf_counter()
        found = _CASE_FUNCTIONS[name](quick)
        for r in found:
            echo(format_result(r))
        echo(f"  ({name}: {time.perf_counter() - case_start:.1f} s)")
        results.extend(found)
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "MISS", "INFO", "N/A")}
    echo("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
         + f" in {time.perf_counter() - start:.1f} s")
    if out_json is not None:
        _write_json(out_json, {
            "quick": quick, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "load_average_before": list(load), "load_average_after": list(os.getloadavg()),
            "results": [r.to_dict() for r in results],
        })
    return results
