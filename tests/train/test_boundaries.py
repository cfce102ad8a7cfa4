"""Folders, files and numbers attnkit did not make: never run, never deleted, always named.

A model folder's own code never runs (whatever stdin answers), pickled weights
and lying safetensors headers are refused by name, ``--overwrite`` replaces
only attnkit runs or empty folders, a folder being written is named as such
first, OS errors (full disk, read-only folder, symlink loops) are one line
naming the path, and ``--seed`` names its range.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.runs import fileops, rundir
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import FullDisk

EVIL = '''
from pathlib import Path
Path({marker!r}).write_text("the folder's code ran")
from transformers import PretrainedConfig, PreTrainedModel
class EvilConfig(PretrainedConfig):
    model_type = "evil"
class EvilModel(PreTrainedModel):
    config_class = EvilConfig
'''


def _invoke(*args: str, stdin: str | None = None):
    return CliRunner().invoke(cli, list(args), input=stdin)


def _one_line(output: str) -> str:
    """The one error line of a command's output (progress lines before it aside)."""
    errors = [line for line in output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and output.strip().endswith(errors[0]) and "Traceback" not in output, output
    return errors[0]


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def data_csv(tmp_path: Path) -> Path:
    return write_keyword_csv(tmp_path / "data.csv", 64)


# --- no foreign code -------------------------------------------------------------------------------


def _code_folder(tmp_path: Path, config_file: str = "config.json", model_type: str = "evil") -> tuple[Path, Path]:
    """A folder whose ``config_file`` maps the Auto classes to its own ``evilmod.py``, which writes a marker."""
    folder, marker = tmp_path / "evil", tmp_path / "MARKER"
    folder.mkdir()
    (folder / "evilmod.py").write_text(EVIL.format(marker=str(marker)))
    auto_map = {"AutoConfig": "evilmod.EvilConfig", "AutoModel": "evilmod.EvilModel",
                "AutoTokenizer": ["evilmod.EvilTokenizer", None]}
    config = {"model_type": model_type, "architectures": ["EvilModel"]}
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": auto_map}
                                                   if config_file == "config.json" else config))
    if config_file != "config.json":
        (folder / config_file).write_text(json.dumps({"auto_map": auto_map}))
    return folder, marker


@pytest.mark.parametrize("config_file", ["config.json", "tokenizer_config.json"])
def test_a_folders_own_code_never_runs_from_the_library(tmp_path, config_file) -> None:
    from attnkit.inspect.sources import hf_folder_attention

    folder, marker = _code_folder(tmp_path, config_file)
    with pytest.raises(ValueError, match=f"{config_file} has auto_map .*evilmod.EvilModel.*never runs"):
        hf_folder_attention(folder, ["a text"])
    assert not marker.exists()


@pytest.mark.parametrize("model_type", ["evil", "bert"])
def test_visualize_answers_yes_on_stdin_and_still_nothing_runs(tmp_path, model_type) -> None:
    folder, marker = _code_folder(tmp_path, model_type=model_type)
    if model_type == "bert":  # the folder attnkit's own BertModel reads
        from safetensors.torch import save_file
        save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    result = _invoke("visualize", str(folder), "a text", "-o", str(tmp_path / "out.html"), stdin="y\ny\n")
    line = _one_line(result.output)
    assert result.exit_code == 1 and "auto_map" in line and str(folder / "config.json") in line, result.output
    assert not marker.exists() and not (tmp_path / "out.html").exists()


def test_init_from_a_folder_with_custom_code_is_refused(tmp_path, data_csv) -> None:
    folder, marker = _code_folder(tmp_path, model_type="bert")
    result = _invoke("train", "--data", str(data_csv), "--model", "bert", "--init-from", str(folder),
                     "--out", str(tmp_path / "run"), "--epochs", "1", "--device", "cpu", stdin="y\n")
    line = _one_line(result.output)
    assert result.exit_code == 1 and "--init-from" in line and "auto_map" in line, result.output
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_every_transformers_load_is_local_and_never_trusts_the_folder(monkeypatch, tmp_path) -> None:
    import transformers

    from attnkit.inspect import sources

    seen: list[dict[str, object]] = []

    def spy(*args: object, **kwargs: object) -> None:
        seen.append(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", spy)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="transformers cannot load"):
        sources.hf_folder_attention(tmp_path, ["a text"])
    assert seen and seen[0]["trust_remote_code"] is False and seen[0]["local_files_only"] is True
    assert sources.SAFE_LOAD == {"trust_remote_code": False, "local_files_only": True}


def test_a_timm_name_with_a_hub_or_folder_source_is_refused(tmp_path) -> None:
    from attnkit.inspect.sources import timm_attention

    for name in ("hf-hub:someone/vit", f"local-dir:{tmp_path}"):
        with pytest.raises(ValueError, match="registered timm architecture name"):
            timm_attention(name, tmp_path / "w.safetensors", ["img.png"])


# --- pickles and damaged safetensors ---------------------------------------------------------------


def _bert_config(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}))
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "text"]))


