"""Training for a chosen measure: --metric, class weights, tuned class offsets, and the reports that show them."""

from __future__ import annotations

import csv
import json
import random

import pytest
import torch
from click.testing import CliRunner

from tests.support.bert import install_fake_pretrained, write_tiny_bert
from tests.support.cli import TINY
from tests.support.runs import FullDisk

pytest.importorskip("sklearn")

from attnkit.cli import cli  # noqa: E402
from attnkit.data.readers import Example  # noqa: E402
from attnkit.data.synthetic import keyword_corpus  # noqa: E402
from attnkit.train import metrics as M  # noqa: E402
from attnkit.train.config import TrainConfig  # noqa: E402
from attnkit.train.runs import fileops  # noqa: E402
from attnkit.train.runs.checkpoint import committed_dir, read_run_config  # noqa: E402
from attnkit.train.tasks.classify import baseline as bl  # noqa: E402
from attnkit.train.tasks.classify import objective as O  # noqa: E402
from attnkit.train.tasks.classify.task import ClassificationTask  # noqa: E402

# --- the measures ---------------------------------------------------------------------------------


def test_weighted_f1_and_macro_recall_by_hand() -> None:
    targets = [0, 0, 0, 0, 1, 1, 2, 2]
    preds = [0, 0, 0, 1, 1, 0, 2, 0]
    # class 0: P 3/5, R 3/4, F1 2*3/(4+5)=2/3; class 1: P 1/2, R 1/2, F1 1/2; class 2: P 1, R 1/2, F1 2/3
    assert M.weighted_f1(targets, preds) == pytest.approx((4 * 2 / 3 + 2 * 0.5 + 2 * 2 / 3) / 8)
    assert M.macro_recall(targets, preds) == pytest.approx((0.75 + 0.5 + 0.5) / 3)
    assert M.metric_score("f1:c", targets, preds, 3, ["a", "b", "c"]) == pytest.approx(2 / 3)
    assert M.metric_score("macro_f1", targets, preds, 3) == pytest.approx(M.macro_f1(targets, preds))


def test_macro_f1_weighs_classes_of_unequal_size_alike() -> None:
    from sklearn.metrics import f1_score

    targets = [0, 0, 0, 0, 0, 0, 1, 1, 2]
    preds = [0, 0, 0, 0, 0, 1, 1, 0, 0]
    # class 0: TP 5, 6 targets, 7 predicted, F1 2*5/(6+7) = 10/13; class 1: TP 1, F1 2/(2+2) = 1/2; class 2: F1 0
    by_hand = (10 / 13 + 1 / 2 + 0) / 3  # 11/26 = 0.423; weighed by support it would be 73/117 = 0.624
    assert M.macro_f1(targets, preds) == pytest.approx(by_hand)
    assert M.macro_f1(targets, preds) == pytest.approx(f1_score(targets, preds, average="macro"))
    assert M.metric_score("macro_f1", targets, preds, 3) == pytest.approx(by_hand)
    assert M.classification_report(targets, preds)["macro_f1"] == pytest.approx(by_hand)
    assert M.macro_f1(targets, preds, 4) == pytest.approx(by_hand)  # class 3: no target, no prediction, left out
    assert M.macro_f1([*targets, 0], [*preds, 3], 4) == pytest.approx((2 * 5 / 14 + 1 / 2 + 0 + 0) / 4)


def test_classification_report_holds_every_measure_and_named_per_class_rows() -> None:
    report = M.classification_report([0, 1, 1], [0, 1, 0], 2, ["neg", "pos"])
    assert set(M.METRICS) <= set(report)
    assert [r["label"] for r in report["per_class"]] == ["neg", "pos"]
    assert report["per_class"][1] == {"label": "pos", "precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3),
                                      "support": 2}


def test_unknown_metric_or_class_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"one of accuracy, macro_f1, weighted_f1, macro_recall, f1:<class>; got 'f2'"):
        M.check_metric("f2")
    with pytest.raises(ValueError, match=r"class 'nope'.*valid metrics: .*f1:neg, f1:pos"):
        M.check_metric("f1:nope", ["neg", "pos"])
    with pytest.raises(ValueError, match="metric must be one of"):
        TrainConfig(metric="top5")
    with pytest.raises(ValueError, match=r"class_weight must be one of \['none', 'balanced'\]"):
        TrainConfig(class_weight="inverse")
    assert TrainConfig.from_dict({"epochs": 1}).metric == "accuracy"  # runs saved before keep accuracy


