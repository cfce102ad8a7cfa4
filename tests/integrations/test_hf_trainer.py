"""examples/hf_packed_trainer.py: Trainer + DataCollatorWithFlattening on the attnkit backend, in quick mode."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate (pinned in requirements/lock.txt)")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "hf_packed_trainer.py"


def test_the_trainer_example_trains_packed_rows_that_equal_each_example_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ATTNKIT_EXAMPLES_SMALL", "1")
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--out", str(tmp_path / "out")])
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    printed = capsys.readouterr().out
    assert (tmp_path / "out" / "hf_packed_trainer.txt").is_file()
    losses = [float(x) for x in re.search(r"Trainer losses over 4 packed steps: (.*)", printed).group(1).split()]  # type: ignore[union-attr]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    packed, alone = (float(x) for x in re.search(  # type: ignore[union-attr]
        r"packed batch loss ([\d.]+), each example alone ([\d.]+)", printed).groups())
    assert abs(packed - alone) < 1e-5
    assert float(re.search(r"largest logit gap ([\d.e+-]+)", printed).group(1)) < 1e-5  # type: ignore[union-attr]
