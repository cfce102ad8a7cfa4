"""A trained run is never lost: fault injection at every file operation of a commit, SIGKILL,
safe --resume and --overwrite, unfinished runs named, damaged files named, one writer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.data.readers import Example
from attnkit.data.synthetic import keyword_corpus
from attnkit.train.config import TrainConfig
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.runs import fileops, rundir
from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import recorded

ROOT = Path(__file__).resolve().parents[2]

MODEL = {"layer": {"d_model": 16, "num_heads": 2, "dropout": 0.1}, "num_layers": 0}
CONFIG = {"epochs": 3, "batch_size": 16, "lr": 0.01, "patience": 0, "device": "cpu", "seed": 5}


def _examples() -> list[Example]:
    return [Example(d.text, d.label) for d in keyword_corpus(64, seed=3, length=(6, 9))]


def _fit(out: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    ex = _examples()
    tokenizer = label_vocab = None
    if resume:
        meta = ckpt.read_run_config(out)
        tokenizer = ckpt.load_run_tokenizer(out, meta)
        from attnkit.data.batching import LabelVocab
        label_vocab = LabelVocab.from_dict(ckpt.read_json(ckpt.committed_dir(out) / "labels.json"))
    fit_classifier(ex[:44], ex[44:54], ex[54:], model_name="document", model_options=MODEL,
                   train_config=TrainConfig.from_dict(CONFIG), data=DataSettings(max_len=16), out_dir=out,
                   run_id="run-under-test", resume=resume, overwrite=overwrite, quiet=True,
                   tokenizer=tokenizer, label_vocab=label_vocab)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return ckpt.load_tensors(ckpt.committed_dir(out) / "model.safetensors")


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (but the lock) and the hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


class _Crash(Exception):
    pass


class FaultyOps(fileops.FileOps):
    """Counts file operations and raises (or kills the process) at operation ``at``."""

    def __init__(self, at: int | None = None, kill: bool = False) -> None:
        self.at, self.kill, self.count = at, kill, 0

    def _step(self) -> None:
        self.count += 1
        if self.count == self.at:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise _Crash(f"fault at file operation {self.count}")


for _name in ("write", "replace", "mkdir", "link", "remove_tree", "remove", "sync_dir"):
    def _wrapped(self: FaultyOps, *args: object, _name: str = _name) -> None:
        self._step()
        getattr(fileops.FileOps, _name)(self, *args)
    setattr(FaultyOps, _name, _wrapped)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict[str, torch.Tensor], int]:
    """The weights of an uninterrupted run, and how many file operations it made."""
    out = tmp_path_factory.mktemp("straight") / "run"
    ops = FaultyOps()
    saved, fileops.fs = fileops.fs, ops
    try:
        _fit(out)
    finally:
        fileops.fs = saved
    return _weights(out), ops.count


def test_a_crash_at_every_file_operation_resumes_bit_identically_or_says_unfinished(tmp_path, reference) -> None:
    weights, total = reference
    assert total > 30  # three epoch commits and the final one
    outcomes = {"resumed": 0, "done": 0, "nothing committed": 0}
    for at in range(1, total + 1):
        out = tmp_path / f"crash-{at}"
        saved, fileops.fs = fileops.fs, FaultyOps(at)
        try:
            with pytest.raises(_Crash):
                _fit(out)
        finally:
            fileops.fs = saved
        try:
            meta = ckpt.read_run_config(out)
        except rundir.RunFileError as err:
            assert "no committed checkpoint" in str(err) or "not an attnkit run directory" in str(err)
            outcomes["nothing committed"] += 1
            continue
        # Whatever is committed is complete: it loads (as unfinished or finished).
        ckpt.load_checkpoint(out, allow_unfinished=True)
        if meta["status"] == "done":
            outcomes["done"] += 1
        else:
            with pytest.raises(rundir.UnfinishedRunError, match="--resume"):
                ckpt.load_checkpoint(out)
            _fit(out, resume=True)
            outcomes["resumed"] += 1
        assert _same(_weights(out), weights), f"crash at operation {at}: weights differ after resume"
        assert ckpt.read_run_config(out)["status"] == "done"
    assert all(outcomes.values()), outcomes


SCRIPT = textwrap.dedent("""
    import sys
    import tests.train.test_run_safety as t
    from attnkit.train.runs import fileops, rundir
    fileops.fs = t.FaultyOps(int(sys.argv[2]), kill=True)
    t._fit(t.Path(sys.argv[1]))
