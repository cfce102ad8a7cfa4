"""The attnkit command: help, train/evaluate/predict/cv, config files, errors, demo."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.train.runs.checkpoint import load_tensors, read_run_config
from attnkit.train.runs.rundir import committed_dir
from tests.support.cli import TINY, write_keyword_csv


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 240)


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_module_entry_point_prints_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    for command in ("demo", "train", "evaluate", "predict", "cv", "bench"):
        assert command in proc.stdout


@pytest.mark.parametrize("command", ["demo", "train", "evaluate", "predict", "cv", "bench"])
def test_every_command_has_help(command: str) -> None:
    result = _invoke(command, "--help")
    assert result.exit_code == 0 and "Usage: attnkit " + command in result.output


def test_train_evaluate_predict_and_refuse_overwrite(tmp_path, data_csv) -> None:
    out = tmp_path / "run"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    assert "test: accuracy" in result.output
    for name in ("model.safetensors", "config.json", "tokenizer.json", "labels.json", "history.jsonl"):
        assert (committed_dir(out) / name).is_file(), name
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["status"] == "done" and meta["model_config"]["layer"]["d_model"] == 16
    assert len((committed_dir(out) / "history.jsonl").read_text().splitlines()) == meta["epochs_run"]

    result = _invoke("evaluate", str(out), "--data", str(data_csv), "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)
    assert metrics["n"] == 240 and sum(map(sum, metrics["confusion_matrix"])) == 240

    result = _invoke("predict", str(out), "an excellent and wonderful film", "--explain", "--top", "2")
    assert result.exit_code == 0, result.output
    first, second, third = result.output.splitlines()[:3]
    assert first.split("\t")[0] in ("positive", "negative")
    assert second.strip().startswith("moved (")  # the explanation chosen on the validation part leads
    assert third.strip().startswith("attended:") and third.count("(") == 2

    before = (committed_dir(out) / "model.safetensors").read_bytes()
    again = CliRunner().invoke(cli, ["train", "--data", str(data_csv), "--out", str(out), *TINY])
    assert again.exit_code == 1
    assert "already holds this run, trained with the same data and options" in again.output
    assert "Traceback" not in again.output and "; pass --overwrite to train it again" in again.output
    assert (committed_dir(out) / "model.safetensors").read_bytes() == before
    replaced = _invoke("train", "--data", str(data_csv), "--out", str(out), "--overwrite", *TINY)
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((committed_dir(out) / "config.json").read_text())["run_id"] != meta["run_id"]


def test_predict_explains_both_halves_of_the_default_model(tmp_path, data_csv) -> None:
    out = tmp_path / "wide"
    assert _invoke("train", "--data", str(data_csv), "--out", str(out), "--epochs", "2", "-q").exit_code == 0
    result = _invoke("predict", str(out), "an excellent and wonderful film", "--explain", "--top", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].strip().startswith("moved (") and lines[2].strip().startswith("attended:")
    assert lines[3].strip().startswith("margin from the network") and lines[3].count("(+") + lines[3].count("(-") == 2
    row = json.loads(_invoke("predict", str(out), "an excellent and wonderful film", "--explain", "--json").output)
    assert set(row["halves"]) == {"network", "ngrams"} and len(row["top_ngrams"]) == 5
    plain = json.loads(_invoke("predict", str(out), "an excellent film", "--json").output)
    assert "halves" not in plain  # only when asked to explain
    report = (out / "report.txt").read_text(encoding="utf-8").split("n-grams weighed most toward each class")[1]
    rows = [line for line in report.splitlines()[1:3]]
    assert [r.split(":")[0].strip() for r in rows] == ["negative", "positive"]
    assert all(r.count("'") == 16 for r in rows)  # 8 quoted n-grams per class
    assert "N-grams weighed most toward each class" in (out / "report.html").read_text(encoding="utf-8")


def test_config_file_sets_defaults_and_flags_override(tmp_path, data_csv) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("epochs: 1\nbatch-size: 8\nmodel: document\nmodel_options:\n  layer:\n    d_model: 8\n"
                      "    num_heads: 2\n  num_layers: 0\n")
    out = tmp_path / "run"
    result = _invoke("train", "--config", str(config), "--data", str(data_csv), "--out", str(out),
                     "--batch-size", "32", "--device", "cpu", "--quiet")
    assert result.exit_code == 0, result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["train_config"]["epochs"] == 1 and meta["train_config"]["batch_size"] == 32
    assert meta["model_name"] == "document" and meta["model_config"]["layer"]["d_model"] == 8


def test_unknown_config_key_is_a_clear_error(tmp_path, data_csv) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("epochs = 1\nlearning_rate = 0.1\n")
    result = CliRunner().invoke(cli, ["train", "--config", str(config), "--data", str(data_csv),
                                      "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "unknown key(s) ['learning_rate']" in result.output and "'batch-size'" in result.output
    assert "'val-ratio'" in result.output and "'format'" in result.output and "data_format" not in result.output
    assert not (tmp_path / "x").exists()


def test_config_keys_are_the_long_option_names(tmp_path) -> None:
    """``format`` and ``val-ratio`` (as docs/cli.md says) reach --format and --val-ratio of train."""
    rows = [("pos", "good fine great"), ("neg", "bad awful poor")] * 20
    data = tmp_path / "reviews.txt"  # a name that guesses no format: only the config's ``format`` reads it
    data.write_text("text,label\n" + "".join(f"{text},{label}\n" for label, text in rows), encoding="utf-8")
    config = tmp_path / "run.toml"
    config.write_text(f'data = "{data.as_posix()}"\nformat = "csv"\nval-ratio = 0.2\ntest_ratio = 0.25\n'
                      'model = "document"\nepochs = 1\n[model_options]\nlayer.d_model = 8\nlayer.num_heads = 2\n'
                      "num_layers = 0\n")
    out = tmp_path / "run"
    result = _invoke("train", "--config", str(config), "--out", str(out), "--device", "cpu", "--quiet")
    assert result.exit_code == 0, result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["data"]["val_ratio"] == 0.2 and meta["data"]["test_ratio"] == 0.25, meta["data"]
    assert meta["data"]["data_format"] == "csv", meta["data"]


@pytest.mark.parametrize("text, message", [
    ('format = "csv"\ndata_format = "tsv"\n', "sets 'data_format' twice, as 'format' and 'data_format'"),
    ('val = "x.csv"\nval-path = "y.csv"\n', "sets 'val_path' twice, as 'val' and 'val_path'"),
])
def test_a_config_key_given_twice_is_refused(tmp_path, data_csv, text, message) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = CliRunner().invoke(cli, ["train", "--config", str(config), "--data", str(data_csv),
                                      "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_config_takes_internal_names_too_and_json_for_evaluate(tmp_path) -> None:
    from attnkit.cli import command
    from attnkit.cli.options import config_keys

    evaluate, predict = command("evaluate"), command("predict")

    assert config_keys(evaluate)["json"] == "as_json" and config_keys(evaluate)["as_json"] == "as_json"
    assert config_keys(evaluate)["format"] == config_keys(evaluate)["data_format"] == "data_format"
    assert config_keys(predict)["file"] == "text_file"
    train_keys = config_keys(cli.get_command(click.Context(cli), "train"))
    assert train_keys["val"] == "val_path" and train_keys["test"] == "test_path" and "model_options" in train_keys
    assert "model_opt" not in train_keys and "config" not in train_keys


@pytest.mark.parametrize("args, message", [
    (["--model", "transformer"], "--model must be one of ['bert', 'document', 'han', 'sentiment', 'wide'], got 't"),
    (["--model-opt", "depth=3"], "unknown document model option(s) ['depth']"),
    (["--lr", "-1"], "Invalid value for '--lr': -1.0 is not in the range x>0."),
    (["--warmup-ratio", "1"], "Invalid value for '--warmup-ratio': 1.0 is not in the range 0<=x<1."),
])
def test_bad_values_give_one_line_errors(tmp_path, data_csv, args, message) -> None:
    base = ["train", "--data", str(data_csv), "--out", str(tmp_path / "x"), "--model", "document",
            "--quiet", "--device", "cpu"]
    result = CliRunner().invoke(cli, base + args)
    # a range the settings field declares is the flag's own (usage error, 2); the rest the library's (1)
    assert result.exit_code == (2 if "Invalid value" in message else 1) and message in result.output, result.output
    assert "Traceback" not in result.output


def test_malformed_data_names_the_file(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("words,label\nhello,pos\n")
    result = CliRunner().invoke(cli, ["train", "--data", str(bad), "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "bad.csv" in result.output and "Traceback" not in result.output


def _budget_of_epochs(data_csv, tmp_path, epochs: int) -> list[str]:
    """Flags whose token budget allows ``epochs`` of 6 epochs on ``data_csv`` (read off a one-epoch run's line)."""
    probe = _invoke("train", "--data", str(data_csv), "--out", str(tmp_path / "probe"), *TINY, "--epochs", "6",
                    "--token-budget", "1")
    per_epoch = int(probe.output.split("1 epoch(s) of ")[1].split(" training tokens")[0].replace(",", ""))
    return ["--epochs", "6", "--token-budget", str(epochs * per_epoch)]


@pytest.mark.parametrize("budgeted", [False, True], ids=["epochs", "token-budget"])
def test_interrupted_cli_run_resumes_to_identical_weights(tmp_path, data_csv, monkeypatch, budgeted) -> None:
    """Also under a token budget that lowers the epochs: the resumed run plans the same 3 of its 6."""
    budget = _budget_of_epochs(data_csv, tmp_path, 3) if budgeted else []
    straight = tmp_path / "straight"
    assert _invoke("train", "--data", str(data_csv), "--out", str(straight), *TINY, *budget).exit_code == 0
    assert read_run_config(straight)["epochs_run"] == 3

    from attnkit.train.loop.trainer import Trainer

    original = Trainer._train_epoch

    def interrupt_in_epoch_two(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt
        return original(self, epoch)

    run = tmp_path / "run"
    monkeypatch.setattr(Trainer, "_train_epoch", interrupt_in_epoch_two)
    stopped = CliRunner().invoke(cli, ["train", "--data", str(data_csv), "--out", str(run), *TINY, *budget])
    assert stopped.exit_code == 130 and "--resume" in stopped.output
    monkeypatch.setattr(Trainer, "_train_epoch", original)
    resumed = _invoke("train", "--out", str(run), "--resume", "--quiet")
    assert resumed.exit_code == 0, resumed.output
    a = load_tensors(committed_dir(straight) / "model.safetensors")
    b = load_tensors(committed_dir(run) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cv_prints_per_fold_and_mean(tmp_path, data_csv) -> None:
    result = _invoke("cv", "--data", str(data_csv), "--folds", "3", "--max-folds", "2",
                     "--json", str(tmp_path / "cv.json"), *TINY)
    assert result.exit_code == 0, result.output
    assert "fold  1/3" in result.output and "fold  2/3" in result.output
    assert "mean accuracy over 2 fold(s)" in result.output
    saved = json.loads((tmp_path / "cv.json").read_text())
    assert len(saved["results"]) == 2


def test_demo_quick_learns_and_writes_report(tmp_path) -> None:
    out = tmp_path / "demo"
    result = _invoke("demo", "--out", str(out), "--quick", "--quiet")
    assert result.exit_code == 0, result.output
    acc = float(result.output.split("test accuracy")[1].split()[0])
    focus = float(result.output.split("attention focus")[1].split()[0])
    assert acc >= 0.9 and focus >= 0.4  # chance focus is about 2/30
    base = float(result.output.split("on the same split:")[1].split(")")[0])
    assert 0.5 <= base <= 1.0  # the baseline beside the result, scored on the same test part
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["metrics"]["baseline"]["accuracy"] == pytest.approx(base, abs=1e-4)
    report = (out / "report.txt").read_text()
    assert "class positive" in report and "class negative" in report
    assert report.startswith("attnkit demo: words that moved the decision most per class")
    assert report.index("exact contributions") < report.index("raw attention: most attended words")
    from attnkit.data.synthetic import class_keywords

    keys = class_keywords(2)
    for label in ("positive", "negative"):  # the demo's words are the planted key words of the class
        shown = result.output.split(f"words that moved the decision most ({label}): ")[1].split("\n")[0]
        assert shown.split(", ")[0] in keys[label], shown
    assert result.output.index("words that moved the decision most") < result.output.index("raw attention")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "[document]" in html and "Content-Security-Policy" in html
    assert (out / "explanation.png").read_bytes()[:4] == b"\x89PNG"


def test_train_task_routes_to_the_translation_and_caption_trainers() -> None:
    listed = _invoke("--help").output
    assert "translate" in listed and "caption" in listed
    for task, words in (("translate", "translation"), ("caption", "captioner")):
        result = _invoke("train", "--task", task, "--help")
        assert result.exit_code == 0 and words in result.output, result.output
        assert "--text-field" not in result.output  # not the classifier's options
    assert "--text-field" in _invoke("train", "--task", "classify", "--help").output


def test_every_train_command_reads_its_task_back() -> None:
    from tests.support.cli import train_caption

    routed = _invoke("train", "--task", "caption", "--help")
    assert routed.exit_code == 0 and "--images" in routed.output and "[default: caption]" in routed.output
    wrong = CliRunner().invoke(train_caption, ["--task", "translate", "--out", "x"])
    assert wrong.exit_code == 2 and "trains the 'caption' task, not 'translate'" in wrong.output


def test_the_default_recipe_is_the_wide_model_with_its_training_settings(tmp_path, data_csv) -> None:
    out = tmp_path / "default"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), "--epochs", "2", "--device", "cpu",
                     "--quiet", "--model-opt", "ngram_rows=512", "--model-opt", "embed_dim=8")
    assert result.exit_code == 0, result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["model_name"] == "wide"
    assert meta["train_config"]["lr"] == 5e-3 and meta["train_config"]["batch_size"] == 64  # the recipe's
    assert meta["data_settings"]["max_len"] == 1024 and meta["data_settings"]["vocab_size"] == 100_000
    assert meta["model_config"]["bigrams"] == "exact"  # written out: a later default cannot change this run
    # the naive Bayes table was counted from the training part and saved with the weights
    wide = load_tensors(committed_dir(out) / "model.safetensors")["wide"]
    assert wide.shape[1] == 2 and wide.abs().sum() > 0
    predicted = _invoke("evaluate", str(out), "--data", str(data_csv), "--json")
    assert json.loads(predicted.output)["accuracy"] > 0.9  # the keyword corpus: the key words decide
    # a flag still overrides the recipe; another model keeps TrainConfig's defaults
    other = _invoke("train", "--data", str(data_csv), "--out", str(tmp_path / "lr"), "--epochs", "1", "--lr", "0.02",
                    "--max-len", "64", "--device", "cpu", "--quiet", "--model-opt", "ngram_rows=512",
                    "--model-opt", "embed_dim=8")
    overridden = json.loads((committed_dir(tmp_path / "lr") / "config.json").read_text())
    assert overridden["train_config"]["lr"] == 0.02
    assert other.exit_code == 0
    assert overridden["data_settings"]["max_len"] == 64 and overridden["data_settings"]["vocab_size"] == 100_000
    plain = _invoke("train", "--data", str(data_csv), "--out", str(tmp_path / "doc"), "--model", "document",
                    "--model-opt", "layer.d_model=8", "--model-opt", "num_layers=0", "--epochs", "1", "--device", "cpu",
                    "--quiet")
    assert plain.exit_code == 0, plain.output
    doc = json.loads((committed_dir(tmp_path / "doc") / "config.json").read_text())
    assert doc["train_config"]["batch_size"] == 32 and doc["data_settings"]["max_len"] == 256


def test_train_routes_by_the_task_click_parses_not_by_the_first_word_spelt_task(tmp_path) -> None:
    """``--src --task`` gives --src the value "--task": the task is the one --task names after it."""
    routed = CliRunner().invoke(cli, ["train", "--src", "--task", "--task", "translate", "--help"])
    assert routed.exit_code == 0 and "Train a Transformer translation model" in routed.output, routed.output
    routed = CliRunner().invoke(cli, ["train", "--images", str(tmp_path), "--task=caption", "--help"])
    assert routed.exit_code == 0 and "Train an attention image captioner" in routed.output, routed.output
    plain = CliRunner().invoke(cli, ["train", "--model-opt", "task=caption", "--help"])
    assert plain.exit_code == 0 and "Train a text classifier" in plain.output, plain.output


def test_a_resume_reads_the_data_as_the_run_did(tmp_path, data_csv, monkeypatch) -> None:
    """A run trained with reader flags (delimiter, columns) resumes without them: the run's data record keeps
    them, and the resumed run reads its files with them to the weights of a run never stopped."""
    import csv

    rows = list(csv.DictReader(data_csv.open(encoding="utf-8")))
    semi = tmp_path / "reviews.txt"
    semi.write_text("y;body\n" + "".join(f"{r['label']};{r['text']}\n" for r in rows), encoding="utf-8")
    reader = ["--format", "csv", "--delimiter", ";", "--text-field", "body", "--label-field", "y"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert _invoke("train", "--data", str(semi), "--out", str(straight), *reader, *TINY).exit_code == 0
    from attnkit.train.loop.trainer import Trainer

    original = Trainer._train_epoch

    def interrupt_in_epoch_two(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt
        return original(self, epoch)

    monkeypatch.setattr(Trainer, "_train_epoch", interrupt_in_epoch_two)
    stopped = CliRunner().invoke(cli, ["train", "--data", str(semi), "--out", str(run), *reader, *TINY])
    assert stopped.exit_code == 130, stopped.output
    monkeypatch.setattr(Trainer, "_train_epoch", original)
    resumed = CliRunner().invoke(cli, ["train", "--out", str(run), "--resume", "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    a = load_tensors(committed_dir(straight) / "model.safetensors")
    b = load_tensors(committed_dir(run) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