def test_pickled_weights_are_refused_by_name_with_the_safe_alternative(tmp_path, data_csv) -> None:
    from attnkit.inspect.sources import hf_folder_attention
    from attnkit.models.bert import BertModel

    folder = tmp_path / "bert"
    _bert_config(folder)
    torch.save({"embeddings.word_embeddings.weight": torch.zeros(30, 8)}, folder / "pytorch_model.bin")
    for load in (lambda: hf_folder_attention(folder, ["a text"]), lambda: BertModel.from_pretrained(folder)):
        with pytest.raises(ValueError, match=r"pytorch_model.bin holds pickled weights.*model.safetensors"):
            load()
    result = _invoke("visualize", str(folder), "a text", "-o", str(tmp_path / "out.html"))
    line = _one_line(result.output)
    assert result.exit_code == 1 and str(folder / "pytorch_model.bin") in line and "weights_only" not in line
    result = _invoke("train", "--data", str(data_csv), "--model", "bert", "--init-from", str(folder),
                     "--out", str(tmp_path / "run"), "--device", "cpu")
    line = _one_line(result.output)
    assert result.exit_code == 1 and "--init-from" in line and "pytorch_model.bin" in line, result.output


@pytest.mark.parametrize("header", [struct.pack("<Q", 1 << 40), struct.pack("<Q", 40) + b'{"x": {"dtype": "F32"'])
def test_a_lying_safetensors_header_names_the_file(tmp_path, header) -> None:
    from attnkit.inspect.sources import hf_folder_attention
    from attnkit.models.bert import BertModel

    folder = tmp_path / "bert"
    _bert_config(folder)
    (folder / "model.safetensors").write_bytes(header + b"\0" * 64)
    for load in (lambda: hf_folder_attention(folder, ["a text"]), lambda: BertModel.from_pretrained(folder)):
        with pytest.raises(ValueError, match=f"{folder / 'model.safetensors'} is not a readable safetensors"):
            load()
    result = _invoke("visualize", str(folder), "a text", "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 1 and str(folder / "model.safetensors") in _one_line(result.output)


# --- only runs are replaced ------------------------------------------------------------------------


def _foreign(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    files = ({"config.json": '{"model_type": "bert"}', "model.safetensors": "weights", "tokenizer.json": "{}"}
             if kind == "hf-model" else {"metrics.json": '{"f1": 0.9}', "report.html": "<p>mine</p>"})
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _refusal(result, folder: Path, names: list[str]) -> None:
    line = _one_line(result.output)
    assert result.exit_code == 1, result.output
    assert str(folder) in line and all(name in line for name in names), line
    assert "--overwrite" not in line and "--resume" not in line and "run_id" not in line, line


@pytest.mark.parametrize("kind", ["hf-model", "plain"])
def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path, data_csv, kind) -> None:
    folder = _foreign(tmp_path, kind)
    names = sorted(p.name for p in folder.iterdir())
    before = _snapshot(folder)
    for args in (["train", "--data", str(data_csv), "--out", str(folder), "--overwrite", *TINY],
                 ["train", "--data", str(data_csv), "--out", str(folder), "--overwrite", "--backend", "numpy",
                  "--epochs", "1", "--quiet"],
                 ["demo", "--out", str(folder), "--overwrite", "--quick", "--quiet"],
                 ["train", "--data", str(data_csv), "--out", str(folder), *TINY]):
        _refusal(_invoke(*args), folder, names)
        assert _snapshot(folder) == before and sorted(p.name for p in folder.iterdir()) == names
    with pytest.raises(rundir.RunExistsError, match="not an attnkit run"):
        rundir.RunWriter(folder, "any", overwrite=True)


def test_overwrite_refuses_translate_and_caption_into_a_foreign_folder(tmp_path) -> None:
    folder = _foreign(tmp_path, "plain")
    before = _snapshot(folder)
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("ein haus\nein baum\n" * 20)
    tgt.write_text("a house\na tree\n" * 20)
    for args in (["train", "--task", "translate", "--src", str(src), "--tgt", str(tgt), "--out", str(folder),
                  "--overwrite", "--epochs", "1"],
                 ["train", "--task", "caption", "--out", str(folder), "--overwrite", "--epochs", "1",
                  "--train-size", "8", "--val-size", "4"]):
        _refusal(_invoke(*args), folder, ["metrics.json", "report.html"])
        assert _snapshot(folder) == before


def test_overwrite_still_replaces_an_empty_folder_and_a_run(tmp_path, data_csv) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _invoke("train", "--data", str(data_csv), "--out", str(empty), "--overwrite", *TINY).exit_code == 0
    first = ckpt.read_run_config(empty)["run_id"]
    (empty / "notes.txt").write_text("kept")  # the user's file beside a run is not the run's to delete
    result = _invoke("train", "--data", str(data_csv), "--out", str(empty), "--overwrite", *TINY)
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(empty)["run_id"] != first
    assert (empty / "notes.txt").read_text() == "kept"
    second = ckpt.read_run_config(empty)["run_id"]
    kept = [json.loads((g / "config.json").read_text())["run_id"] for g in (empty / "checkpoints").iterdir()]
    assert kept and set(kept) == {second}  # nothing of the replaced run is left


def _user_checkpoints(tmp_path: Path, case: str) -> Path:
    """A folder that is not a run but holds all-digit folders under checkpoints/ (files the user made)."""
    folder = tmp_path / case
    if case == "epoch-files":
        (folder / "checkpoints" / "000007").mkdir(parents=True)
        (folder / "checkpoints" / "000007" / "epoch7.ckpt").write_bytes(b"the user's weights")
    elif case == "step-folder":
        (folder / "checkpoints" / "120000").mkdir(parents=True)
        (folder / "checkpoints" / "120000" / "model.pt").write_bytes(b"the user's model")
    else:  # the user's own current.json names generation 1
        (folder / "checkpoints" / "000001").mkdir(parents=True)
        (folder / "checkpoints" / "000001" / "data.bin").write_bytes(b"the user's data")
        (folder / "current.json").write_text(json.dumps({"generation": 1}))
    return folder


@pytest.mark.parametrize("case", ["epoch-files", "step-folder", "user-manifest"])
def test_all_digit_folders_under_checkpoints_are_not_taken_for_generations(tmp_path, data_csv, case) -> None:
    folder = _user_checkpoints(tmp_path, case)
    before = _snapshot(folder)
    for extra in (["--overwrite"], []):
        result = _invoke("train", "--data", str(data_csv), "--epochs", "1", *extra, "--out", str(folder), *TINY)
        line = _one_line(result.output)
        assert result.exit_code == 1 and str(folder) in line and "checkpoints/" in line, result.output
        assert "--overwrite" not in line and "interrupted" not in line, line
        assert _snapshot(folder) == before
    for call in (lambda: rundir.RunWriter(folder, "any", overwrite=True).open(),
                 lambda: rundir.clear_run(folder)):
        with pytest.raises(rundir.RunExistsError, match="checkpoints/|current.json"):
            call()
        assert _snapshot(folder) == before
    with pytest.raises(ckpt.RunFileError, match="not an attnkit run directory"):
        ckpt.committed_dir(folder) if case != "user-manifest" else ckpt.committed_dir(folder / "missing")


def test_a_users_folder_inside_a_runs_checkpoints_is_never_removed(tmp_path, data_csv) -> None:
    run = tmp_path / "run"
    assert _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY).exit_code == 0
    mine = run / "checkpoints" / "000099"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY)
    assert result.exit_code == 1 and "checkpoints/000099" in _one_line(result.output), result.output
    assert (mine / "notes.txt").read_text() == "mine"
    mine.rename(tmp_path / "moved")
    assert _invoke("train", "--data", str(data_csv), "--out", str(run), "--overwrite", *TINY).exit_code == 0