""")


@pytest.mark.parametrize("fraction", [0.3, 0.62, 0.97])
def test_sigkill_mid_commit_then_resume_gives_identical_weights(tmp_path, reference, fraction) -> None:
    weights, total = reference
    at = max(1, int(total * fraction))
    out = tmp_path / "run"
    script = tmp_path / "kill.py"
    script.write_text(SCRIPT)
    # the child imports this module as the package tests.train.test_run_safety, from the repository root
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(script), str(out), str(at)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    meta = ckpt.read_run_config(out)  # something was committed at these points
    if meta["status"] != "done":
        _fit(out, resume=True)
    assert _same(_weights(out), weights)
    assert not list(out.glob(".staging-*")), "the resuming writer sweeps what the killed one left"


# --- the command line ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, data_csv) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(run, target)
    return target


def _train_until_first_commit(monkeypatch, *args: str) -> None:
    """``attnkit train ARGS`` stopped (as by Ctrl-C or a kill) right after its first epoch's commit."""
    real = ckpt.RunCheckpointer.commit

    def commit_once(self, *a, **k):
        if self.writer.commits >= 1:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(ckpt.RunCheckpointer, "commit", commit_once)
    result = _invoke("train", *args, *TINY)
    monkeypatch.setattr(ckpt.RunCheckpointer, "commit", real)
    assert result.exit_code == 130, result.output


def _unfinished(tmp_path: Path, data_csv: Path, monkeypatch) -> Path:
    """A CLI run stopped after its first epoch's commit."""
    out = tmp_path / "unfinished"
    _train_until_first_commit(monkeypatch, "--data", str(data_csv), "--out", str(out))
    assert ckpt.read_run_config(out)["status"] == "training"
    return out


def test_resume_of_a_finished_run_changes_nothing(tmp_path, finished) -> None:
    run = _copy(finished, tmp_path)
    before = _snapshot(run)
    (ckpt.committed_dir(run) / "train_state" / "state.json").write_text("{ damaged")
    before = _snapshot(run)
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 0 and "nothing to resume" in result.output
    assert _snapshot(run) == before
    result = _invoke("predict", str(run), "a film")
    assert result.exit_code == 0 and "warning" not in result.output


def test_failed_resume_leaves_the_run_byte_identical(tmp_path, data_csv, monkeypatch) -> None:
    run = _unfinished(tmp_path, data_csv, monkeypatch)
    state = ckpt.committed_dir(run) / "train_state" / "state.json"
    good = state.read_bytes()
    state.write_text("{ damaged")
    recorded(state)
    before = _snapshot(run)
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 1 and "state.json is not valid JSON" in result.output
    assert "Traceback" not in result.output
    assert _snapshot(run) == before
    state.write_bytes(good)
    recorded(state)
    last = ckpt.committed_dir(run) / "train_state" / "last.safetensors"
    last.write_bytes(last.read_bytes()[:100])
    recorded(last)
    before = _snapshot(run)
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 1 and "last.safetensors is not a readable safetensors file" in result.output
    assert _snapshot(run) == before


