"""One run pipeline: every task starts its run through attnkit.train.runs.run, and the command line only
parses flags and calls the library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnkit.train.runs.run import committed_run_id, new_run_id, save_run, start_run
from attnkit.train.runs.rundir import RunExistsError, RunFileError, RunWriter, read_manifest

SRC = Path(__file__).resolve().parents[2] / "src" / "attnkit"


def _calls(source: str, name: str) -> int:
    """How many times ``source`` calls ``name(...)`` or ``something.name(...)``."""
    return sum(1 for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
               and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name))


def test_a_run_writer_is_built_in_one_place() -> None:
    built = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.py"))
             if (n := _calls(p.read_text(encoding="utf-8"), "RunWriter"))}
    assert built == {"train/runs/run.py": 1}, f"RunWriter built outside attnkit.train.runs.run: {built}"


@pytest.mark.parametrize("name", ["RunWriter", "start_run", "save_run", "fit_captioner", "commit_caption_run",
                                  "fit_classifier", "fit_translation", "train_numpy_run"])
def test_the_command_line_holds_no_run_pipeline(name: str) -> None:
    """Commands call one library function per task; they never open a run or train a model themselves,
    except through that function (run_plan, a task's train, the numpy backend's train_numpy)."""
    used = {str(p.relative_to(SRC)) for p in sorted((SRC / "cli").glob("*.py"))
            if _calls(p.read_text(encoding="utf-8"), name)}
    assert not used, f"{name} called from {sorted(used)}"


def test_the_counter_sees_a_call() -> None:
    assert _calls("w = rundir.RunWriter(out, 'x')\nRunWriter(out, 'y')\n", "RunWriter") == 2
    assert _calls("from attnkit.train.runs.rundir import RunWriter\n", "RunWriter") == 0


def test_a_new_run_gets_a_new_id_and_refuses_another_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    writer = start_run(out)
    assert isinstance(writer, RunWriter) and len(writer.run_id) == 32 and not out.exists()  # judged, not touched
    assert new_run_id() != new_run_id()
    _commit_one(out, "first")
    with pytest.raises(RunExistsError, match="replace it with overwrite or continue it with resume$"):
        start_run(out)
    with pytest.raises(RunExistsError, match=r"run_id first\); replace it with overwrite$"):
        start_run(out, resumable=False)
    # a command passes its own flags for the settings the refusal names
    with pytest.raises(RunExistsError, match="replace it with --overwrite or continue it with --resume$"):
        start_run(out, flags={"overwrite": "--overwrite", "resume": "--resume"})
    assert start_run(out, overwrite=True).run_id != "first"


def test_resume_continues_the_committed_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RunFileError, match=f"cannot resume: {out} holds no committed run"):
        start_run(out, resume=True)
    assert committed_run_id(out) is None
    _commit_one(out, "first")
    assert committed_run_id(out) == "first"
    assert start_run(out, resume=True).run_id == "first"
    with pytest.raises(ValueError, match="resume continues the run in .* and overwrite replaces it; give one"):
        start_run(out, resume=True, overwrite=True)


def test_save_run_commits_one_generation_under_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[bool] = []

    def commit(writer: RunWriter) -> Path:
        seen.append(_locked(out))
        staging = writer.stage()
        (staging / "config.json").write_text("{}", encoding="utf-8")
        return writer.commit(staging, status="done")

    folder = save_run(out, commit, run_id="saved")
    assert seen == [True] and folder.is_dir() and (folder / "config.json").is_file()
    assert read_manifest(out) is not None and committed_run_id(out) == "saved"
    assert not _locked(out)  # released


def _commit_one(out: Path, run_id: str) -> None:
    with start_run(out, run_id=run_id) as writer:
        staging = writer.stage()
        (staging / "config.json").write_text("{}", encoding="utf-8")
        writer.commit(staging, status="training", epoch=1)


def _locked(out: Path) -> bool:
    from attnkit.train.runs.runlock import RunLockedError, check_unlocked

    try:
        check_unlocked(out)
    except RunLockedError:
        return True
    return False
