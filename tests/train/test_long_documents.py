"""The default recipe reads documents past --max-len in chunks: learned, counted, saved and loaded."""

from __future__ import annotations

import random
from pathlib import Path

import torch

import attnkit
from attnkit.data.readers import Example
from attnkit.train.config import TrainConfig
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.classify.pipeline import DataSettings, FitResult, fit_classifier

FILLER = [f"w{i}" for i in range(12)]
OPTIONS = {"embed_dim": 16, "attention_dim": 8, "ngram_rows": 64, "dropout": 0.0, "word_dropout": 0.0}


def _late_keyword_documents(n: int, seed: int) -> list[Example]:
    """30 filler words; the one deciding word ("alpha" or "beta") sits at position 20..28, past max_len=8."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(30)]
        label = "a" if i % 2 else "b"
        words[rng.randrange(20, 29)] = "alpha" if label == "a" else "beta"
        out.append(Example(" ".join(words), label))
    return out


def _fit(options: dict[str, object], out: Path | None = None) -> FitResult:
    docs = _late_keyword_documents(220, seed=0)
    return fit_classifier(docs[:160], docs[160:190], docs[190:], model_name="wide",
                          model_options={**OPTIONS, **options}, data=DataSettings(max_len=8),
                          train_config=TrainConfig(epochs=8, lr=0.02, batch_size=16, warmup_ratio=0.0,
                                                   device="cpu", seed=0),
                          out_dir=out, quiet=True)


def _deep_accuracy(result: FitResult) -> float:
    """Accuracy of the network alone (the n-gram half left out) on the test part."""
    assert result.test_data is not None
    own, _ = result.model.each_half(result.test_data.ids)  # type: ignore[operator]
    return float((own.argmax(-1) == torch.tensor(result.test_data.labels)).float().mean())


def test_a_word_past_max_len_is_learned_by_both_halves_and_the_chunked_documents_are_counted(tmp_path: Path) -> None:
    result = _fit({}, tmp_path / "run")
    assert result.test is not None and result.test["accuracy"] == 1.0
    assert _deep_accuracy(result) >= 0.9  # the network itself reads the deciding word in a later chunk
    assert result.test["chunked_documents"] == 30  # every test document is longer than max_len
    cut = _fit({"chunk_len": 0})  # the old reading: cut at max_len, the deciding word never seen
    assert cut.test is not None and cut.test["accuracy"] <= 0.75 and "chunked_documents" not in cut.test

    from attnkit.api import load_run
    from attnkit.train.runs.checkpoint import read_run_config

    saved = read_run_config(tmp_path / "run")
    assert saved["model_config"]["chunk_len"] == 8 and saved["model_config"]["max_chunks"] == 8
    assert saved["metrics"]["chunked_documents"] == {"train": 160, "val": 30, "test": 30}
    run = load_run(tmp_path / "run")
    new = _late_keyword_documents(20, seed=5)
    assert run.predict([e.text for e in new]) == [e.label for e in new]
    scores = run.evaluate([e.text for e in new], [e.label for e in new])
    assert scores["accuracy"] == 1.0 and scores["chunked_documents"] == 20


def test_train_reports_the_chunked_documents_and_evaluate_counts_them(tmp_path: Path) -> None:
    import csv
    import json

    from click.testing import CliRunner

    from attnkit.cli import cli
    from attnkit.train.runs.checkpoint import read_run_config

    data = tmp_path / "long.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for e in [Example(" ".join(FILLER[:3]), "b"), Example(" ".join(FILLER[:4]), "a")] * 10:
            writer.writerow([e.text, e.label])  # 20 short documents ...
        writer.writerows([e.text, e.label] for e in _late_keyword_documents(60, seed=1))  # ... and 60 long ones
    out = tmp_path / "run"
    options = [arg for key, value in OPTIONS.items() for arg in ("--model-opt", f"{key}={value}")]
    trained = CliRunner().invoke(cli, ["train", "--data", str(data), "--out", str(out), "--max-len", "8",
                                       "--epochs", "1", "--batch-size", "16", "--device", "cpu", "-q",
                                       *options])
    assert trained.exit_code == 0, trained.output
    report = (out / "report.txt").read_text(encoding="utf-8")
    saved = read_run_config(out)
    n, chunked = saved["metrics"]["test"]["n"], saved["metrics"]["test"]["chunked_documents"]
    assert 0 < chunked < n and f"read in overlapping chunks: {chunked} of {n}" in report
    assert f"read in overlapping chunks: {chunked} of {n}" in (out / "report.html").read_text(encoding="utf-8")
    generation = committed_dir(out)  # the reports are the run's: committed with it, copied at the root
    for name in ("report.txt", "report.html", "faithfulness.json"):
        assert (out / name).read_bytes() == (generation / name).read_bytes(), name
    train_chunked = saved["metrics"]["chunked_documents"]["train"]
    assert 0 < train_chunked < sum(saved["metrics"]["chunked_documents"].values())
    line = next(x for x in trained.output.splitlines() if x.startswith("long documents:"))
    assert line.startswith(f"long documents: {train_chunked} of ") and "up to 50 tokens each" in line
    assert "a batch of them holds at most 128 tokens" in line  # --batch-size 16 x --max-len 8
    assert "longer than max_len 8" in line and "`" not in line  # quiet: to stderr, the setting named bare
    scored = CliRunner().invoke(cli, ["evaluate", str(out), "--data", str(data), "--json"])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output[scored.output.index("{"):])["chunked_documents"] == 60
    loaded = attnkit.load_run(out)  # the span the run reads, worked out once: what training printed
    assert (loaded.max_len, loaded.read_len) == (8, 50)


def test_packed_rows_must_hold_the_whole_span_a_chunked_model_reads() -> None:
    import pytest

    docs = _late_keyword_documents(40, seed=0)
    with pytest.raises(ValueError, match=r"`pack` 32 .* 50 tokens \(`max_len` 8 read in up to 8 chunks\).*max_chunks"):
        fit_classifier(docs[:30], docs[30:], [], model_name="wide", model_options=OPTIONS,
                       data=DataSettings(max_len=8), train_config=TrainConfig(epochs=1, pack=32, device="cpu"))


def test_a_token_budget_trains_the_whole_epochs_that_fit_it_and_says_so(tmp_path: Path) -> None:
    from attnkit.train.runs.checkpoint import read_run_config

    config = TrainConfig(epochs=8, token_budget=10_000)
    assert [config.epochs_within_budget(n) for n in (4_800, 10_000, 10_001, 1_000, 0)] == [2, 1, 1, 8, 8]
    assert TrainConfig(epochs=8).epochs_within_budget(10**12) == 8  # 0: no budget

    docs = _late_keyword_documents(220, seed=0)
    lines: list[str] = []
    # 160 training documents of 30 tokens: 4,800 tokens an epoch, two of them within 10,000
    result = fit_classifier(docs[:160], docs[160:190], docs[190:], model_name="wide", model_options=OPTIONS,
                            data=DataSettings(max_len=8), out_dir=tmp_path / "run", quiet=True, log=lines.append,
                            train_config=TrainConfig(epochs=8, lr=0.02, batch_size=16, patience=0, device="cpu",
                                                     token_budget=10_000))
    assert len(result.history) == 2
    assert "token budget: 2 epoch(s) of 4,800 training tokens fit `token_budget` 10,000 (`epochs` 8)" in lines
    saved = read_run_config(tmp_path / "run")
    assert saved["train_config"]["epochs"] == 8 and saved["train_config"]["token_budget"] == 10_000  # as given
    assert saved["progress"]["epochs"] == 2 and saved["epochs_run"] == 2


def test_train_plans_within_the_recipes_token_budget_and_the_flag_changes_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from attnkit.cli import cli
    from attnkit.train.runs.checkpoint import read_run_config
    from attnkit.train.tasks.classify.recipe import train_defaults

    data = tmp_path / "docs.tsv"
    data.write_text("label\ttext\n" + "".join(f"{e.label}\t{e.text}\n" for e in _late_keyword_documents(100, 2)),
                    encoding="utf-8")
    options = [arg for key, value in OPTIONS.items() for arg in ("--model-opt", f"{key}={value}")]
    common = ["train", "--data", str(data), "--max-len", "8", "--epochs", "3", "--patience", "0",
              "--device", "cpu", "-q", *options]
    default = CliRunner().invoke(cli, [*common, "--out", str(tmp_path / "default")])
    assert default.exit_code == 0, default.output
    recipe = train_defaults("wide")["token_budget"]
    assert recipe > 0 and read_run_config(tmp_path / "default")["train_config"]["token_budget"] == recipe
    assert "token budget" not in default.output and read_run_config(tmp_path / "default")["epochs_run"] == 3
    small = CliRunner().invoke(cli, [*common, "--out", str(tmp_path / "small"), "--token-budget", "100"])
    assert small.exit_code == 0, small.output
    line = next(x for x in small.output.splitlines() if x.startswith("token budget:"))
    assert line.endswith("training tokens fit token_budget 100 (epochs 3)") and line.startswith("token budget: 1 ")
    saved = read_run_config(tmp_path / "small")
    assert saved["train_config"]["token_budget"] == 100 and saved["epochs_run"] == 1
    refused = CliRunner().invoke(cli, [*common, "--out", str(tmp_path / "bad"), "--token-budget", "-1"])
    assert refused.exit_code == 2 and "--token-budget" in refused.output and not (tmp_path / "bad").exists()