# --- class weights and offsets --------------------------------------------------------------------


def test_balanced_class_weights_and_an_absent_class() -> None:
    assert O.class_weights([0, 0, 0, 1], 2, "balanced") == pytest.approx([4 / 6, 2.0])
    assert O.class_weights([0, 1], 2, "none") is None
    with pytest.raises(ValueError, match=r"class\(es\) \['rare'\] have no training example.*'none'"):
        O.class_weights([0, 0, 1], 3, "balanced", ["a", "b", "rare"])


def test_tuned_offsets_raise_macro_f1_when_a_rare_class_is_under_predicted() -> None:
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0] * 180 + [1] * 20)
    logits = torch.zeros(200, 2)
    logits[:, 1] = torch.where(labels == 1, 0.0, -2.0) - 1.0 + 0.5 * torch.randn(200, generator=g)
    before = M.macro_f1(labels, logits.argmax(1))
    offsets, start, after = O.tune_offsets(logits, labels.tolist(), "macro_f1", ["common", "rare"])
    assert start == pytest.approx(before) and after > before + 0.1
    assert offsets[0] == 0.0 and offsets[1] > 0  # the rare class's logit is raised
    assert M.macro_f1(labels, (logits + torch.tensor(offsets)).argmax(1)) == pytest.approx(after)
    named, _, _ = O.tune_offsets(logits, labels.tolist(), "f1:rare", ["common", "rare"])
    assert named[0] == 0.0 and named[1] > 0


def test_halves_and_offsets_are_fitted_on_the_validation_part_only() -> None:
    """The test labels turned around change the test figures and nothing the run tuned."""
    from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier

    examples = _imbalanced(900, rare=0.2)
    train, val, test = examples[:300], examples[300:400], examples[400:500]
    flipped = [Example(e.text, "negative" if e.label == "positive" else "positive") for e in test]

    def decision_and_test(test_part: list[Example]) -> tuple[dict, float]:
        result = fit_classifier(train, val, test_part, model_name="wide",
                                model_options={"embed_dim": 8, "attention_dim": 8, "ngram_rows": 2000},
                                data=DataSettings(max_len=32, vocab_size=2000), quiet=True,
                                train_config=TrainConfig(epochs=2, device="cpu", seed=0, metric="macro_f1"))
        assert result.test is not None
        return result.extra["decision"], result.test["macro_f1"]

    decision, score = decision_and_test(test)
    assert decision["halves"][1] > 0 and any(decision["offsets"])  # both were tuned: something to compare
    assert decision["after"] > decision["before"]
    decision_flipped, score_flipped = decision_and_test(flipped)
    assert decision_flipped == decision  # halves, offsets and the validation figures alike
    assert score_flipped < score - 0.5  # the flipped labels reached the test figures


def test_offsets_are_left_at_zero_when_nothing_gains() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]] * 10)
    offsets, before, after = O.tune_offsets(logits, [0, 1] * 10, "macro_f1", ["a", "b"])
    assert offsets == [0.0, 0.0] and before == after == 1.0


def test_offsets_are_tuned_by_default_only_for_an_unweighted_loss() -> None:
    assert O.tunes_offsets("macro_f1", None, "none") and not O.tunes_offsets("accuracy", None, "none")
    assert not O.tunes_offsets("macro_f1", None, "balanced") and not O.tunes_offsets("f1:pos", None, "balanced")
    assert O.tunes_offsets("macro_f1", True, "balanced") and not O.tunes_offsets("macro_f1", False, "none")


def test_fold_offsets_shifts_the_classifier_bias() -> None:
    model = torch.nn.Module()
    model.classifier = torch.nn.Linear(3, 2)
    bias = model.classifier.bias.detach().clone()
    O.fold_offsets(model, [0.0, 1.5])
    assert torch.allclose(model.classifier.bias, bias + torch.tensor([0.0, 1.5]))
    with pytest.raises(ValueError, match="classifier"):
        O.fold_offsets(torch.nn.Linear(2, 2), [0.0, 1.0])


