"""``attnkit train --backend numpy``: learns, never imports torch, saves a run that reloads the same."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.data.readers import Example
from attnkit.data.synthetic import keyword_corpus
from attnkit.reference.models import NUMPY_LAYER
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.numpy.numpy_backend import (
    NumpyTrainSettings,
    evaluate_numpy_run,
    is_numpy_run,
    load_numpy_run,
    metrics,
    predict_numpy_run,
    train_numpy_run,
)

FAST = ["--epochs", "6", "--batch-size", "32", "--lr", "0.005", "--model-opt", "layer.d_model=32",
        "--model-opt", "layer.d_ff=64", "--model-opt", "pooling=attention", "--model-opt", "layer.dropout=0.0"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "keywords.tsv"
    docs = keyword_corpus(480, seed=3, length=(6, 12))
    path.write_text("".join(f"{d.label}\t{d.text}\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def numpy_run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("runs") / "numpy"
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text",
                                      "--backend", "numpy", "--out", str(out), "-q", *FAST])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_cli_training_learns_the_keywords(numpy_run: tuple[Path, str]) -> None:
    out, output = numpy_run
    test_line = next(line for line in output.splitlines() if line.startswith("test: accuracy"))
    assert float(test_line.split()[2]) >= 0.9, output
    folder = committed_dir(out)
    meta = json.loads((folder / "config.json").read_text())
    assert meta["backend"] == "numpy" and meta["model_name"] == "transformer" and meta["status"] == "done"
    assert meta["metrics"]["test"]["accuracy"] >= 0.9
    assert sorted(p.name for p in out.iterdir()) == [".lock", "checkpoints", "current.json"]
    assert sorted(p.name for p in folder.iterdir()) == [".attnkit-generation", "config.json", "labels.json",
                                                         "model.safetensors", "vocab.json"]
    assert is_numpy_run(out) and not is_numpy_run(folder.parent)


def test_cli_training_imports_no_torch(corpus: Path, tmp_path: Path) -> None:
    """Neither training, nor a Ctrl-C in epoch 2 and the resume, nor predicting imports torch."""
    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from attnkit.cli import cli\n"
        "from attnkit.reference.trainer import Trainer\n"
        "step = Trainer.train_step\n"
        "def stop(self, *args):\n"
        "    if self.epoch == 2:\n"
        "        raise KeyboardInterrupt\n"
        "    return step(self, *args)\n"
        "Trainer.train_step = stop\n"
        f"args = ['train', '--data', {str(corpus)!r}, '--format', 'label-tab-text', '--backend', 'numpy',\n"
        f"        '--out', {str(tmp_path / 'run')!r}, '-q', '--epochs', '2', '--model-opt', 'layer.d_model=16']\n"
        "r = CliRunner().invoke(cli, args)\n"
        "assert r.exit_code == 130, r.output\n"
        "Trainer.train_step = step\n"
        f"r = CliRunner().invoke(cli, ['train', '--out', {str(tmp_path / 'run')!r}, '--resume', '-q'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"r = CliRunner().invoke(cli, ['predict', {str(tmp_path / 'run')!r}, 'a b c', '--explain'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules, 'attnkit.data.readers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_run_reloads_and_predicts_the_same(numpy_run: tuple[Path, str], corpus: Path) -> None:
    out, _ = numpy_run
    run = load_numpy_run(out)
    again = load_numpy_run(out)
    texts = [line.split("\t", 1)[1] for line in corpus.read_text().splitlines()[:40]]
    first, second = run.logits(texts)[0], again.logits(texts)[0]
    np.testing.assert_array_equal(first, second)
    result = CliRunner().invoke(cli, ["predict", str(out), *texts[:3], "--json", "--explain", "--top", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    direct = predict_numpy_run(run, texts[:3], top_k=2)
    assert [r["label"] for r in rows] == [d["label"] for d in direct]
    assert [r["probability"] for r in rows] == pytest.approx([d["probability"] for d in direct])
    assert all(len(r["top_tokens"]) == 2 for r in rows)


def test_a_loaded_numpy_run_predicts_as_a_torch_run_does(numpy_run: tuple[Path, str], corpus: Path) -> None:
    """``load_run`` gives a NumPy run's predictions as the Prediction objects of a torch run, and their fields
    are what ``attnkit predict --json`` prints (and ``/v1/predict`` answers), to the last digit."""
    import attnkit
    from attnkit.train.tasks.classify.prediction import Prediction

    out, _ = numpy_run
    texts = [line.split("\t", 1)[1] for line in corpus.read_text().splitlines()[:3]]
    predictor = attnkit.load_run(out)
    predictions = predictor.explain(texts, top=2)
    assert all(isinstance(p, Prediction) and len(p.top_tokens) == 2 for p in predictions)
    result = CliRunner().invoke(cli, ["predict", str(out), *texts, "--json", "--explain", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.splitlines()] == [p.fields() for p in predictions]
    assert predictor.predict(texts) == [p.label for p in predictions]
    assert predictor.predict_proba(texts).argmax(1).tolist() == [predictor.labels.index(p.label) for p in predictions]


def test_evaluate_command_scores_a_numpy_run(numpy_run: tuple[Path, str], corpus: Path) -> None:
    out, _ = numpy_run
    result = CliRunner().invoke(cli, ["evaluate", str(out), "--data", str(corpus), "--format", "label-tab-text",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n"] == 480 and report["accuracy"] >= 0.9
    assert sum(map(sum, report["confusion_matrix"])) == 480


def test_explain_points_at_key_words(numpy_run: tuple[Path, str]) -> None:
    run = load_numpy_run(numpy_run[0])
    docs = keyword_corpus(30, seed=11, length=(6, 12), max_keywords=1)
    preds = predict_numpy_run(run, [d.text for d in docs], top_k=1)
    hits = sum(p["top_tokens"][0][0] == d.text.split()[d.key_positions[0]] for p, d in zip(preds, docs, strict=True))
    # Chance (one word of 6-12) would give about 3 of 30; the encoder layer below the pooling
    # spreads the key word over its neighbours, so the top word is not always the key word itself.
    assert hits >= 12, hits


def test_occupied_out_is_refused(numpy_run: tuple[Path, str], corpus: Path) -> None:
    out, _ = numpy_run
    before = (committed_dir(out) / "model.safetensors").read_bytes(), (out / "current.json").read_bytes()
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text",
                                      "--backend", "numpy", "--out", str(out), "--epochs", "1"])
    assert result.exit_code == 1 and "different run" in result.output
    assert ((committed_dir(out) / "model.safetensors").read_bytes(), (out / "current.json").read_bytes()) == before


def test_unsupported_flags_are_named(corpus: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--backend", "numpy", "--out",
                                      str(tmp_path / "r"), "--init-from", str(tmp_path), "--label-smoothing", "0.1"])
    assert result.exit_code == 1
    assert "does not support --label-smoothing, --init-from;" in result.output
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text", "--backend",
                                      "numpy", "--out", str(tmp_path / "r"), "--model", "han"])
    assert result.exit_code == 1 and "--model of --backend numpy must be one of ['transformer', 'document']" \
        in result.output


@pytest.mark.parametrize("opt, message", [
    ("layer.d_modle=8", "unknown ClassifierConfig field(s) ['layer.d_modle']; valid fields are ['layer.d_model'"),
    ("d_model=8", "unknown numpy transformer model option(s) ['d_model']"),
    ("d_model=8", "did you mean layer.d_model?"),  # the torch backend's hint, for the same flag
    ("layer.d_model=15", "field layer: d_model=15 must be divisible by num_heads=4"),
    ("layer.kv_heads=2", "layer.kv_heads must be None in the NumPy twin"),
    ("layer.activation=swiglu", "layer.activation must be one of ['gelu', 'relu'] in the NumPy twin"),
])
def test_model_options_take_the_layer_paths_of_the_torch_backend(corpus: Path, tmp_path: Path, opt: str,
                                                                 message: str) -> None:
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text", "--backend",
                                      "numpy", "--out", str(tmp_path / "r"), "--model-opt", opt])
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "r").exists()


def test_a_run_saves_its_layer_nested_and_loads_it_back(numpy_run: tuple[Path, str]) -> None:
    out, _ = numpy_run
    saved = json.loads((committed_dir(out) / "config.json").read_text())["model_config"]
    assert saved["layer"] == {**NUMPY_LAYER.to_dict(), "d_model": 32, "d_ff": 64, "dropout": 0.0}
    assert not {"d_model", "num_heads", "d_ff", "dropout"} & set(saved)  # one vocabulary: no flat copies
    config = load_numpy_run(out).model.config  # type: ignore[attr-defined]
    assert config.layer == replace(NUMPY_LAYER, d_model=32, d_ff=64, dropout=0.0)
    assert config.to_dict() == saved


def test_document_kind_and_unknown_labels(tmp_path: Path) -> None:
    docs = keyword_corpus(120, seed=5, length=(5, 8))
    train = [Example(d.text, d.label) for d in docs]
    settings = NumpyTrainSettings(epochs=2, batch_size=16, lr=0.01)
    run, test = train_numpy_run(train[:100], [], train[100:], kind="document",
                                model_options={"layer": {"d_model": 16}},
                                settings=settings, out_dir=tmp_path / "doc")
    assert test is not None and test["n"] == 20
    assert load_numpy_run(tmp_path / "doc").model.config.kind == "document"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown to this model"):
        evaluate_numpy_run(run, [Example("a b", "neutral")])


def test_metrics_against_hand_count() -> None:
    report = metrics(np.array([0, 1, 1, 2, 2, 2]), np.array([0, 1, 2, 2, 2, 0]), 3)
    assert report["confusion_matrix"] == [[1, 0, 1], [0, 1, 0], [0, 1, 2]]
    assert report["accuracy"] == pytest.approx(4 / 6)
    f1 = [2 * 1 * 0.5 / 1.5, 2 * 0.5 * 1 / 1.5, 2 * (2 / 3) * (2 / 3) / (4 / 3)]
    assert report["macro_f1"] == pytest.approx(sum(f1) / 3)


def test_warmup_ratio_trains_with_the_torch_schedule(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "warm"
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text", "--backend",
                                      "numpy", "--out", str(out), "-q", *FAST, "--warmup-ratio", "0.2"])
    assert result.exit_code == 0, result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["settings"]["warmup_ratio"] == 0.2
    test_line = next(line for line in result.output.splitlines() if line.startswith("test: accuracy"))
    assert float(test_line.split()[2]) >= 0.9, result.output


def test_a_numpy_run_opens_in_visualize(numpy_run: tuple[Path, str], tmp_path: Path) -> None:
    from attnkit.cli.visualize import is_attnkit_report, run_attention

    out, _ = numpy_run
    text = "the film was good and the cast was good"
    views = run_attention(out, [text, "x"])
    run = load_numpy_run(out)
    predicted = predict_numpy_run(run, [text])[0]
    first = views[0]
    assert first.tokens == [run.vocab.itos[i] for i in run.encode([text])[0]]
    assert first.layers.shape == (run.model.config.num_layers, run.model.config.layer.num_heads, len(first.tokens),
                                  len(first.tokens))
    np.testing.assert_allclose(first.layers.sum(-1), 1.0, rtol=1e-5)
    assert first.pooling is not None and first.pooling.shape == (len(first.tokens),)
    assert (first.label, first.probability) == (predicted["label"], predicted["probability"])
    for name in ("report.html", "heads.png"):
        result = CliRunner().invoke(cli, ["visualize", str(out), text, "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).stat().st_size > 1000
    assert is_attnkit_report(tmp_path / "report.html")


def test_every_flag_its_help_calls_torch_only_is_refused_by_the_numpy_backend(corpus: Path, tmp_path: Path) -> None:
    """A flag whose help says "Not with --backend numpy" is an error naming it there, never silently dropped."""

    from attnkit.train.tasks.classify.settings import TORCH_ONLY

    train = cli.get_command(click.Context(cli), "train")
    torch_only = [p for p in train.params if getattr(p, "numpy_help", None) == TORCH_ONLY]
    assert {p.name for p in torch_only} >= {"label_smoothing", "pack", "metric", "class_weight", "token_budget",
                                            "tune_thresholds"}
    for param in torch_only:
        kind = param.type
        value = kind.choices[-1] if isinstance(kind, click.Choice) else {
            "float": "0.1", "integer": "1", "integer range": "1", "float range": "0.1"}.get(kind.name, "macro_f1")
        flag = param.opts[0]
        given = [flag] if param.is_flag else [flag, value]  # a switch (--tune-thresholds) takes no value
        result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--format", "label-tab-text",
                                          "--backend", "numpy", "--out", str(tmp_path / "run"), *given])
        assert result.exit_code != 0 and f"does not support {flag}" in result.output, (flag, result.output)
        assert not (tmp_path / "run").exists()


SMALL = ["--format", "label-tab-text", "--backend", "numpy", "-q", "--epochs", "3", "--lr", "0.005",
         "--model-opt", "layer.d_model=16", "--model-opt", "layer.d_ff=32"]  # dropout 0.1: its generator counts


def _stop_in_epoch_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.reference.trainer import Trainer

    step = Trainer.train_step

    def stop(self: Trainer, *args: np.ndarray) -> float:
        if self.epoch == 2:
            raise KeyboardInterrupt
        return step(self, *args)

    monkeypatch.setattr(Trainer, "train_step", stop)


def test_an_interrupted_run_resumes_to_the_weights_of_one_never_stopped(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every epoch is committed with what going on needs (weights, AdamW's moments, the shuffling and dropout
    generators, the history); Ctrl-C in epoch 2 says how to go on, and ``--resume`` ends bit for bit where an
    uninterrupted run does. A changed flag or other data is refused naming it; a finished run is left as it is."""
    import attnkit

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--out", str(whole), *SMALL])
    assert result.exit_code == 0, result.output
    with monkeypatch.context() as patch:
        _stop_in_epoch_2(patch)
        result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--out", str(cut), *SMALL])
    assert result.exit_code == 130 and f"interrupted; continue with: attnkit train --out {cut} --resume" \
        in result.output, result.output
    meta = json.loads((committed_dir(cut) / "config.json").read_text())
    assert (meta["status"], meta["progress"]["epoch"], meta["progress"]["epochs"]) == ("training", 1, 3)
    assert sorted(p.name for p in (committed_dir(cut) / "train_state").iterdir()) == [
        "best.safetensors", "last.safetensors", "optimizer.safetensors", "state.json"]
    assert "epoch 1 of 3" in attnkit.load_run(cut, allow_unfinished=True).config["notice"]
    for flags, said in ((["--lr", "0.01"], "--lr is 0.005 there, given 0.01"),
                        (["--epochs", "4"], "--epochs is 3 there, given 4"),
                        (["--backend", "torch"], "does not take --backend;"),
                        (["--data", str(tmp_path / "other.tsv")], "is not the data run")):
        (tmp_path / "other.tsv").write_text("pos\tgood\nneg\tbad\n", encoding="utf-8")
        result = CliRunner().invoke(cli, ["train", "--out", str(cut), "--resume", *flags])
        assert result.exit_code != 0 and said in result.output, (flags, result.output)
    result = CliRunner().invoke(cli, ["train", "--backend", "numpy", "--out", str(cut), "--resume", "--lr", "0.005"])
    assert result.exit_code == 0, result.output
    done = [json.loads((committed_dir(run) / "config.json").read_text()) for run in (whole, cut)]
    assert done[1]["status"] == "done" and done[0]["history"] == done[1]["history"]
    assert (committed_dir(whole) / "model.safetensors").read_bytes() == \
        (committed_dir(cut) / "model.safetensors").read_bytes()
    before = (cut / "current.json").read_bytes()
    result = CliRunner().invoke(cli, ["train", "--out", str(cut), "--resume"])
    assert result.exit_code == 0 and "finished training already; nothing to resume (it was left as it is)" \
        in result.output and (cut / "current.json").read_bytes() == before


def test_a_damaged_train_state_is_named_and_the_run_left_as_it_was(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cut"
    with monkeypatch.context() as patch:
        _stop_in_epoch_2(patch)
        result = CliRunner().invoke(cli, ["train", "--data", str(corpus), "--out", str(out), *SMALL])
    assert result.exit_code == 130, result.output
    state = committed_dir(out) / "train_state" / "optimizer.safetensors"
    state.unlink()
    state.write_bytes(b"not safetensors")
    before = (out / "current.json").read_bytes()
    result = CliRunner().invoke(cli, ["train", "--out", str(out), "--resume"])
    assert result.exit_code == 1 and str(state) in result.output and "Traceback" not in result.output, result.output
    assert (out / "current.json").read_bytes() == before
