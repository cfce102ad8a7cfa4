"""The edges of training's settings and of the memory readings: a share of one is refused by the flag
itself, just below it is taken; the memory budget names physical memory when ``/proc/meminfo`` cannot be
read, and cgroup v1's "no limit" value is no limit, one byte less is one."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from attnkit import _memory
from attnkit.cli import cli, train_tasks
from tests.support.cli import write_keyword_csv

GB = 10**9


def _command(task: str) -> click.Command:
    return train_tasks()[task]


@pytest.mark.parametrize(("task", "flag", "extra"), [
    ("classify", "--warmup-ratio", []), ("classify", "--label-smoothing", []),
    ("classify", "--warmup-ratio", ["--backend", "numpy"]), ("translate", "--label-smoothing", []),
])
def test_a_share_of_one_is_refused_by_the_flag_itself(tmp_path: Path, task: str, flag: str,
                                                       extra: list[str]) -> None:
    """The flag's own range (exit 2, before any data is read), at 1; 0.999 passes the flag."""
    if task == "classify":
        inputs = ["--data", str(write_keyword_csv(tmp_path / "data.csv", 8))]
    else:
        for side in ("de", "en"):
            (tmp_path / f"t.{side}").write_text("ein haus\n", encoding="utf-8")
        inputs = ["--task", "translate", "--src", str(tmp_path / "t.de"), "--tgt", str(tmp_path / "t.en")]
    result = CliRunner().invoke(cli, ["train", flag, "1", *inputs, *extra, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}': 1.0 is not in the range 0<=x<1." in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()
    param = next(p for p in _command(task).params if flag in p.opts)
    assert param.type.convert("0.999", param, None) == 0.999


def _meminfo_unreadable(tmp_path: Path) -> dict[str, Path]:
    """Paths for :func:`attnkit._memory.memory_budget`: a meminfo that is a folder, no address-space limit file,
    no cgroup."""
    (tmp_path / "meminfo").mkdir()
    (tmp_path / "cgroup").write_text("", encoding="ascii")
    return {"meminfo": tmp_path / "meminfo", "status": tmp_path / "status", "cgroup": tmp_path / "cgroup",
            "cgroup_root": tmp_path / "root"}


@pytest.mark.parametrize("meminfo", ["folder", "absent", "garbled", "no MemAvailable"])
def test_an_unreadable_meminfo_is_named_as_physical_memory(tmp_path: Path, meminfo: str) -> None:
    files = _meminfo_unreadable(tmp_path)
    if meminfo != "folder":
        files["meminfo"] = tmp_path / "meminfo.txt"
    if meminfo == "garbled":
        files["meminfo"].write_bytes(b"MemTotal: 100 kB\nMemAvailable: \xff\xfe kB\n")
    elif meminfo == "no MemAvailable":
        files["meminfo"].write_text("MemTotal: 100 kB\nMemFree: 50 kB\n", encoding="ascii")
    budget = _memory.memory_budget(**files, rlimit=lambda: -1)
    assert budget.bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert budget.source == f"of physical memory (no MemAvailable could be read from {files['meminfo']})"
    assert _memory.available_memory(files["meminfo"]) == budget.bytes


@pytest.mark.parametrize(("limit", "binds"), [
    (9223372036854771712, False),  # the kernel's "no limit" (4 kB pages)
    (9223372036854710272, False),  # the same with 64 kB pages
    (2**60, False),
    (2**60 - 1, True),
    (2 * GB, True),
])
def test_cgroup_v1_s_no_limit_value_is_no_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int,
                                                binds: bool) -> None:
    """Where nothing else is known (no meminfo, no physical size), the v1 "no limit" value must not become
    the budget: 9.2 EB left by the cgroup would be a limit no plan ever meets."""
    files = _meminfo_unreadable(tmp_path)
    group = tmp_path / "root" / "memory" / "job"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text(f"{limit}\n", encoding="ascii")
    (group / "memory.usage_in_bytes").write_text(f"{GB // 2}\n", encoding="ascii")
    files["cgroup"].write_text("12:cpu,cpuacct:/job\n4:memory:/job\n", encoding="ascii")

    def no_sysconf(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", no_sysconf)
    budget = _memory.memory_budget(**files, rlimit=lambda: -1)
    if binds:
        assert budget == _memory.MemoryBudget(limit - GB // 2, f"left by the memory cgroup's "
                                                               f"{group / 'memory.limit_in_bytes'}")
    else:
        assert budget == _memory.MemoryBudget(None, "unknown")