def test_stacking_weighs_classes_alike_for_macro_measures_only() -> None:
    labels = [0, 0, 0, 1]
    assert O.stacking_weights("accuracy", labels, 2, "none") is None
    assert O.stacking_weights("macro_f1", labels, 2, "none") == pytest.approx([4 / 6, 2.0])
    assert O.stacking_weights("accuracy", labels, 2, "balanced") == pytest.approx([4 / 6, 2.0])
    assert O.stacking_weights("f1:x", [0, 0], 2, "none") == pytest.approx([1.0, 0.0])  # class 1 absent from val


class _Items:
    def __init__(self, labels: list[int]) -> None:
        from attnkit.data.batching import LabelVocab

        self.labels, self.label_vocab = labels, LabelVocab(["a", "b"])

    def __len__(self) -> int:
        return len(self.labels)


def test_classification_task_scores_and_weighs_by_the_metric() -> None:
    task = ClassificationTask(_Items([0, 0, 0, 1]), metric="macro_f1", class_weight="balanced")
    assert task.score({"accuracy": 0.9, "macro_f1": 0.4, "loss": 1.0}) == (0.4, -1.0)
    assert task.loss_weights is not None and task.loss_weights.tolist() == pytest.approx([4 / 6, 2.0])
    assert ClassificationTask(_Items([0, 1])).score({"accuracy": 0.9, "macro_f1": 0.4, "loss": 1.0}) == (0.9, -1.0)


def test_class_weighted_ngram_regression_favours_the_rare_class() -> None:
    from attnkit.models.ngram_half import fit_nb_regression

    # 2 documents, 2 n-grams: the same n-gram in each, so only the bias can tell the classes apart
    counts = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0]]), torch.ones(4, dtype=torch.float64),
                                     (4, 2)).coalesce()
    ratios = torch.ones(2, 2, dtype=torch.float64)
    labels = [0, 0, 0, 1]
    _, plain = fit_nb_regression(counts, labels, ratios)
    _, balanced = fit_nb_regression(counts, labels, ratios, [4 / 6, 2.0])
    assert float(plain[0] - plain[1]) > 0.5  # the common class wins unweighted
    assert abs(float(balanced[0] - balanced[1])) < 0.05  # balanced: the classes weigh alike


# --- the baseline ---------------------------------------------------------------------------------


def _imbalanced(n: int = 600, rare: float = 0.08, seed: int = 3) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i, d in enumerate(keyword_corpus(n, seed=seed, length=(8, 12))):
        if d.label == "positive" and rng.random() > rare:
            continue
        # few keywords per document: the rare class is hard, so weighting matters
        words = d.text.split()
        out.append(Example(" ".join(words[:3]) + f" doc{i}", d.label))
    return out


def test_baseline_uses_the_runs_class_weighting() -> None:
    examples = _imbalanced()
    train, test = examples[: len(examples) * 2 // 3], examples[len(examples) * 2 // 3 :]
    plain = bl.baseline_scores(train, test)
    balanced = bl.baseline_scores(train, test, class_weight="balanced")
    assert plain["class_weight"] == "none" and balanced["class_weight"] == "balanced"
    assert "weighted_f1" in balanced and balanced["per_class"][1]["label"] == "positive"
    assert balanced["per_class"][1]["recall"] > plain["per_class"][1]["recall"]
    with pytest.raises(ValueError, match=r"\['zzz'\] have no training example"):
        bl.baseline_scores(train, test, labels=["negative", "positive", "zzz"], class_weight="balanced")


# --- the command line -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def imbalanced_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "imbalanced.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for e in _imbalanced(900, rare=0.2):
            writer.writerow([e.text, e.label])
    return path


WIDE = ["--model", "wide", "--model-opt", "embed_dim=8", "--model-opt", "attention_dim=8",
        "--model-opt", "ngram_rows=2000", "--vocab-size", "2000", "--max-len", "32", "--epochs", "2",
        "--device", "cpu", "--quiet"]


def test_train_with_a_metric_reports_it_first_with_every_measure(tmp_path, imbalanced_csv) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(out), "--metric",
                                      "f1:positive", "--class-weight", "balanced", "--baseline", *WIDE])
    assert result.exit_code == 0, result.output
    report = (out / "report.txt").read_text(encoding="utf-8").splitlines()
    assert report[1].startswith("F1 of positive ")
    assert "(the measure this run was trained for: metric f1:positive)" in report[1]
    assert all(word in report[2] for word in ("accuracy", "macro-F1", "weighted-F1", "macro-recall"))
    assert "class_weight=balanced" in "\n".join(report) and "F1 of positive" in report[4]
    saved = read_run_config(out)
    assert saved["train_config"]["metric"] == "f1:positive"
    decision = saved["metrics"]["decision"]
    assert decision["metric"] == "f1:positive" and "offsets" not in decision  # balanced: no offsets by default
    assert saved["metrics"]["baseline"]["class_weight"] == "balanced"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "F1 of positive" in page and "macro-recall" in page

    scored = CliRunner().invoke(cli, ["evaluate", str(out), "--data", str(imbalanced_csv), "--json"])
    assert scored.exit_code == 0, scored.output
    metrics = json.loads(scored.output)
    assert set(M.METRICS) <= set(metrics)
    assert [r["label"] for r in metrics["per_class"]] == ["negative", "positive"]


