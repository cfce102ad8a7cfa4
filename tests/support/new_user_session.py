"""A new user's first session with the installed attnkit, step by step; ``./dev install-check`` runs it.

Run it with the interpreter of the virtual environment that holds the installed wheel (never ./src)::

    VENV/bin/python tests/support/new_user_session.py core   # attnkit without extras
    VENV/bin/python tests/support/new_user_session.py all    # attnkit[all]

``core`` checks what ``pip install attnkit`` alone gives: the attention core works, and the command line,
plotting and the scikit-learn estimator each say in one line which extra to install (no traceback from the
command line). ``all`` works as a new user would, in a new folder: the demo, then train on a CSV, predict
(also into ``| head -1``), evaluate, visualize, and the Python API (``load_run``, ``TextClassifier``) whose
saved run the command line reads. Every step checks what it printed or wrote; the first that fails stops the
session with its command and output. Each step's time is printed.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # holds tests/ (the copy an install check makes, or the checkout)
ATTNKIT = str(Path(sys.executable).with_name("attnkit"))  # the console script pip installed beside python
PREDICTION = re.compile(r"^(negative|positive)\t[01]\.\d{3}\t")  # what `attnkit predict` prints per text
# Tiny settings: `attnkit train` takes seconds (the flags of tests.support.cli.TINY).
TINY_OPTIONS = {"layer": {"d_model": 16, "num_heads": 2, "dropout": 0.0}, "num_layers": 0}
TINY_FIT = {"epochs": 3, "batch_size": 16, "lr": 0.01}


class SessionError(AssertionError):
    pass


def step(name: str, command: list[str] | str, check: Callable[[subprocess.CompletedProcess[str]], object],
         *, cwd: Path, returncode: int | tuple[int, ...] = 0) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a list, or a bash line for a pipe) in ``cwd``; ``check`` asserts on its result."""
    started = time.perf_counter()
    shell = isinstance(command, str)
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command] if shell else command, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    codes = returncode if isinstance(returncode, tuple) else (returncode,)
    try:
        assert done.returncode in codes, f"exit status {done.returncode}, expected {codes}"
        assert "Traceback" not in done.stderr, "a traceback on stderr"
        check(done)
    except AssertionError as err:
        shown = command if shell else shlex.join(command)
        raise SessionError(f"[session] {name} FAILED: {err}\n  command: {shown}\n  stdout: {done.stdout[-2000:]}"
                           f"\n  stderr: {done.stderr[-2000:]}") from None
    print(f"[session] {name}: ok ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return done


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def one_line_hint(extra: str) -> Callable[[subprocess.CompletedProcess[str]], None]:
    """The check of a use that needs ``extra``: one line on stderr that says to install it, nothing more."""
    def check(done: subprocess.CompletedProcess[str]) -> None:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, f"{len(lines)} lines on stderr, expected the one-line hint"
        assert f"the '{extra}' extra" in lines[0] and f"pip install 'attnkit[{extra}]'" in lines[0], lines[0]
    return check


# Python uses of an extra: the error is the same one-line hint, which the snippet prints.
EXTRA_USE = """
import attnkit
try:
    {use}
except ImportError as err:
    print(type(err).__name__, err)
else:
    raise SystemExit("no error without the extra")
"""


def core_session(folder: Path) -> None:
    """``pip install attnkit``: the core, and a one-line hint for each use that needs an extra."""
    step("import attnkit; attnkit.attention", python(
        "import attnkit, torch\n"
        "q = torch.randn(2, 4, 5, 8)\n"
        "out = attnkit.attention(q, q, q, causal=True)\n"
        "assert out.shape == q.shape and torch.isfinite(out).all()\n"
        "assert torch.allclose(out[:, :, 0], q[:, :, 0])  # the first query sees only the first key\n"
        "print(attnkit.__version__, attnkit.__file__)"),
        lambda d: _assert("site-packages" in d.stdout, "attnkit was not imported from site-packages"), cwd=folder)
    for args in (["--help"], ["demo", "--quick"], ["predict", "runs/x", "a text"]):
        step(f"attnkit {' '.join(args)} without the cli extra", [ATTNKIT, *args], one_line_hint("cli"), cwd=folder,
             returncode=1)
    for name, use, extra in (("attnkit.viz.plot_attention", "attnkit.viz.plot_attention", "viz"),
                             ("attnkit.TextClassifier", "attnkit.TextClassifier()", "tasks")):
        step(f"{name} without the {extra} extra", python(EXTRA_USE.format(use=use)),
             lambda d, e=extra: _assert(d.stdout.startswith("MissingExtraError ")
                                        and f"pip install 'attnkit[{e}]'" in d.stdout
                                        and len(d.stdout.strip().splitlines()) == 1, d.stdout), cwd=folder)


def _assert(condition: bool, message: object = "") -> None:
    assert condition, message


def _write_csv(path: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.cli import write_keyword_csv

    write_keyword_csv(path, n)


def full_session(folder: Path) -> None:
    """``pip install 'attnkit[all]'``: the commands and the Python API, as a new user runs them."""
    step("attnkit demo --quick", [ATTNKIT, "demo", "--quick", "--quiet"],
         lambda d: _assert("test accuracy" in d.stdout and (folder / "runs/demo/report.html").is_file()), cwd=folder)
    _write_csv(folder / "reviews.csv", 200)
    _write_csv(folder / "many.csv", 3000)  # more output than a pipe holds: `| head -1` closes it early
    tiny = ["--model", "document", "--device", "cpu", "--quiet", "--epochs", "3", "--batch-size", "16",
            "--lr", "0.01", "--model-opt", "layer.d_model=16", "--model-opt", "layer.num_heads=2",
            "--model-opt", "num_layers=0", "--model-opt", "layer.dropout=0.0"]
    step("attnkit train", [ATTNKIT, "train", "--data", "reviews.csv", "--out", "runs/reviews", *tiny],
         lambda d: _assert("saved run to runs/reviews" in d.stdout), cwd=folder)
    step("attnkit predict", [ATTNKIT, "predict", "runs/reviews", "a wonderful film", "the worst film"],
         lambda d: _assert([bool(PREDICTION.match(line)) for line in d.stdout.splitlines()] == [True, True]),
         cwd=folder)
    step("attnkit predict --file many.csv | head -1",
         f"{shlex.quote(ATTNKIT)} predict runs/reviews --file many.csv | head -1; echo \"status ${{PIPESTATUS[0]}}\"",
         _quiet_head, cwd=folder)
    step("attnkit evaluate --json", [ATTNKIT, "evaluate", "runs/reviews", "--data", "reviews.csv", "--json"],
         lambda d: _assert(0.0 <= json.loads(d.stdout)["accuracy"] <= 1.0), cwd=folder)
    for time_ in ("", " again (replaces its own report)"):
        step(f"attnkit visualize -o report.html{time_}",
             [ATTNKIT, "visualize", "runs/reviews", "a wonderful film", "-o", "report.html"],
             lambda d: _assert("<html" in (folder / "report.html").read_text(encoding="utf-8")[:500].lower()),
             cwd=folder)
    done = step("attnkit.load_run and attnkit.TextClassifier", python(API_SNIPPET), _api_checked, cwd=folder)
    expected = json.loads(done.stdout.splitlines()[-1])
    step("attnkit predict on TextClassifier.save's run", [ATTNKIT, "predict", "runs/estimator", *expected],
         lambda d: _assert([line.split("\t")[0] for line in d.stdout.splitlines()] == list(expected.values()),
                           f"the CLI's labels differ from TextClassifier.predict's {expected}"), cwd=folder)


def _quiet_head(done: subprocess.CompletedProcess[str]) -> None:
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and PREDICTION.match(lines[0]), "expected one prediction, then the status"
    assert lines[1] in ("status 0", "status 1"), lines[1]  # click ends a closed pipe with 1, quietly
    for noise in ("Error", "Broken pipe", "Exception ignored"):
        assert noise not in done.stderr, f"{noise!r} on stderr"


API_SNIPPET = f"""
import csv, json
import numpy as np
import attnkit

run = attnkit.load_run("runs/reviews")
texts = ["a wonderful film", "the worst film", "a superb and brilliant story"]
labels = run.predict(texts)
proba = run.predict_proba(texts)
assert set(labels) <= set(run.labels) and proba.shape == (3, len(run.labels)), (labels, proba.shape)
assert np.allclose(proba.sum(axis=1), 1.0)

with open("reviews.csv", newline="", encoding="utf-8") as fh:
    rows = list(csv.DictReader(fh))
clf = attnkit.TextClassifier("document", {TINY_OPTIONS!r}, **{TINY_FIT!r})
clf.fit([r["text"] for r in rows], [r["label"] for r in rows])
assert list(clf.classes_) == ["negative", "positive"], clf.classes_
assert clf.predict_proba(texts).shape == (3, 2)
assert 0.0 <= clf.score([r["text"] for r in rows], [r["label"] for r in rows]) <= 1.0
clf.save("runs/estimator")
assert attnkit.load_run("runs/estimator").predict(texts) == list(clf.predict(texts))
print(json.dumps(dict(zip(texts, clf.predict(texts).tolist()))))
"""


def _api_checked(done: subprocess.CompletedProcess[str]) -> None:
    assert done.stdout.strip(), "the snippet printed nothing"
    predicted = json.loads(done.stdout.splitlines()[-1])
    assert set(predicted.values()) <= {"negative", "positive"}, predicted


def main(argv: list[str]) -> int:
    if argv not in (["core"], ["all"]):
        print("usage: new_user_session.py core|all", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnkit-new-user-") as tmp:
        try:
            (core_session if argv == ["core"] else full_session)(Path(tmp))
        except SessionError as err:
            print(err, file=sys.stderr)
            return 1
    print(f"[session] {argv[0]}: every step passed in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
