"""A finished model's reports join its run in one commit and are linked at the root; the root never shows
the reports of a model the run no longer serves, and a user's file of the same name is never touched."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from attnkit.train.runs import fileops
from attnkit.train.runs.run import add_to_run
from attnkit.train.runs.rundir import MANIFEST, RunWriter, committed_dir, read_manifest, reports_dir, verify_run
from tests.train.test_run_safety import FaultyOps, _Crash


def _commit(out: Path, run_id: str = "a" * 32, *, overwrite: bool = False, weights: bytes = b"w1") -> None:
    with RunWriter(out, run_id, overwrite=overwrite) as writer:
        staging = writer.stage()
        (staging / "config.json").write_text(json.dumps({"run_id": run_id}), encoding="utf-8")
        (staging / "model.safetensors").write_bytes(weights)
        writer.commit(staging, status="done", epoch=3)


def test_reports_join_the_run_in_one_commit_and_are_copied_at_the_root(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _commit(out)
    first = committed_dir(out)
    add_to_run(out, {"report.txt": "accuracy 0.9\n", "figure.png": b"\x89PNG"})
    folder, manifest = committed_dir(out), read_manifest(out)
    assert folder != first and manifest is not None
    assert (manifest["status"], manifest["epoch"], manifest["published"]) == ("done", 3, ["figure.png", "report.txt"])
    assert (folder / "model.safetensors").read_bytes() == b"w1"
    assert (folder / "report.txt").read_text() == "accuracy 0.9\n"
    assert (out / "report.txt").read_bytes() == (folder / "report.txt").read_bytes()
    assert not os.path.samefile(out / "report.txt", folder / "report.txt")  # a copy: editing it keeps the run whole
    with open(out / "report.txt", "a", encoding="utf-8") as fh:
        fh.write("my notes\n")
    assert verify_run(out)["recorded"]
    (out / "report.txt").write_text("accuracy 0.9\n", encoding="utf-8")
    assert (out / "figure.png").read_bytes() == b"\x89PNG" and reports_dir(out) == folder
    add_to_run(out, {"report.txt": "accuracy 0.95\n"})  # again: the newer report, the figure kept
    assert (out / "report.txt").read_text() == "accuracy 0.95\n" and (out / "figure.png").is_file()
    assert read_manifest(out)["published"] == ["figure.png", "report.txt"]


def test_a_new_run_over_the_folder_takes_the_old_reports_off_the_root(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _commit(out)
    add_to_run(out, {"report.txt": "old model\n"})
    _commit(out, "b" * 32, overwrite=True, weights=b"w2")
    assert not (out / "report.txt").exists() and reports_dir(out) == out
    assert "published" not in read_manifest(out)


def test_a_users_file_of_a_reports_name_is_never_removed_or_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _commit(out)
    (out / "report.txt").write_text("my notes\n", encoding="utf-8")
    add_to_run(out, {"report.txt": "accuracy 0.9\n"})
    assert (out / "report.txt").read_text() == "my notes\n"
    assert (committed_dir(out) / "report.txt").read_text() == "accuracy 0.9\n"
    _commit(out, "b" * 32, overwrite=True)
    assert (out / "report.txt").read_text() == "my notes\n"


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def test_a_crash_at_every_file_operation_of_adding_reports_leaves_a_whole_run(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    _commit(reference)
    counter = FaultyOps()
    saved, fileops.fs = fileops.fs, counter
    try:
        add_to_run(reference, {"report.txt": "accuracy 0.9\n", "report.html": "<p>0.9</p>"})
    finally:
        fileops.fs = saved
    assert counter.count > 10
    outcomes = set()
    for at in range(1, counter.count + 1):
        out = tmp_path / f"crash-{at}"
        _commit(out)
        saved, fileops.fs = fileops.fs, FaultyOps(at)
        try:
            with pytest.raises(_Crash):
                add_to_run(out, {"report.txt": "accuracy 0.9\n", "report.html": "<p>0.9</p>"})
        finally:
            fileops.fs = saved
        folder = committed_dir(out)
        assert (folder / "model.safetensors").read_bytes() == b"w1", at
        reports = {n for n in ("report.txt", "report.html") if (folder / n).is_file()}
        assert reports in (set(), {"report.txt", "report.html"}), (at, reports)  # both or neither
        for name in ("report.txt", "report.html"):  # a root copy is always the committed one
            if (out / name).exists():
                assert (out / name).read_bytes() == (folder / name).read_bytes(), (at, name)
        outcomes.add(bool(reports))
        add_to_run(out, {"report.txt": "accuracy 0.9\n", "report.html": "<p>0.9</p>"})  # again, to the end
        assert _digests(out).keys() >= {MANIFEST, "report.txt", "report.html"}
        assert (out / "report.txt").read_text() == "accuracy 0.9\n"
    assert outcomes == {True, False}
