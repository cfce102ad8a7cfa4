"""attnkit.TextClassifier: a scikit-learn estimator trained by ``attnkit train``'s recipe, whose saved run
the command line reads and predicts the same from, to the last digit."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import attnkit
from attnkit._lazy import MissingExtraError
from attnkit.cli import cli
from attnkit.data.synthetic import keyword_corpus

sklearn = pytest.importorskip("sklearn")  # the 'tasks' extra; the missing-extra test below needs none

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import check_no_attributes_set_in_init  # noqa: E402

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