def test_resume_with_changed_data_is_refused_untouched(tmp_path, data_csv, monkeypatch) -> None:
    data = tmp_path / "mine.csv"
    shutil.copy(data_csv, data)
    out = tmp_path / "run"
    _train_until_first_commit(monkeypatch, "--data", str(data), "--out", str(out))
    with open(data, "a", encoding="utf-8") as fh:
        fh.write("one more row,pos\n")
    before = _snapshot(out)
    result = _invoke("train", "--out", str(out), "--resume")
    assert result.exit_code != 0 and "content changed" in result.output
    assert _snapshot(out) == before
    # the data deleted: the error names the flag that points to a copy
    data.unlink()
    result = _invoke("train", "--out", str(out), "--resume")
    assert result.exit_code != 0 and "is gone" in result.output and "--data" in result.output
    # a copy with the same content elsewhere is accepted, from another working directory
    shutil.copy(data_csv, tmp_path / "elsewhere.csv")
    monkeypatch.chdir(tmp_path.parent)
    result = _invoke("train", "--out", str(out), "--resume", "--data", str(tmp_path / "elsewhere.csv"))
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(out)["status"] == "done"


def test_a_run_copied_with_its_data_resumes_at_the_new_path(tmp_path, data_csv, monkeypatch) -> None:
    home = tmp_path / "project"
    home.mkdir()
    shutil.copy(data_csv, home / "data.csv")
    monkeypatch.chdir(home)
    _train_until_first_commit(monkeypatch, "--data", "data.csv", "--out", "runs/a")
    moved = tmp_path / "other-machine" / "project"
    shutil.move(str(home), str(moved))
    monkeypatch.chdir(tmp_path)
    result = _invoke("train", "--out", str(moved / "runs" / "a"), "--resume")
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(moved / "runs" / "a")["status"] == "done"


@pytest.mark.parametrize("bad", ["no-label-column", "bad-model-opt"])
def test_overwrite_validates_before_it_replaces(tmp_path, finished, bad) -> None:
    run = _copy(finished, tmp_path)
    before = _snapshot(run)
    data = tmp_path / "bad.csv"
    data.write_text("text,stars\na film,5\n")
    args = ["train", "--data", str(data), "--out", str(run), "--overwrite", *TINY]
    if bad == "bad-model-opt":
        data.write_text("text,label\na film,pos\nno film,neg\n" * 10)
        args += ["--model-opt", "no_such_option=3"]
    result = _invoke(*args)
    assert result.exit_code != 0
    assert ("stars" in result.output or "label" in result.output) if bad == "no-label-column" \
        else "no_such_option" in result.output
    assert _snapshot(run) == before
    assert _invoke("predict", str(run), "a film").exit_code == 0


def test_overwrite_killed_before_its_first_commit_keeps_the_old_run(tmp_path, finished, data_csv,
                                                                    monkeypatch) -> None:
    run = _copy(finished, tmp_path)
    old = _weights(run)

    def stop(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.RunCheckpointer, "commit", stop)
    assert _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY).exit_code == 130
    monkeypatch.undo()
    assert _same(_weights(run), old) and ckpt.read_run_config(run)["status"] == "done"
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY,
                     "--model-opt", "layer.d_model=8")
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(run)["model_config"]["layer"]["d_model"] == 8
    new_id = ckpt.read_run_config(run)["run_id"]
    kept = [json.loads((g / "config.json").read_text())["run_id"] for g in (run / "checkpoints").iterdir()]
    assert kept and set(kept) == {new_id}  # the old run's generations are gone


def test_unfinished_runs_are_refused_unless_allowed(tmp_path, data_csv, monkeypatch) -> None:
    run = _unfinished(tmp_path, data_csv, monkeypatch)
    for args in (["predict", str(run), "a film"], ["evaluate", str(run), "--data", str(data_csv)],
                 ["visualize", str(run), "a film", "-o", str(tmp_path / "report.html")]):
        result = _invoke(*args)
        assert result.exit_code == 1
        assert "did not finish training" in result.output and "--resume" in result.output
        allowed = _invoke(*args, "--allow-unfinished")
        assert allowed.exit_code == 0, allowed.output
        assert "unfinished" in allowed.output and "epoch 1" in allowed.output
    with pytest.raises(rundir.UnfinishedRunError):
        ckpt.load_checkpoint(run)


