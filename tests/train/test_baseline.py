"""The TF-IDF + logistic regression baseline beside train and cv results, and a run's report.txt.

The baseline must learn what is learnable and nothing else (a separable corpus
against shuffled labels), must be scored on exactly the folds ``cv`` scores the
model on, and its paired test must give the textbook numbers.
"""

from __future__ import annotations

import math
import random

import pytest
from click.testing import CliRunner

from tests.support.cli import TINY, write_keyword_csv

pytest.importorskip("sklearn")

from attnkit.cli import cli  # noqa: E402
from attnkit.data.readers import Example  # noqa: E402
from attnkit.data.synthetic import keyword_corpus  # noqa: E402
from attnkit.train.tasks.classify import baseline as bl  # noqa: E402


def _corpus(n: int = 300, seed: int = 3) -> list[Example]:
    return [Example(f"{d.text} doc{i}", d.label) for i, d in enumerate(keyword_corpus(n, seed=seed, length=(8, 12)))]


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 240)


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_baseline_learns_a_separable_corpus_and_not_shuffled_labels() -> None:
    examples = _corpus(400)
    good = bl.baseline_scores(examples[:300], examples[300:])
    assert good["accuracy"] >= 0.95 and good["n"] == 100
    assert sum(map(sum, good["confusion_matrix"])) == 100 and len(good["predictions"]) == 100
    labels = [e.label for e in examples]
    random.Random(0).shuffle(labels)
    shuffled = [Example(e.text, lb) for e, lb in zip(examples, labels, strict=True)]
    chance = bl.baseline_scores(shuffled[:300], shuffled[300:])
    assert abs(chance["accuracy"] - 0.5) < 0.15  # the negative control: nothing to learn


def test_baseline_refuses_an_unknown_test_label() -> None:
    examples = _corpus(40)
    with pytest.raises(ValueError, match="not among the baseline's classes"):
        bl.baseline_scores(examples, [Example("a b", "other")])


def test_fold_baselines_use_the_folds_of_cross_validate(monkeypatch) -> None:
    from attnkit.train.config import TrainConfig
    from attnkit.train.tasks.classify import pipeline

    examples = _corpus(90)
    model_tests: list[list[str]] = []

    def fake_fit(train, val, test, **_kwargs):
        model_tests.append(sorted(e.text for e in test))
        return pipeline.FitResult(None, None, None, {}, [{}], {"accuracy": 0.5, "macro_f1": 0.5})  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "fit_classifier", fake_fit)
    pipeline.cross_validate(examples, folds=4, model_name="document", model_options={},
                            train_config=TrainConfig(seed=7), max_folds=3)
    base_tests: list[list[str]] = []
    real = bl.baseline_scores

    def spy(train, test, **kwargs):
        base_tests.append(sorted(e.text for e in test))
        assert not {e.text for e in train} & {e.text for e in test}
        return real(train, test, **kwargs)

    monkeypatch.setattr(bl, "baseline_scores", spy)
    rows = bl.fold_baselines(examples, folds=4, seed=7, max_folds=3)
    assert [r["fold"] for r in rows] == [1, 2, 3]
    assert base_tests == model_tests and len(model_tests) == 3
    other: list[list[str]] = []
    monkeypatch.setattr(bl, "baseline_scores", lambda tr, te, **kw: other.append(sorted(e.text for e in te))
                        or real(tr, te, **kw))
    bl.fold_baselines(examples, folds=4, seed=8, max_folds=3)
    assert other != model_tests  # another seed, other folds: the comparison above can fail


def test_paired_test_against_hand_computed_numbers() -> None:
    model, base = [0.80, 0.82, 0.78, 0.85], [0.78, 0.80, 0.79, 0.80]
    # differences 0.02, 0.02, -0.01, 0.05: mean 0.02, s = sqrt(0.0018 / 3), se = s / 2
    s = math.sqrt(0.0018 / 3)
    out = bl.paired_test(model, base)
    assert out["n"] == 4 and out["mean_difference"] == pytest.approx(0.02)
    assert out["t"] == pytest.approx(0.02 / (s / 2))  # 1.633
    half = 3.182446305 * s / 2  # t_{0.975, 3} = 3.1824
    assert out["ci_low"] == pytest.approx(0.02 - half, abs=1e-8)
    assert out["ci_high"] == pytest.approx(0.02 + half, abs=1e-8)
    assert out["p_value"] == pytest.approx(0.2010, abs=1e-3)
    assert bl.paired_test([0.8], [0.7])["t"] is None
    same = bl.paired_test([0.8, 0.9], [0.7, 0.8])
    assert same["t"] is None and same["ci_low"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="same, non-zero number of folds"):
        bl.paired_test([0.8], [])