def test_a_run_interrupted_before_its_first_commit_is_still_one(tmp_path) -> None:
    """What a writer leaves before its first commit (a marked generation, never named) is a run's to replace."""
    run = tmp_path / "run"
    writer = rundir.RunWriter(run, "first").open()
    staging = writer.stage()
    (staging / "config.json").write_text("{}")
    (run / "checkpoints").mkdir(exist_ok=True)
    staging.rename(run / "checkpoints" / "000001")  # renamed into place; killed before current.json
    writer._staging.remove(staging)
    writer.close()
    with pytest.raises(rundir.RunExistsError, match="interrupted before its first checkpoint"):
        rundir.check_run_dir(run, "second")
    with rundir.RunWriter(run, "second", overwrite=True) as again:
        again.commit(again.stage(), status="done")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["000002"]


def test_a_legacy_layout_folder_is_not_a_run(tmp_path) -> None:
    """config.json and weights directly in a folder (no manifest): a foreign folder, read and written as one."""
    folder = _foreign(tmp_path, "hf-model")
    with pytest.raises(ckpt.RunFileError, match="not an attnkit run directory"):
        ckpt.committed_dir(folder)
    assert not hasattr(rundir, "remove_legacy_files") and not hasattr(rundir, "TOP_LEVEL_FILES")