@pytest.mark.parametrize("damage", ["truncated", "random", "five-bytes", "pickle", "wrong-shape"])
def test_damaged_weights_are_named_in_one_line(tmp_path, finished, data_csv, damage) -> None:
    run = _copy(finished, tmp_path)
    weights = ckpt.committed_dir(run) / "model.safetensors"
    raw = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(raw[: len(raw) // 2])
    elif damage == "random":
        weights.write_bytes(os.urandom(4096))
    elif damage == "five-bytes":
        weights.write_bytes(b"\x00\x01\x02\x03\x04")
    elif damage == "pickle":
        torch.save({"classifier.weight": torch.zeros(2, 16)}, weights)
    else:
        state = ckpt.load_tensors(weights)
        name = next(k for k, v in state.items() if v.dim() == 2)
        state[name] = torch.zeros(3, 3)
        ckpt.save_tensors(weights, state)
    for args in (["predict", str(run), "a film"], ["evaluate", str(run), "--data", str(data_csv)],
                 ["visualize", str(run), "a film", "-o", str(tmp_path / "r.html")]):
        result = _invoke(*args)
        assert result.exit_code == 1, result.output
        assert "model.safetensors" in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("key", ["model_name", "data_settings"])
def test_config_without_a_required_key_is_named(tmp_path, finished, key) -> None:
    run = _copy(finished, tmp_path)
    config = ckpt.committed_dir(run) / "config.json"
    meta = json.loads(config.read_text())
    del meta[key]
    config.write_text(json.dumps(meta))
    recorded(config)
    result = _invoke("predict", str(run), "a film")
    assert result.exit_code == 1 and "config.json" in result.output and key in result.output
    config.write_text('{"run_id": "x",\n "model_name": "document" "oops"}')
    recorded(config)
    result = _invoke("predict", str(run), "a film")
    assert result.exit_code == 1 and "config.json is not valid JSON" in result.output


HOLD = textwrap.dedent("""
    import sys, time
    from attnkit.train.runs.rundir import RunLock
    RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def test_one_writer_and_a_dead_writers_lock_is_taken_over(tmp_path, data_csv, monkeypatch) -> None:
    run = _unfinished(tmp_path, data_csv, monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = _snapshot(run)
        result = _invoke("train", "--out", str(run), "--resume")
        assert result.exit_code == 1 and f"pid {holder.pid}" in result.output
        assert _snapshot(run) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(run)["status"] == "done"


def test_a_finished_run_whose_data_was_deleted_still_serves(tmp_path, data_csv) -> None:
    data = tmp_path / "gone.csv"
    shutil.copy(data_csv, data)
    out = tmp_path / "run"
    assert _invoke("train", "--data", str(data), "--out", str(out), *TINY).exit_code == 0
    data.unlink()
    assert _invoke("predict", str(out), "a film").exit_code == 0
    result = _invoke("train", "--out", str(out), "--resume")
    assert result.exit_code == 0 and "nothing to resume" in result.output


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_run_files_follow_the_umask(tmp_path, data_csv, umask, mode) -> None:
    old = os.umask(umask)
    try:
        out = tmp_path / "run"
        assert _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY).exit_code == 0
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file() and p.name != ".lock"]
    assert files and {oct(p.stat().st_mode & 0o777) for p in files} == {oct(mode)}


def test_predict_file_that_is_not_utf8_names_file_and_line(tmp_path, finished) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_bytes(b"a fine film\nan \xff awful one\n")
    result = _invoke("predict", str(finished), "--file", str(texts))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "texts.txt" in result.output and "line 2" in result.output


def test_predict_says_when_a_text_is_cut_to_the_runs_length(tmp_path, finished) -> None:
    long_text = " ".join(["film"] * 400)
    result = CliRunner().invoke(cli, ["predict", str(finished), long_text])
    assert result.exit_code == 0, result.output
    assert "kept the first" in result.stderr and "400" in result.stderr