def test_baseline_command_on_train_split_and_on_folds(data_csv) -> None:
    result = _invoke("baseline", "--data", str(data_csv))
    assert result.exit_code == 0, result.output
    assert "on train's test part: accuracy" in result.output and "(n=24)" in result.output
    assert "confusion matrix" in result.output
    folds = _invoke("baseline", "--data", str(data_csv), "--folds", "3", "--max-folds", "2")
    assert folds.exit_code == 0, folds.output
    assert "fold  1/3" in folds.output and "fold  2/3" in folds.output and "fold  3/3" not in folds.output
    assert "mean accuracy over 2 fold(s)" in folds.output


def test_cv_baseline_prints_the_comparison(tmp_path, data_csv) -> None:
    import json

    result = _invoke("cv", "--data", str(data_csv), "--folds", "3", "--max-folds", "2", "--baseline",
                     "--json", str(tmp_path / "cv.json"), *TINY)
    assert result.exit_code == 0, result.output
    assert "fold     model  baseline  difference" in result.output
    assert "mean difference" in result.output and "paired" in result.output
    saved = json.loads((tmp_path / "cv.json").read_text())
    assert [f["fold"] for f in saved["baseline"]["folds"]] == [1, 2]
    assert saved["baseline"]["paired_test"]["n"] == 2


