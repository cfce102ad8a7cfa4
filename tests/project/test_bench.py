"""The benchmark harness: structure of results, ratios, JSON output and errors (quick sizes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnkit.bench import CASES, Result, run
from attnkit.bench.result import completed, judge
from attnkit.bench.timing import ratio_spread, time_pair, time_rounds


def test_cases_listed() -> None:
    assert CASES == ("mha", "mha-weights", "attention-flops", "relative", "linear", "block-sparse")


def test_quick_mha_measures_both_sides(tmp_path: Path) -> None:
    lines: list[str] = []
    out = tmp_path / "bench.json"
    results = run(["mha", "mha-weights"], quick=True, out_json=str(out), echo=lines.append)
    assert [r.case for r in results] == ["mha"] + ["mha-weights"] * 3
    for r in results:
        assert isinstance(r, Result)
        assert r.a is not None and r.b is not None and r.a > 0 and r.b > 0
        assert r.ratio is not None and math.isclose(r.ratio, r.a / r.b)
        assert r.status in ("PASS", "MISS", "INFO")
        assert r.unit == "s" and r.params["T"] == 128
    assert results[0].bound == 1.05 and results[0].sense == "<="
    assert results[1].bound == 1.4 and results[2].status == results[3].status == "INFO"
    text = "\n".join(lines)
    assert "nn.MultiheadAttention(need_weights=False)" in text and "ratio a/b" in text
    assert "interleaved" in text
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and len(saved["results"]) == 4
    assert saved["results"][0]["ratio"] == pytest.approx(results[0].ratio)
    assert not list(tmp_path.glob(".bench-*"))  # the temporary file was renamed


def test_judge_direction() -> None:
    slow = judge("x", "t", "a", 2.0, "b", 1.0, unit="s", sense="<=", bound=1.5, method="m")
    fast = judge("x", "r", "a", 2.0, "b", 1.0, unit="GFLOP/s", sense=">=", bound=1.5, method="m")
    assert (slow.ratio, slow.status, fast.status) == (2.0, "MISS", "PASS")
    with pytest.raises(ValueError, match="baseline"):
        judge("x", "t", "a", 1.0, "b", 0.0, unit="s", sense="<=", bound=1.0, method="m")


def test_time_pair_orders_sides() -> None:
    calls: list[str] = []
    ta, tb = time_pair(lambda: calls.append("a"), lambda: calls.append("b"), warmup=1, repeats=3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    # the timer measures the call: a 20 ms sleep against a no-op
    ta, tb = time_pair(lambda: time.sleep(0.02), lambda: None, warmup=0, repeats=3)
    assert 0.019 <= ta < 0.5 and tb < 0.005
    with pytest.raises(ValueError, match="repeats"):
        time_pair(lambda: None, lambda: None, repeats=0)


def test_unknown_case_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="mha-weights"):
        run(["nope"], quick=True, echo=lambda s: None)


MEASURE = """
import json, time, torch
from attnkit.bench.memory import measure_peak
big = measure_peak(lambda: torch.ones(16 * 2**20), warm_up=lambda: torch.ones(4))  # 64 MiB
small = measure_peak(lambda: torch.ones(4))
slow = measure_peak(lambda: time.sleep(0.05))
print(json.dumps([big, small, slow]))
"""


def test_measure_peak_sees_an_allocation() -> None:
    # A fresh process, as the benchmarks measure: in a long-lived one, freed memory that is still
    # resident can serve the allocation without the resident size growing at all.
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    big, small, slow = json.loads(out.splitlines()[-1])
    assert big["peak_mib"] >= 60.0
    assert small["peak_mib"] < 16.0
    assert 0.04 <= float(slow["seconds"]) < 1.0


def test_completed_goal() -> None:
    done = completed("relative", "runs", "a", 3.0, "b", 1.5, unit="s", method="m")
    failed = completed("relative", "runs", "a", None, "b", 1.5, unit="s", method="m", note="timeout")
    assert (done.status, done.ratio, done.target) == ("PASS", 2.0, "completes")
    assert (failed.status, failed.ratio, failed.target) == ("MISS", None, "completes")
    assert "a/b <= 1.4" == judge("x", "t", "a", 1.0, "b", 1.0, unit="s", sense="<=", bound=1.4,
                                 method="m").target


def test_time_pair_repeats_short_side() -> None:
    calls: list[str] = []
    time_pair(lambda: calls.append("a"), lambda: calls.append("b"), warmup=0, repeats=2, a_calls=3)
    assert calls == ["a", "a", "a", "b", "b", "a", "a", "a"]


def test_every_case_finds_what_it_needs_inside_the_package(tmp_path: Path) -> None:
    """An installed wheel has no benchmarks/ folder: the package alone, copied elsewhere, runs the relative
    case's naive side (once read from benchmarks/naive_relative.py of a checkout, N/A from a wheel)."""
    import shutil

    import attnkit

    site = tmp_path / "site"
    shutil.copytree(Path(attnkit.__file__).parent, site / "attnkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import attnkit.bench.memory as m, attnkit\n"
            f"assert attnkit.__file__.startswith({str(site)!r}), attnkit.__file__\n"
            "m._relative_naive({'B': 1, 'H': 2, 'T': 4, 'Dh': 2, 'max_rel': 1})()\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    sources = [p for p in (site / "attnkit" / "bench").glob("*.py") if "__file__" in p.read_text()]
    assert not sources, f"bench modules that read files beside the package: {sources}"


def test_time_rounds_reverses_the_order_and_reads_both_clocks() -> None:
    calls: list[str] = []
    sides = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "c": lambda: calls.append("c")}
    got = time_rounds(sides, rounds=3)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [len(v) for v in got.values()] == [3, 3, 3]

    def spin() -> None:  # busy for 30 ms of CPU time, however loaded the machine
        end = time.process_time() + 0.03
        while time.process_time() < end:
            pass

    timed = time_rounds({"sleep": lambda: time.sleep(0.03), "spin": spin}, rounds=2)
    (sleep_wall, sleep_cpu), (spin_wall, spin_cpu) = timed["sleep"][0], timed["spin"][0]
    assert sleep_wall >= 0.029 and spin_wall >= 0.029
    assert sleep_cpu < 0.01 and spin_cpu >= 0.029  # a sleep waits without using the CPU; a busy loop uses it
    with pytest.raises(ValueError, match="repeats"):
        time_rounds(sides, rounds=0)


def test_ratio_spread_takes_the_ratio_round_by_round() -> None:
    # side a is twice as slow in every round, while the load makes both vary 5x
    assert ratio_spread([2.0, 10.0, 4.0], [1.0, 5.0, 2.0]) == (2.0, 2.0, 2.0)
    assert ratio_spread([3.0, 4.0, 10.0], [1.0, 1.0, 2.0]) == (4.0, 3.0, 5.0)
    with pytest.raises(ValueError, match="equally many"):
        ratio_spread([1.0], [1.0, 2.0])