def test_accuracy_runs_tune_no_offsets(tmp_path, imbalanced_csv) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    saved = read_run_config(out)
    assert "offsets" not in saved["metrics"]["decision"]
    assert (out / "report.txt").read_text(encoding="utf-8").splitlines()[1].startswith("accuracy ")


@pytest.mark.parametrize("flags, expected", [
    (["--metric", "f1:maybe"], "valid metrics: accuracy, macro_f1, weighted_f1, macro_recall, f1:negative, "
                               "f1:positive"),
    (["--metric", "auc"], "metric must be one of accuracy, macro_f1"),
    (["--class-weight", "inverse"], "'inverse' is not one of 'none', 'balanced'"),
])
def test_bad_metric_flags_are_one_line_errors(tmp_path, imbalanced_csv, flags, expected) -> None:
    result = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(tmp_path / "r"),
                                      *flags, *TINY])
    assert result.exit_code != 0 and expected in result.output
    assert "Traceback" not in result.output and not (tmp_path / "r").exists()


def test_cv_compares_the_chosen_metric_with_the_weighted_baseline(tmp_path, imbalanced_csv) -> None:
    out = tmp_path / "cv.json"
    result = CliRunner().invoke(cli, ["cv", "--data", str(imbalanced_csv), "--folds", "3", "--max-folds", "1",
                                      "--metric", "macro_recall", "--class-weight", "balanced", "--baseline",
                                      "--json", str(out), *TINY])
    assert result.exit_code == 0, result.output
    assert "mean macro_recall over 1 fold(s)" in result.output and "macro-recall per fold" in result.output
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert "macro_recall" in saved["results"][0] and saved["baseline"]["folds"][0]["class_weight"] == "balanced"


# --- --preset -------------------------------------------------------------------------------------


@pytest.fixture()
def fake_pretrained(tmp_path, monkeypatch, imbalanced_csv):
    """The 'pretrained' extra's module, installed as a stand-in whose folder holds a tiny BERT."""
    with open(imbalanced_csv, encoding="utf-8") as fh:
        words = {w for row in csv.DictReader(fh) for w in row["text"].split()}
    folder = tmp_path / "minilm"
    folder.mkdir()
    write_tiny_bert(folder, words, layers=3)
    install_fake_pretrained(monkeypatch, folder)
    return folder


def test_preset_accurate_without_the_extra_is_one_line_naming_it(tmp_path, imbalanced_csv, monkeypatch) -> None:
    from attnkit.train.tasks.classify.recipe import PRETRAINED_PACKAGE

    monkeypatch.setitem(__import__("sys").modules, PRETRAINED_PACKAGE, None)  # import fails as when absent
    for command in (["train", "--out", str(tmp_path / "r")], ["cv", "--folds", "3"]):
        result = CliRunner().invoke(cli, [*command, "--data", str(imbalanced_csv), "--preset", "accurate"])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        line = result.output.strip()
        assert "\n" not in line and "'pretrained' extra" in line and "pip install 'attnkit[pretrained]'" in line
        assert "valid: ['fast', 'balanced', 'accurate']" in line
    assert not (tmp_path / "r").exists()