def test_train_baseline_and_report(tmp_path, data_csv) -> None:
    out = tmp_path / "run"
    # An almost untrained model (one epoch at lr 1e-6) gets examples wrong for the report to show.
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), "--baseline", *TINY,
                     "--epochs", "1", "--lr", "1e-6")
    assert result.exit_code == 0, result.output
    for row in ("model", "baseline", "difference"):
        assert any(line.startswith(row) for line in result.output.splitlines()), row
    report = (out / "report.txt").read_text(encoding="utf-8")
    assert "precision" in report and "recall" in report and "support" in report
    assert "confusion matrix" in report and "baseline" in report
    assert "most attended words per class" in report
    wrong = report.split("most confidently wrong test examples")[1]
    assert "1. true " in wrong and "predicted" in wrong and "attended:" in wrong
    # The committed figures are the printed ones: scored once, before training.
    from attnkit.train.runs.checkpoint import committed_dir, read_run_config

    assert (committed_dir(out) / "config.json").is_file()
    stored = read_run_config(out)["metrics"]["baseline"]
    assert set(stored) == {"accuracy", "macro_f1", "weighted_f1", "macro_recall", "per_class", "class_weight",
                           "n", "features", "feature_limit"} and stored["n"] == 24
    row = next(line for line in result.output.splitlines() if line.startswith("baseline "))
    assert row.split()[1:] == [f"{stored['accuracy']:.4f}", f"{stored['macro_f1']:.4f}"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<th>precision</th><th>recall</th><th>F1</th><th>support</th>" in page
    assert "Most confidently wrong test examples" in page and "<td>baseline</td>" in page
    assert not list(out.glob("*.tmp")) and not list(out.glob(".report*"))


def test_train_baseline_is_scored_before_training(tmp_path, data_csv, monkeypatch) -> None:
    from attnkit.train.tasks.classify import pipeline

    def no_training(*_args, **_kwargs):
        raise RuntimeError("training started")

    monkeypatch.setattr(pipeline.Trainer, "fit", no_training)
    monkeypatch.setattr(bl, "baseline_scores", lambda *a, **k: (_ for _ in ()).throw(ValueError("scored")))
    result = CliRunner().invoke(cli, ["train", "--data", str(data_csv), "--out", str(tmp_path / "run"),
                                      "--baseline", *TINY])
    assert result.exit_code != 0 and "scored" in result.output and "training started" not in result.output


def test_html_report_escapes_texts(tmp_path) -> None:
    from attnkit.train.tasks.classify.reports import write_html_report

    evil = "<script>alert(1)</script> & more"
    analysis = {"labels": ["neg", "<b>pos</b>"], "n": 2, "confusion_matrix": [[0, 1], [1, 0]],
                "per_class": [{"label": lb, "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
                              for lb in ("neg", "<b>pos</b>")],
                "most_attended": {"neg": [("<i>", 0.5)], "<b>pos</b>": [("ok", 0.25)]},
                "confidently_wrong": [{"text": evil, "label": "neg", "predicted": "<b>pos</b>", "probability": 0.9,
                                       "attended": [("<script>", 0.6)], "tokens": ["<script>", "alert"],
                                       "weights": [0.6, 0.4]}]}
    test = {"accuracy": 0.0, "macro_f1": 0.0}
    path = write_html_report(tmp_path / "report.html", test, analysis, {"accuracy": 0.5, "macro_f1": 0.5, "n": 2})
    page = path.read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<b>pos" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<td>&lt;b&gt;pos&lt;/b&gt;</td>" in page and "<td>difference</td>" in page
    assert page.count("<script") == 2  # the data block and the page's own script, nothing else
    analysis["confidently_wrong"], analysis["most_attended"] = [], None
    page = write_html_report(tmp_path / "none.html", test, analysis, None).read_text(encoding="utf-8")
    assert "every test example is classified correctly" in page and "no pooling attention" in page


def test_report_written_without_baseline(tmp_path, data_csv) -> None:
    out = tmp_path / "run"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    report = (out / "report.txt").read_text(encoding="utf-8")
    assert "per class" in report and "difference" not in report


def test_baseline_takes_more_than_two_classes() -> None:
    words = {"world": "war vote", "sports": "goal match", "tech": "chip code"}
    rng = random.Random(1)
    examples = [Example(f"{words[c]} filler{rng.randrange(50)} doc{i}", c)
                for i in range(150) for c in [list(words)[i % 3]]]
    scores = bl.baseline_scores(examples[:120], examples[120:])
    assert scores["labels"] == ["sports", "tech", "world"] and scores["accuracy"] >= 0.95
    assert len(scores["confusion_matrix"]) == 3


def test_the_baseline_keeps_the_features_that_fit_the_memory_limit() -> None:
    """Many classes: the most frequent n-grams that fit (BASELINE_BYTES a class and feature); few classes
    on small sets: every n-gram, as before."""
    from attnkit.train.tasks.classify.baseline import BASELINE_BYTES, baseline_features, baseline_scores

    assert baseline_features(50, 4 * 10**9, used=0) == 4 * 10**9 // (BASELINE_BYTES * 50)  # 312,500 of them
    assert baseline_features(50, 4 * 10**9, used=10**9) == 3 * 10**9 // (BASELINE_BYTES * 50)  # the room left
    assert baseline_features(50, 4 * 10**9, used=4 * 10**9) == 1000  # none left: the fewest it keeps
    assert baseline_features(2, 4 * 10**9, used=0) > 5_000_000  # more than IMDB's 1-2-grams
    import attnkit._memory

    with pytest.MonkeyPatch.context() as patch:  # what the process holds now is read when not given
        patch.setattr(attnkit._memory, "resident_bytes", lambda: 2 * 10**9)
        assert baseline_features(50, 4 * 10**9) == 2 * 10**9 // (BASELINE_BYTES * 50)
        train = [Example(f"w{i} w{i + 1} w{i % 7} topic{i % 5}", f"c{i % 5}") for i in range(600)]
        every = baseline_scores(train, train[:20], memory=3 * 10**9)  # 1 GB of room: every n-gram
        few = baseline_scores(train, train[:20], memory=2 * 10**9 + 1000 * BASELINE_BYTES * 5)
    assert every["features"] > 1500
    assert few["features"] == few["feature_limit"] == 1000
    from attnkit.train.tasks.classify.reports import comparison_lines

    said = comparison_lines(few, few)[-1]  # the run log's line names the cut
    assert "the 1,000 most frequent 1-2-grams: as many as fit the memory limit" in said, said
    assert "memory limit" not in comparison_lines(every, every)[-1]
