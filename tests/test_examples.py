"""The guided tour: every script under examples/ runs in small mode and writes
each file it promises in its module-level ``OUTPUTS`` list.

The scripts run in this process (``runpy``): one torch import for the whole
tour instead of one per script. One script also runs as a real subprocess, to
prove they work outside this harness.
"""

from __future__ import annotations

import ast
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("[0-9][0-9]_*.py"))


def promised_outputs(script: Path) -> list[str]:
    """The script's ``OUTPUTS = [...]``, read without running it."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "OUTPUTS" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value)
            return value
    raise AssertionError(f"{script.name} declares no module-level OUTPUTS list")


def test_tour_is_numbered_in_order() -> None:
    numbers = [int(s.name[:2]) for s in SCRIPTS]
    assert len(SCRIPTS) >= 15, f"expected the tour's scripts in {EXAMPLES}, found {len(SCRIPTS)}"
    assert numbers == sorted(set(numbers)), "two scripts share a number"
    assert numbers[0] == 1


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_runs_and_writes_its_outputs(script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    outputs = promised_outputs(script)
    assert outputs, f"{script.name} promises no output file"
    out = tmp_path / "out"
    monkeypatch.setenv("ATTNKIT_EXAMPLES_SMALL", "1")
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(out)])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    printed = capsys.readouterr().out
    for name in outputs:
        path = out / name
        assert path.is_file(), f"{script.name} promised {name} but did not write it"
        assert path.stat().st_size > 0, f"{script.name} wrote an empty {name}"
        assert f"wrote {path}" in printed, f"{script.name} did not report writing {name}"
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written <= set(outputs), f"{script.name} wrote undeclared files {sorted(written - set(outputs))}"
    # Every script prints the shapes it produces: at least one "(d, d...)" tuple.
    assert any(line.rstrip().endswith(")") and "(" in line for line in printed.splitlines()), printed


def test_example_runs_as_a_script(tmp_path: Path) -> None:
    script = EXAMPLES / "01_queries_keys_values.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "o")], capture_output=True,
                          text=True, timeout=120, env={"ATTNKIT_EXAMPLES_SMALL": "1", "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "01_lookup.txt").is_file()
    assert "weights = softmax(scores)" in done.stdout
