"""Text is text and the command line says what is true: any ``str`` is classified, the terminal shows a
text's control characters escaped (JSON keeps them exact), and each message names what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from tests.support.cli import TINY, write_keyword_csv


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("truthful")
    data = write_keyword_csv(folder / "reviews.csv", 120)
    out = folder / "run"
    result = _invoke("train", "--data", str(data), *TINY, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


# --- any str is a text ---------------------------------------------------------------------------------------

# A lone surrogate: what JSON's "\ud800" gives, and what an argument's undecodable byte 0xff becomes.
ODD = ["a fine \ud800 film", "dull \udcff"]


def test_lone_surrogates_are_classified(trained: Path) -> None:
    printed = _invoke("predict", str(trained), *ODD, "--explain")
    assert printed.exit_code == 0, printed.output
    rows = [line.split("\t") for line in printed.output.splitlines() if not line.startswith("    ")]
    assert [r[2] for r in rows] == ["a fine \\ud800 film", "dull \\udcff"]  # escaped, never an encoding error
    as_json = _invoke("predict", str(trained), *ODD, "--json")
    assert as_json.exit_code == 0, as_json.output
    assert [json.loads(line)["text"] for line in as_json.output.splitlines()] == ODD  # exact


def test_the_terminal_shows_control_and_bidi_characters_escaped(trained: Path) -> None:
    text = "evil\u202eelif.exe\x00\x1b[2J\nnext"
    printed = _invoke("predict", str(trained), text)
    assert printed.exit_code == 0, printed.output
    assert printed.output.split("\t")[2] == "evil\\u202eelif.exe\\x00\\x1b[2J\\x0anext\n"
    assert not {"\u202e", "\x00", "\x1b"} & set(printed.output)
    as_json = _invoke("predict", str(trained), text, "--json")
    assert json.loads(as_json.output)["text"] == text


# --- a wrong flag is named before any data is read -------------------------------------------------------------


@pytest.mark.parametrize("command, extra, valid", [
    ("train", ["--out", "OUT"], "must be one of ['bert', 'document', 'han', 'sentiment', 'wide']"),
    ("train", ["--out", "OUT", "--backend", "numpy"], "of --backend numpy must be one of ['transformer', 'document']"),
    ("cv", [], "must be one of ['bert', 'document', 'han', 'sentiment', 'wide']"),
])
def test_a_misspelt_model_is_named_with_the_close_one_before_the_data_is_read(
        tmp_path: Path, command: str, extra: list[str], valid: str) -> None:
    data = tmp_path / "unreadable.csv"
    data.write_text("sentence,target\nfine,pos\n", encoding="utf-8")  # reading it would fail on its columns
    args = [a.replace("OUT", str(tmp_path / "run")) for a in extra]
    result = _invoke(command, "--data", str(data), "--model", "documnet", *args)
    assert result.exit_code == 1
    assert result.output == (f"Error: --model {valid}, got 'documnet'; "
                             "did you mean 'document'?\n")
    assert not (tmp_path / "run").exists()


def test_a_folder_given_as_data_names_the_data_files_inside(tmp_path: Path) -> None:
    for name in ("train.csv", "test.csv"):
        write_keyword_csv(tmp_path / name, 8)
    (tmp_path / "notes.md").write_text("about the data\n", encoding="utf-8")
    result = _invoke("train", "--data", str(tmp_path), "--out", str(tmp_path / "run"))
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.endswith(
        f"; it holds the data file(s) 'test.csv', 'train.csv': pass a file, not the folder "
        f"(--data {tmp_path / 'train.csv'} --test {tmp_path / 'test.csv'} on the command line)\n")


# --- Ctrl-C says what can be done with what was saved ------------------------------------------------------------


def _interrupt(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> None:
    def stop(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, name, stop)


def test_ctrl_c_before_the_first_commit_says_nothing_can_be_resumed(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.train.loop.trainer import Trainer

    _interrupt(monkeypatch, Trainer, "_train_epoch")
    data = str(trained.parent / "reviews.csv")
    stopped = _invoke("train", "--data", data, *TINY, "--out", str(tmp_path / "new"))
    assert stopped.exit_code == 130
    assert stopped.output.endswith("interrupted; nothing of this run was saved before its first epoch ended, so "
                                   "there is nothing to resume: start it again with the same command\n")
    assert not (tmp_path / "new" / "current.json").exists()
    before = (trained / "current.json").read_text()
    replacing = _invoke("train", "--data", data, *TINY, "--out", str(trained), "--overwrite")
    assert replacing.exit_code == 130 and "--resume" not in replacing.output
    assert f"({trained} holds the run that was there before, as it was)" in replacing.output
    assert (trained / "current.json").read_text() == before


def test_ctrl_c_while_the_reports_are_written_points_to_attnkit_report(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import attnkit.train.tasks.classify.reports as baseline_module

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _interrupt(patch, baseline_module, "results_analysis")
        stopped = _invoke("train", "--data", str(trained.parent / "reviews.csv"), *TINY, "--out", str(out))
    assert stopped.exit_code == 130
    assert stopped.output.endswith(f"interrupted; training had finished and {out} is saved, but its reports "
                                   f"(report.txt, report.html) were not all written; write them with: "
                                   f"attnkit report {out}\n")
    assert not (out / "report.txt").exists()
    written = _invoke("report", str(out))
    assert written.exit_code == 0, written.output
    # the same reports as train writes: the run's own test part, split again from its data
    for name in ("report.txt", "report.html", "faithfulness.json"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name


def test_report_refuses_an_unfinished_run_unless_allowed(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.train.loop.trainer import Trainer

    original, out = Trainer._train_epoch, tmp_path / "run"

    def stop_in_epoch_two(self: Trainer, epoch: int) -> dict[str, float]:
        if epoch == 1:
            raise KeyboardInterrupt
        return original(self, epoch)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_epoch", stop_in_epoch_two)
        stopped = _invoke("train", "--data", str(trained.parent / "reviews.csv"), *TINY, "--out", str(out))
    assert stopped.output.endswith(f"interrupted; continue with: attnkit train --out {out} --resume\n")
    refused = _invoke("report", str(out))
    assert refused.exit_code == 1 and "did not finish training" in refused.output
    assert not (out / "report.txt").exists()
    allowed = _invoke("report", str(out), "--allow-unfinished")
    assert allowed.exit_code == 0, allowed.output
    assert (out / "report.txt").read_text().startswith("attnkit train: results on the test part (n=12)")


def test_report_refuses_a_run_without_a_test_part(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    data = str(trained.parent / "reviews.csv")
    done = _invoke("train", "--data", data, *TINY, "--test-ratio", "0", "--out", str(out))
    assert done.exit_code == 0, done.output
    before = sorted(p.name for p in out.rglob("*"))
    refused = _invoke("report", str(out))
    assert refused.exit_code == 1
    assert refused.output == (f"Error: {out} has no test part (attnkit train --test-ratio 0, without --test): the "
                              f"reports describe the test part\n")
    assert sorted(p.name for p in out.rglob("*")) == before  # nothing written


# --- an early stop says why --------------------------------------------------------------------------------------


def test_an_early_stop_says_why(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.train.tasks.classify.task import ClassificationTask

    monkeypatch.setattr(ClassificationTask, "score", lambda self, metrics: (0.5,))  # never better after epoch 1
    loud = [a for a in TINY if a != "--quiet"]
    result = _invoke("train", "--data", str(trained.parent / "reviews.csv"), *loud, "--epochs", "5",
                     "--patience", "2", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert ("early stop after epoch 3 of 5: the validation accuracy (at an equal one, the loss) did not improve "
            "for 2 epoch(s) (--patience 2); best epoch 1, accuracy ") in result.output
    assert "whose weights are kept\n" in result.output


# --- a second train into the same --out says what is there -----------------------------------------------------


def test_the_identical_train_command_says_the_run_is_trained_already(trained: Path) -> None:
    data = trained.parent / "reviews.csv"
    before = json.loads((trained / "current.json").read_text())
    again = _invoke("train", "--data", str(data), *TINY, "--out", str(trained))
    assert again.exit_code == 1
    assert again.output == (f"Error: {trained} already holds this run, trained with the same data and options; "
                            "pass --overwrite to train it again\n")
    changed = _invoke("train", "--data", str(data), *TINY, "--epochs", "4", "--model-opt", "layer.d_model=8",
                      "--out", str(trained))
    assert changed.exit_code == 1
    assert changed.output == (f"Error: {trained} already holds a different run (--model-opt layer.d_model=16 there, "
                              "8 now; --epochs 3 there, 4 now); replace it with --overwrite, or choose another "
                              "--out\n")
    other = trained.parent / "other.csv"
    other.write_text(data.read_text() + "one more film,positive\n", encoding="utf-8")
    moved = _invoke("train", "--data", str(other), *TINY, "--out", str(trained))
    assert f"(--data '{data}' there, '{other}' now)" in moved.output
    data.write_text(data.read_text() + "one more film,positive\n", encoding="utf-8")  # the same file, edited
    edited = _invoke("train", "--data", str(data), *TINY, "--out", str(trained))
    assert f"(--data {data} holds other data than the run was trained on)" in edited.output
    assert json.loads((trained / "current.json").read_text()) == before  # nothing was touched


def test_saving_from_python_into_another_run_suggests_only_what_python_has(trained: Path, tmp_path: Path) -> None:
    import attnkit

    run = attnkit.load_run(trained)
    target = run.save_pretrained(tmp_path / "copy")
    with pytest.raises(FileExistsError, match=r"already holds a different run \(run_id \w+\); replace it with "
                                              r"overwrite$"):
        run.save_pretrained(target)


def test_a_numpy_run_says_what_is_there_as_the_torch_run_does(tmp_path: Path) -> None:
    data = write_keyword_csv(tmp_path / "reviews.csv", 64)
    out = tmp_path / "numpy"
    base = ["train", "--data", str(data), "--backend", "numpy", "--quiet", "--out", str(out)]
    args = [*base, "--epochs", "1"]
    assert _invoke(*args).exit_code == 0
    before = (out / "current.json").read_bytes()
    again = _invoke(*args)
    assert again.exit_code == 1 and (f"{out} already holds this run, trained with the same data and options; "
                                     "pass --overwrite to train it again") in again.output, again.output
    other = _invoke(*base, "--epochs", "2", "--model-opt", "layer.d_model=16")
    assert other.exit_code == 1, other.output
    assert (f"{out} already holds a different run (--epochs 1 there, 2 now; --model-opt layer.d_model=64 there, "
            "16 now); replace it with --overwrite, or choose another --out") in other.output, other.output
    assert (out / "current.json").read_bytes() == before