def test_preset_accurate_fine_tunes_the_packaged_minilm_with_its_ngram_half(tmp_path, imbalanced_csv,
                                                                           fake_pretrained) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(out), "--preset",
                                      "accurate", "--epochs", "1", "--max-len", "16", "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    saved = read_run_config(out)
    assert saved["model_name"] == "bert" and saved["init_from"] == str(fake_pretrained.resolve())
    from attnkit.train.runs.rundir import data_fingerprint

    assert saved["init_from_sha256"] == data_fingerprint(fake_pretrained) and saved["init_from_bytes"] > 0
    assert saved["model_config"]["hidden_size"] == 16 and saved["model_config"]["ngram_rows"] > 0
    cfg = saved["train_config"]
    assert (cfg["lr"], cfg["batch_size"], cfg["patience"], cfg["epochs"]) == (5e-5, 32, 0, 1)  # fine-tuning's, --epochs
    assert saved["model_config"]["frozen_layers"] == 0
    assert saved["data_settings"]["tokenizer"] == "wordpiece" and saved["data_settings"]["max_len"] == 16
    both = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(tmp_path / "r2"),
                                    "--preset", "accurate", "--model", "wide"])
    assert both.exit_code == 2 and "--preset accurate" in both.output and "--preset fast" in both.output


def test_preset_balanced_resolves_to_its_settings_and_resumes_to_identical_weights(tmp_path, imbalanced_csv,
                                                                                   fake_pretrained) -> None:
    from attnkit.train.tasks.classify.finetune import FINETUNE_DEFAULTS, finetune_defaults

    defaults, max_len, model = finetune_defaults("balanced")
    assert (defaults["epochs"], defaults["lr"], defaults["batch_size"], max_len, model) == (1, 2e-4, 64, 64, {
        "frozen_layers": 2, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "tail_share": 0.75,
        "ngram_len": 4096})
    assert {k: v for k, v in defaults.items() if k not in ("epochs", "lr", "batch_size")} == {
        k: v for k, v in FINETUNE_DEFAULTS.items() if k not in ("epochs", "lr", "batch_size")}
    assert finetune_defaults(None) == (FINETUNE_DEFAULTS, 128, {"ngram_len": 4096})
    assert finetune_defaults("accurate") == (FINETUNE_DEFAULTS, 128, {"ngram_len": 4096,
                                                                     "frozen_word_embeddings": True})
    flags = ["--data", str(imbalanced_csv), "--preset", "balanced", "--epochs", "2", "--device", "cpu", "-q"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert CliRunner().invoke(cli, ["train", *flags, "--out", str(whole)]).exit_code == 0
    saved = read_run_config(whole)
    assert saved["model_name"] == "bert" and saved["init_from"] == str(fake_pretrained.resolve())
    assert (saved["train_config"]["lr"], saved["train_config"]["batch_size"], saved["data_settings"]["max_len"]) == (
        2e-4, 64, 64)
    assert saved["model_config"]["ngram_len"] == 4096  # the n-gram half reads past the encoder's 64 tokens
    assert (saved["model_config"]["hidden_dropout_prob"], saved["model_config"]["attention_probs_dropout_prob"]) == (
        0.0, 0.0)  # one epoch without dropout
    with pytest.MonkeyPatch.context() as patch:  # the disk fills after the first epoch's commit
        patch.setattr(fileops, "fs", FullDisk(cut))
        assert "disk is full" in CliRunner().invoke(cli, ["train", *flags, "--out", str(cut)]).output
    assert read_run_config(cut)["status"] == "training"
    resumed = CliRunner().invoke(cli, ["train", "--out", str(cut), "--resume", "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert read_run_config(cut)["status"] == "done"
    assert (committed_dir(cut) / "model.safetensors").read_bytes() == (
        committed_dir(whole) / "model.safetensors").read_bytes()
    changed = CliRunner().invoke(cli, ["train", "--out", str(cut), "--resume", "--lr", "5e-5"])
    assert changed.exit_code == 2 and "--lr" in changed.output


def test_preset_fast_is_the_default_recipe_and_help_shows_both_costs(tmp_path, imbalanced_csv) -> None:
    for command in ("train", "cv"):
        page = CliRunner().invoke(cli, [command, "--help"]).output
        assert "--preset [fast|balanced|accurate]" in page and "default: fast" in page
        assert "min for 7,600 news articles" in " ".join(page.split())
        assert "balanced: fine-tune all-MiniLM-L6-v2" in " ".join(page.split())
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(imbalanced_csv), "--out", str(out), "--preset", "fast",
                                      *WIDE[2:]])
    assert result.exit_code == 0, result.output
    assert read_run_config(out)["model_name"] == "wide"
