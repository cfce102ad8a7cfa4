"""A new user's first day: a run used from Python, commands that can be re-run, progress off a
terminal, and the hint each common data mistake gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import attnkit
from attnkit.cli import cli
from attnkit.train.runs.rundir import RunFileError, committed_dir
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import recorded


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("first_day")
    data = write_keyword_csv(folder / "reviews.csv", 200)
    out = folder / "run"
    result = _invoke("train", "--data", str(data), *TINY, "--max-len", "7", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


TEXTS = ["a wonderful film with the best cast", "dull and boring , the worst", "x"]


# --- the run from Python ---------------------------------------------------------------------------


def test_load_run_predicts_what_the_cli_prints(trained: Path) -> None:
    run = attnkit.load_run(trained)
    assert run.max_len == 7  # the run's own --max-len, from its config
    assert set(run.labels) == {"positive", "negative"}
    printed = _invoke("predict", str(trained), *TEXTS, "--json").output.splitlines()
    cli_rows = [json.loads(line) for line in printed]
    assert run.predict(TEXTS) == [r["label"] for r in cli_rows]
    proba = run.predict_proba(TEXTS)
    assert proba.shape == (3, 2)
    expected = np.array([[r["probabilities"][lb] for lb in run.labels] for r in cli_rows])
    np.testing.assert_array_equal(proba, expected)  # to the last digit
    assert np.allclose(proba.sum(1), 1.0)
    explained = run.explain(TEXTS[:1], top=2)
    assert len(explained[0].top_tokens) == 2


def test_save_pretrained_writes_a_run_the_cli_reads(trained: Path, tmp_path: Path) -> None:
    run = attnkit.Predictor.from_pretrained(trained)
    saved = run.save_pretrained(tmp_path / "copy")
    again = attnkit.load_run(saved)
    np.testing.assert_array_equal(again.predict_proba(TEXTS), run.predict_proba(TEXTS))
    assert again.config["data_settings"] == run.config["data_settings"]
    result = _invoke("predict", str(saved), TEXTS[0])
    assert result.exit_code == 0 and result.output.split("\t")[0] == run.predict(TEXTS[:1])[0]
    # a second save into the same folder replaces nothing without overwrite
    with pytest.raises(FileExistsError, match="replace it with overwrite"):
        run.save_pretrained(saved)
    run.save_pretrained(saved, overwrite=True)


def test_load_run_keeps_the_loader_checks(trained: Path, tmp_path: Path) -> None:
    copy = attnkit.load_run(trained).save_pretrained(tmp_path / "unfinished")
    config_path = committed_dir(copy) / "config.json"
    config = json.loads(config_path.read_text())
    config["status"], config["progress"] = "training", {"epoch": 1, "epochs": 3}
    config_path.write_text(json.dumps(config))
    recorded(config_path)
    with pytest.raises(ValueError, match="did not finish training.*pass `allow_unfinished` to use"):
        attnkit.load_run(copy)
    served = attnkit.load_run(copy, allow_unfinished=True)
    assert served.notice is not None and "unfinished" in served.notice
    with pytest.raises(RunFileError, match="not an attnkit run directory"):
        attnkit.load_run(tmp_path)
    with pytest.raises(TypeError, match="single str"):
        served.predict("one text")  # type: ignore[arg-type]


def test_evaluate_matches_the_cli(trained: Path, tmp_path: Path) -> None:
    run = attnkit.load_run(trained)
    data = write_keyword_csv(tmp_path / "eval.csv", 30)
    import csv

    rows = list(csv.DictReader(data.open(encoding="utf-8")))
    metrics = run.evaluate([r["text"] for r in rows], [r["label"] for r in rows])
    cli_metrics = json.loads(_invoke("evaluate", str(trained), "--data", str(data), "--json").output)
    assert metrics["accuracy"] == cli_metrics["accuracy"] and metrics["n"] == 30


# --- commands that can be re-run ---------------------------------------------------------------------


def test_a_second_demo_replaces_its_own_run_but_never_a_users(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    first = CliRunner().invoke(cli, ["demo", "--out", str(out), "--quick"], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    manifest = json.loads((out / "current.json").read_text())
    second = CliRunner().invoke(cli, ["demo", "--out", str(out), "--quick"], catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert f"replacing the earlier demo run in {out}" in second.output
    assert json.loads((out / "current.json").read_text())["run_id"] != manifest["run_id"]
    kept = [int(p.name) for p in (out / "checkpoints").iterdir()]
    assert min(kept) > manifest["generation"]  # none of the earlier run's generations is left
    users = attnkit.load_run(trained).save_pretrained(tmp_path / "mine")
    refused = _invoke("demo", "--out", str(users), "--quick", "--quiet")
    assert refused.exit_code == 1 and "already holds a different run" in refused.output
    assert "--overwrite" in refused.output and "--resume" not in refused.output
    assert attnkit.load_run(users).labels == attnkit.load_run(trained).labels  # untouched


def test_visualize_replaces_its_own_report_but_not_a_foreign_file(trained: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    for _ in range(2):
        result = _invoke("visualize", str(trained), "a wonderful film", "-o", str(report))
        assert result.exit_code == 0, result.output
    foreign = tmp_path / "notes.html"
    foreign.write_text("<!DOCTYPE html><html><head><title>mine</title></head></html>")
    result = _invoke("visualize", str(trained), "a wonderful film", "-o", str(foreign))
    assert result.exit_code == 1 and "is not a report attnkit wrote; pass --overwrite" in result.output
    assert "mine" in foreign.read_text()


# --- progress off a terminal -------------------------------------------------------------------------


def test_plain_progress_prints_a_line_per_interval() -> None:
    import io

    from attnkit._progress import PlainProgress

    now = [0.0]
    out = io.StringIO()
    bar = PlainProgress(10, "epoch 1/3", interval=30.0, unit="steps", stream=out, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 7.0  # a step every 7 s: a line at 35 s (past 30 s), the next due at 70 s is the close's
        bar.set_postfix(loss="0.5000")
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines == ["epoch 1/3: 50% (5/10 steps), loss=0.5000, 35s elapsed",
                     "epoch 1/3: 100% (10/10 steps), loss=0.5000, 1m10s elapsed"]
    quick = io.StringIO()
    short = PlainProgress(3, "x", interval=30.0, stream=quick)
    short.update(3)
    short.close()
    assert quick.getvalue() == ""  # short work prints nothing


def test_training_off_a_terminal_prints_progress_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNKIT_PROGRESS_SECONDS", "0")
    data = write_keyword_csv(tmp_path / "d.csv", 120)
    args = [a for a in TINY if a != "--quiet"]
    result = CliRunner().invoke(cli, ["train", "--data", str(data), *args, "--out", str(tmp_path / "run")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "epoch 1/3: 100% (" in result.stderr and "steps), loss=" in result.stderr
    evaluated = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run"), "--data", str(data)])
    assert evaluated.exit_code == 0  # one batch: nothing to report
    monkeypatch.setenv("ATTNKIT_PROGRESS_SECONDS", "soon")
    bad = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run"), "--data", str(data)])
    assert bad.exit_code == 1 and "ATTNKIT_PROGRESS_SECONDS must be a number of seconds or 'off'" in bad.output


# --- the right hint for each common data mistake ------------------------------------------------------


def _rows(n: int = 12) -> list[tuple[str, str]]:
    return [(f"a wonderful film number {i}" if i % 2 else f"a dull film number {i}", "positive" if i % 2 else
             "negative") for i in range(n)]


def test_a_utf16_file_gets_the_utf16_hint(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "reviews.csv"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in _rows()), encoding="utf-16")
    for extra in ([], ["--encoding", "latin-1"]):  # latin-1 would read it as nonsense, not fail
        result = _invoke("evaluate", str(trained), "--data", str(data), *extra)
        assert result.exit_code == 1
        assert "is UTF-16 text (it starts with a UTF-16 byte-order mark)" in result.output
        assert "pass --encoding utf-16" in result.output and "latin-1 (" not in result.output
    assert _invoke("evaluate", str(trained), "--data", str(data), "--encoding", "utf-16").exit_code == 0
    texts = tmp_path / "texts.txt"
    texts.write_text("a wonderful film\n", encoding="utf-16-le")  # no byte-order mark
    result = _invoke("predict", str(trained), "--file", str(texts))
    assert result.exit_code == 1 and "is UTF-16-LE text" in result.output
    assert "pass --encoding utf-16-le" in result.output


def test_a_semicolon_csv_gets_the_delimiter_hint_and_reads_with_it(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "reviews.csv"
    data.write_text("text;label\n" + "".join(f"{t};{y}\n" for t, y in _rows()), encoding="utf-8")
    result = _invoke("evaluate", str(trained), "--data", str(data))
    assert result.exit_code == 1
    assert "the header ['text;label'] is one column: the file is separated by ';', not ','" in result.output
    assert "pass --delimiter ';'" in result.output
    ok = _invoke("evaluate", str(trained), "--data", str(data), "--delimiter", ";", "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["n"] == 12
    bad = _invoke("evaluate", str(trained), "--data", str(data), "--delimiter", ";;")
    assert bad.exit_code == 2 and "--delimiter" in bad.output and "one character" in bad.output


def test_a_txt_holding_csv_gets_the_format_hint(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "reviews.txt"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in _rows()), encoding="utf-8")
    result = _invoke("evaluate", str(trained), "--data", str(data))
    assert result.exit_code == 1
    assert "'text,label' is a header of columns separated by ','" in result.output
    assert "pass --format csv (format='csv' in Python)" in result.output and "empty text" not in result.output
    assert _invoke("evaluate", str(trained), "--data", str(data), "--format", "csv").exit_code == 0


def test_predict_file_reads_the_text_column_of_a_csv(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "reviews.csv"
    data.write_text("label,text\n" + "".join(f"{y},{t}\n" for t, y in _rows(4)), encoding="utf-8")
    result = _invoke("predict", str(trained), "--file", str(data), "--json")
    assert result.exit_code == 0, result.output
    texts = [json.loads(line)["text"] for line in result.stdout.splitlines()]
    assert texts == [t for t, _ in _rows(4)]  # no header, no label column
    assert f"note: classifying the 'text' column of {data} (4 texts)" in result.stderr
    wrong = _invoke("predict", str(trained), "--file", str(data), "--text-field", "review")
    assert wrong.exit_code == 1 and "text_field='review' is not a column; the header has ['label', 'text']" \
        in wrong.output and "--text-field NAME" in wrong.output
    plain = tmp_path / "reviews.txt"
    plain.write_text("text,label\na wonderful film,positive\n", encoding="utf-8")
    result = _invoke("predict", str(trained), "--file", str(plain))
    assert result.exit_code == 0
    assert "warning: the first line of" in result.stderr and "looks like a header of columns" in result.stderr


def test_too_little_data_for_the_split_is_an_error_that_says_how_much(tmp_path: Path) -> None:
    data = tmp_path / "two.csv"
    data.write_text("text,label\na wonderful film,positive\na dull film,negative\n", encoding="utf-8")
    result = _invoke("train", "--data", str(data), *TINY, "--out", str(tmp_path / "run"))
    assert result.exit_code == 1
    assert (f"{data} holds 2 examples, the largest class 1: --val-ratio 0.1 holds out none of them for validation "
            "(a class needs at least 6 examples for one); add data, give a --val FILE, or pass --val-ratio 0"
            in result.output)
    assert not (tmp_path / "run").exists()
    result = _invoke("train", "--data", str(data), *TINY, "--val-ratio", "0.6", "--out", str(tmp_path / "run"))
    assert "--test-ratio 0.1 holds out none of them for test" in result.output


def test_resume_refuses_a_changed_setting_by_name_with_both_values(trained: Path) -> None:
    result = _invoke("train", "--out", str(trained), "--resume", "--epochs", "20", "--lr", "0.1")
    assert result.exit_code == 2
    assert (f"--resume continues {trained} with its saved settings: --epochs is 3 there, given 20; --lr is 0.01 "
            "there, given 0.1; leave them out (or give the saved value) to resume" in " ".join(result.output.split()))
    other = _invoke("train", "--out", str(trained), "--resume", "--model", "sentiment")
    assert other.exit_code == 2 and "does not take --model" in other.output  # not a setting it compares: refused
    done = _invoke("train", "--out", str(trained), "--resume", "--quiet", "--epochs", "3", "--lr", "0.01")
    assert done.exit_code == 0 and "finished training already" in done.output  # the saved values are accepted
    # the data settings are leaves of the same tree (ClassifyData): the saved ones accepted, another refused
    ratio = _invoke("train", "--out", str(trained), "--resume", "--val-ratio", "0.3", "--text-field", "body")
    assert ratio.exit_code == 2 and ("--val-ratio is 0.1 there, given 0.3; --text-field is none there, given body"
                                     in " ".join(ratio.output.split()))
    same = _invoke("train", "--out", str(trained), "--resume", "--quiet", "--val-ratio", "0.1", "--test-ratio", "0.1")
    assert same.exit_code == 0 and "finished training already" in same.output


def test_translation_warns_when_the_warm_up_outlasts_the_run(tmp_path: Path) -> None:
    from attnkit.train.tasks.translate.translation import warmup_notice
    from tests.support.cli import train_translate

    sources = ["ein kleines haus"] * 300
    targets = ["a small house"] * 300
    assert warmup_notice(sources, targets, 4096, 10, 1000) == (
        "warning: --warmup-steps 1000 is more than half of this run's about 10 steps (10 epochs of about 1 on 300 "
        "pairs): the learning rate would still be rising when training ends; pass --warmup-steps 1 (a tenth of "
        "the steps), more --epochs, or a smaller --max-tokens")
    assert warmup_notice(sources, targets, 40, 10, 100) is None  # 30 steps an epoch, 300 in all
    (tmp_path / "a.de").write_text("\n".join(sources[:40]) + "\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("\n".join(targets[:40]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(train_translate, [
        "--src", str(tmp_path / "a.de"), "--tgt", str(tmp_path / "a.en"), "--out", str(tmp_path / "run"),
        "--vocab-size", "30", "--d-model", "16", "--num-heads", "2", "--d-ff", "16", "--encoder-layers", "1",
        "--decoder-layers", "1", "--epochs", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning: --warmup-steps 1000 is more than half of this run's about 1 steps" in result.stderr


def test_predict_into_a_closed_pipe_ends_quietly(trained: Path, tmp_path: Path) -> None:
    """``attnkit predict RUN --file big.txt | head -1``: the reader goes away, attnkit says nothing."""
    import os
    import subprocess
    import sys

    texts = tmp_path / "many.txt"
    texts.write_text("a wonderful film with the best cast\n" * 20000, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "predict", str(trained), "--file", str(texts)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does after its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) in (0, 1, 141)
    assert first.startswith(b"positive") or first.startswith(b"negative")
    assert "Broken pipe" not in stderr and "Error" not in stderr and "Traceback" not in stderr, stderr


def test_a_run_killed_before_its_first_commit_is_named_as_such(tmp_path: Path) -> None:
    """A writer that died in its first epoch leaves only its lock: the run is not 'not an attnkit run'."""
    import os
    import subprocess
    import sys

    out = tmp_path / "killed"
    code = ("import os, sys\nfrom attnkit.train.runs.run import start_run\n"
            "start_run(sys.argv[1]).__enter__()\nos._exit(9)")  # the lock taken, then killed before a commit
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    assert subprocess.run([sys.executable, "-c", code, str(out)], env=env, timeout=120).returncode == 9
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    result = _invoke("predict", str(out), "a text")
    assert result.exit_code == 1
    assert (f"{out} holds no committed checkpoint: its training was interrupted before the first epoch "
            "ended; start its training again with overwrite") in result.output
