"""A run's bytes are verified, not trusted: every commit records the SHA-256 and size of each file it holds,
and every reader refuses a file that differs, naming it, both digests and what to do; ``attnkit verify``
checks runs without loading a model; runs committed before the record still load, with a notice."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import attnkit
from attnkit.cli import cli
from attnkit.train.runs import rundir
from attnkit.train.runs.digests import RunIntegrityError
from attnkit.train.runs.rundir import (
    GENERATION_MARK,
    MANIFEST,
    RunExistsError,
    committed_dir,
    read_manifest,
    record_digests,
    verify_run,
)
from tests.support.cli import TINY, write_keyword_csv


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _flip(path: Path, at: int | None = None) -> None:
    """Flip one byte of ``path`` in place (its size unchanged)."""
    with open(path, "r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(size // 2 if at is None else at)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x01]))


def _recorded_names(run: Path) -> list[str]:
    return sorted(read_manifest(run)["files"])  # type: ignore[index]


# --- one run of each kind --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


@pytest.fixture(scope="module")
def classification(tmp_path_factory: pytest.TempPathFactory, data_csv: Path) -> Path:
    out = tmp_path_factory.mktemp("classification") / "run"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    return out


def _numpy(out: Path) -> Path:
    from tests.train.test_run_transactions_tasks import train_numpy

    train_numpy(out)
    return out


def _translation(out: Path) -> Path:
    from tests.train.test_run_transactions_tasks import fit

    fit(out, epochs=1)
    return out


def _captioning(out: Path) -> Path:
    from tests.support.cli import train_caption
    from tests.train.test_run_transactions_tasks import SMALL

    result = CliRunner().invoke(train_caption, ["--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    return out


KINDS: dict[str, Callable[[Path], Path]] = {"numpy": _numpy, "translation": _translation, "captioning": _captioning}


@pytest.fixture(scope="module", params=["classification", *KINDS])
def any_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "classification":
        return Path(request.getfixturevalue("classification"))
    return KINDS[request.param](tmp_path_factory.mktemp(request.param) / "run")


# --- the record ------------------------------------------------------------------------------------------


def test_every_commit_records_each_file_it_holds(any_run: Path) -> None:
    manifest = read_manifest(any_run)
    assert manifest is not None
    folder = committed_dir(any_run)
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                     if p.is_file() and p.name != GENERATION_MARK)
    assert _recorded_names(any_run) == on_disk and "config.json" in on_disk
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    # the generation's own mark records the same files: what its removal may remove
    assert json.loads((folder / GENERATION_MARK).read_text())["files"] == manifest["files"]
    assert verify_run(any_run)["files"] == len(on_disk)


def test_one_flipped_byte_in_any_file_of_any_run_is_refused_by_name(any_run: Path) -> None:
    """Each recorded file of each kind of run, one byte flipped (same size): the kind's loader and
    ``attnkit verify`` refuse it naming the file and both digests; restored, it loads again."""
    folder = committed_dir(any_run)
    for name in _recorded_names(any_run):
        path = folder / name
        expected = hashlib.sha256(path.read_bytes()).hexdigest()
        _flip(path)
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        try:
            with pytest.raises(RunIntegrityError) as err:
                verify_run(any_run)
            message = str(err.value)
            assert str(path) in message and expected in message and found in message
            assert "restore the file" in message and "train the run again" in message
            if not name.startswith(rundir.RESUME_ONLY):  # resuming alone reads the train state
                with pytest.raises(RunIntegrityError, match=f"{path.name} is not the file its commit recorded"):
                    attnkit.load_run(any_run)
            result = _invoke("verify", str(any_run))
            assert result.exit_code == 1 and result.output.count("\n") == 1 and name in result.output
        finally:
            _flip(path)
    attnkit.load_run(any_run)
    assert _invoke("verify", str(any_run)).exit_code == 0


@pytest.mark.parametrize("damage", ["truncated", "extended", "missing", "digest edited", "size edited"])
def test_truncated_extended_missing_files_and_edited_digests_are_refused(
        classification: Path, tmp_path: Path, damage: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(classification, run)
    weights = committed_dir(run) / "model.safetensors"
    raw = weights.read_bytes()
    weights.unlink()  # never write through a link
    if damage == "truncated":
        weights.write_bytes(raw[:-1])
    elif damage == "extended":
        weights.write_bytes(raw + b"\0")
    elif damage != "missing":
        weights.write_bytes(raw)
        manifest = json.loads((run / MANIFEST).read_text())
        entry = manifest["files"]["model.safetensors"]
        if damage == "digest edited":
            entry["sha256"] = "0" * 64
        else:
            entry["size"] += 1
        (run / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RunIntegrityError, match=r"model\.safetensors (is missing|is not the file)"):
        attnkit.load_run(run)
    for command in (["predict", str(run), "a film"], ["verify", str(run)],
                    ["visualize", str(run), "a film", "-o", str(tmp_path / "r.html")]):
        result = _invoke(*command)
        assert result.exit_code == 1 and "model.safetensors" in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_a_record_that_is_not_digests_and_sizes_is_named(classification: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(classification, run)
    manifest = json.loads((run / MANIFEST).read_text())
    manifest["files"]["config.json"] = {"sha256": "xyz", "size": -1}
    (run / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(rundir.RunFileError, match=r"current\.json: the record of 'config\.json' is not a SHA-256"):
        attnkit.load_run(run)


def test_resume_refuses_a_damaged_train_state_and_changes_nothing(
        tmp_path: Path, data_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.train.test_run_safety import _snapshot, _unfinished

    run = _unfinished(tmp_path, data_csv, monkeypatch)
    optimizer = committed_dir(run) / "train_state" / "optimizer.safetensors"
    _flip(optimizer)
    before = _snapshot(run)
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 1 and "optimizer.safetensors is not the file its commit recorded" in result.output
    assert _snapshot(run) == before
    _flip(optimizer)
    assert _invoke("train", "--out", str(run), "--resume").exit_code == 0
    assert verify_run(run)["recorded"]


def test_the_server_refuses_a_damaged_run(classification: Path, tmp_path: Path) -> None:
    from attnkit.serve import load_models

    run = tmp_path / "run"
    shutil.copytree(classification, run)
    _flip(committed_dir(run) / "labels.json", at=2)
    with pytest.raises(RunIntegrityError, match=r"labels\.json is not the file"):
        load_models([run])
    result = _invoke("serve", str(run), "--port", "0")
    assert result.exit_code != 0 and "labels.json is not the file its commit recorded" in result.output


# --- attnkit verify ----------------------------------------------------------------------------------------


def test_verify_checks_several_runs_one_line_each_and_json(classification: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(classification, damaged)
    _flip(committed_dir(damaged) / "tokenizer.json")
    ok = _invoke("verify", str(classification))
    assert ok.exit_code == 0 and ok.output.startswith(f"{classification}: ok: generation ")
    both = _invoke("verify", str(classification), str(damaged), str(tmp_path / "nowhere"))
    lines = both.output.strip().splitlines()
    assert both.exit_code == 1 and len(lines) == 3
    assert ": ok: " in lines[0] and lines[1].startswith(f"{damaged}: damaged: ") and "tokenizer.json" in lines[1]
    assert lines[2].startswith(f"{tmp_path / 'nowhere'}: not verified: ")
    as_json = _invoke("verify", "--json", str(classification), str(damaged))
    rows = [json.loads(line) for line in as_json.output.splitlines()]
    assert as_json.exit_code == 1 and [r["status"] for r in rows] == ["ok", "damaged"]
    assert rows[0]["files"] == len(_recorded_names(classification)) and rows[0]["bytes"] > 0


def _unrecord(run: Path) -> None:
    """Make ``run`` as a writer before the record left it: no ``files`` in the manifest or the mark."""
    mark = committed_dir(run) / GENERATION_MARK
    manifest = json.loads((run / MANIFEST).read_text())
    del manifest["files"]
    (run / MANIFEST).write_text(json.dumps(manifest))
    mark.unlink()
    mark.write_text(manifest["run_id"] + "\n")


def test_a_run_committed_before_the_record_loads_with_a_notice_and_verify_record_adds_it(
        classification: Path, tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(classification, run)
    _unrecord(run)
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("attnkit").addHandler(handler)
    try:
        attnkit.load_run(run)
        attnkit.load_run(run)
    finally:
        logging.getLogger("attnkit").removeHandler(handler)
    notices = [line for line in seen if "without the digests" in line]
    assert notices == [f"notice: {run} was committed without the digests of its files, so its bytes are not "
                       f"verified; attnkit verify --record {run} adds them"]
    unverified = _invoke("verify", str(run))
    assert unverified.exit_code == 1 and f"attnkit verify --record {run} adds them" in unverified.output
    recorded = _invoke("verify", "--record", str(run))
    assert recorded.exit_code == 0 and "recorded the SHA-256 of generation" in recorded.output, recorded.output
    assert read_manifest(run)["files"] == read_manifest(classification)["files"]  # type: ignore[index]
    _flip(committed_dir(run) / "model.safetensors")
    assert _invoke("verify", str(run)).exit_code == 1
    again = _invoke("verify", "--record", str(run))  # never blesses damaged bytes
    assert again.exit_code == 1 and "damaged" in again.output
    with pytest.raises(RunIntegrityError):
        record_digests(run)


def test_verify_record_is_refused_while_another_process_writes_the_run(classification: Path, tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(classification, run)
    _unrecord(run)
    before = (run / MANIFEST).read_bytes()
    with rundir.RunLock(run):
        result = _invoke("verify", "--record", str(run))
    assert result.exit_code == 1 and "being written by another process" in result.output
    assert (run / MANIFEST).read_bytes() == before


# --- removing a generation removes what its writer made ------------------------------------------------------


def test_overwrite_refuses_a_user_file_inside_a_generation_and_removes_nothing(
        classification: Path, tmp_path: Path, data_csv: Path) -> None:
    from tests.train.test_run_safety import _snapshot

    run = tmp_path / "run"
    shutil.copytree(classification, run)
    notes = committed_dir(run) / "mynotes.txt"
    notes.write_text("mine")
    before = _snapshot(run)
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY)
    assert result.exit_code == 1 and f"checkpoints/{committed_dir(run).name}/mynotes.txt" in result.output
    assert _snapshot(run) == before
    with pytest.raises(RunExistsError, match="mynotes.txt"):
        rundir.clear_run(run)
    assert _snapshot(run) == before and attnkit.load_run(run)  # the user's file does not stop a reader
    notes.unlink()
    assert _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY).exit_code == 0


def test_an_old_generation_loses_only_what_its_writer_made(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with rundir.RunWriter(run, "r1") as writer:
        for epoch in (1, 2):
            staging = writer.stage()
            (staging / "config.json").write_text(json.dumps({"epoch": epoch}))
            (staging / "sub").mkdir()
            (staging / "sub" / "w.bin").write_bytes(bytes([epoch]))
            first = writer.commit(staging, status="training", epoch=epoch)
            if epoch == 1:
                (first / "sub" / "mine.txt").write_text("mine")
        staging = writer.stage()
        (staging / "config.json").write_text("{}")
        writer.commit(staging, status="done", epoch=3)
    old = run / "checkpoints" / "000001"
    assert sorted(p.relative_to(old).as_posix() for p in old.rglob("*")) == ["sub", "sub/mine.txt"]
    assert verify_run(run)["generation"] == 3


def test_an_unmarked_folder_above_the_committed_generation_is_refused_not_taken(
        classification: Path, tmp_path: Path, data_csv: Path) -> None:
    from tests.train.test_run_safety import _snapshot

    run = tmp_path / "run"
    shutil.copytree(classification, run)
    committed = int(committed_dir(run).name)
    stray = run / "checkpoints" / f"{committed + 1:06d}"
    stray.mkdir()
    (stray / "config.json").write_text("{}")
    before = _snapshot(run)
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY)
    assert result.exit_code == 1 and f"checkpoints/{stray.name}" in result.output, result.output
    assert _snapshot(run) == before
    with pytest.raises(RunExistsError, match=f"checkpoints/{stray.name}"):
        rundir.clear_run(run)
    assert _snapshot(run) == before