# --- the lock first, OS errors named ---------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_being_trained_is_named_as_such_first(tmp_path, data_csv, overwrite) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / ".staging-abc").mkdir()  # what a first epoch in progress looks like
    with rundir.RunLock(run):
        result = _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY,
                         *(["--overwrite"] if overwrite else []))
    line = _one_line(result.output)
    assert result.exit_code == 1 and "being written by another process" in line and "--overwrite" not in line


def test_a_full_disk_names_the_path_and_the_run_resumes(tmp_path, data_csv, monkeypatch) -> None:
    run = tmp_path / "run"
    monkeypatch.setattr(fileops, "fs", FullDisk(run))
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY)
    line = _one_line(result.output)
    assert result.exit_code == 1 and str(run) in line and "disk is full (ENOSPC)" in line, line
    assert "intact at its last commit (epoch 1)" in line and "--resume" in line, line
    assert ckpt.read_run_config(run)["status"] == "training"
    monkeypatch.setattr(fileops, "fs", fileops.FileOps())
    result = _invoke("train", "--out", str(run), "--resume")
    assert result.exit_code == 0, result.output
    assert ckpt.read_run_config(run)["status"] == "done"


def test_a_full_disk_before_the_first_commit_says_nothing_was_committed(tmp_path, data_csv,
                                                                      monkeypatch) -> None:
    class FullFromTheStart(fileops.FileOps):
        def write(self, path: Path, data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    run = tmp_path / "run"
    monkeypatch.setattr(fileops, "fs", FullFromTheStart())
    line = _one_line(_invoke("train", "--data", str(data_csv), "--out", str(run), *TINY).output)
    assert "disk is full" in line and f"nothing was committed to {run} yet" in line, line


def test_a_read_only_output_folder_is_named(tmp_path, data_csv, monkeypatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):  # what os.open does on a read-only mount
        if Path(path).parent == run and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    line = _one_line(_invoke("train", "--data", str(data_csv), "--out", str(run), *TINY).output)
    assert line == f"Error: {run / '.lock'}: the file system is read-only (EROFS)"


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_symlinked_output_that_leads_nowhere_is_named(tmp_path, data_csv, kind) -> None:
    run = tmp_path / "run"
    run.symlink_to(run if kind == "loop" else tmp_path / "gone")
    result = _invoke("train", "--data", str(data_csv), "--out", str(run), *TINY)
    line = _one_line(result.output)
    assert result.exit_code == 1 and str(run) in line and "symbolic link" in line, line
    assert ("loops back on itself" if kind == "loop" else "does not exist") in line, line
    assert "Errno" not in line


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_symlinked_data_that_leads_nowhere_is_named(tmp_path, kind) -> None:
    data = tmp_path / "data.csv"
    data.symlink_to(data if kind == "loop" else tmp_path / "gone.csv")
    result = _invoke("train", "--data", str(data), "--out", str(tmp_path / "run"), *TINY)
    line = _one_line(result.output)
    assert result.exit_code in (1, 2) and "data.csv" in line and "Traceback" not in result.output, line


# --- numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["train", "--data", "DATA", "--out", "run"], ["demo"],
                                     ["train", "--task", "translate", "--src", "DATA", "--tgt", "DATA", "--out", "r"],
                                     ["train", "--task", "caption", "--out", "r"], ["baseline", "--data", "DATA"]])
def test_a_seed_out_of_range_names_the_range(command, data_csv) -> None:
    result = _invoke(*[str(data_csv) if a == "DATA" else a for a in command], "--seed", "99999999999999999999")
    assert result.exit_code == 2 and "--seed" in result.output and "0<=x<=4294967295" in result.output, \
        result.output
    assert "Overflow" not in result.output
