"""``attnkit demo``: learn to attend to the few words that decide a label.

The generated keyword corpus (:func:`attnkit.data.synthetic.keyword_corpus`)
hides one to three class key words among neutral filler words. A
:class:`~attnkit.models.DocumentClassifier` — word embeddings and attention
pooling (a small tanh scorer, Yang et al., 2016) — learns it; the demo then reports the
test accuracy and the *attention focus*: the mean share of the pooling
attention that lands on the key words' positions (1.0 = all of it). Chance
focus is about 2/30 (two key words among thirty words).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DEMO_MODEL", "DEMO_TRAIN", "run_demo", "is_demo_run", "most_attended_words", "words_that_moved",
           "format_report", "write_demo_figures", "DEMO_FIGURES"]

# Attention pooling straight over the word embeddings (num_layers=0): each word's pooling
# score comes from that word alone, so the weights can only rise on the words that matter.
# An encoder layer below the pooling mixes the words first, and the pooling may then read
# the key words' information off any position (focus 0.22 with one layer, measured).
# Strong embedding dropout (0.5) rewards looking at every key word rather than at whatever
# suffices: focus 0.96-0.98 over seeds 0-2 against 0.84-0.98 with dropout 0.1.
DEMO_MODEL: dict[str, Any] = {"layer": {"d_model": 64, "num_heads": 4, "d_ff": 128, "dropout": 0.5},
                              "num_layers": 0, "pooling": "attention", "pooling_hidden": 16,
                              "positional": "none"}
DEMO_TRAIN: dict[str, Any] = {"epochs": 6, "batch_size": 32, "lr": 3e-3, "warmup_ratio": 0.1,
                              "patience": 2, "device": "cpu"}
DEMO_SIZES = {"full": (3000, 6), "quick": (1000, 6)}  # documents, epochs


def most_attended_words(tokens: list[list[str]], weights: list[list[float]], classes: list[str],
                        top: int = 8) -> dict[str, list[tuple[str, float]]]:
    """Per class, the words with the largest pooling attention per document of that class."""
    mass: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    count: dict[str, int] = defaultdict(int)
    for toks, w, c in zip(tokens, weights, classes, strict=True):
        count[c] += 1
        for t, x in zip(toks, w, strict=False):
            mass[c][t] += x
    return {c: sorted(((t, m / count[c]) for t, m in mass[c].items()), key=lambda p: -p[1])[:top]
            for c in sorted(mass)}


def format_report(table: dict[str, list[tuple[str, float]]], accuracy: float, focus: float,
                  moved: dict[str, list[tuple[str, float]]] | None = None) -> str:
    """report.txt: the words that moved the decision most per class first, raw attention's after."""
    lines = ["attnkit demo: words that moved the decision most per class",
             f"test accuracy {accuracy:.4f}   attention focus on key words {focus:.4f}", ""]
    if moved is not None:
        lines += ["exact contributions: each word's push toward the predicted class over the mean of the "
                  "classes, its mean over the test documents that hold it", ""]
        lines += _word_table(moved, "push")
    lines += ["raw attention: most attended words per class (mean pooling attention per document)", ""]
    return "\n".join(lines + _word_table(table, "attention"))


def _word_table(table: dict[str, list[tuple[str, float]]], column: str) -> list[str]:
    lines = []
    for c, rows in table.items():
        lines.append(f"class {c}")
        lines.append(f"  {'word':<16}{column:>10}")
        lines += [f"  {t:<16}{m:>10.4f}" for t, m in rows]
        lines.append("")
    return lines


def words_that_moved(model: Any, ids: list[list[int]], tokenizer: Any, labels: Any,
                     top: int = 8) -> dict[str, list[tuple[str, float]]]:
    """Per predicted class, the words whose exact contributions pushed the decision toward it most."""
    from attnkit.attribution.faithfulness import decisive_words, token_label

    rows = decisive_words(model, ids, method="contributions", top=top)
    return {labels.decode(c): [(token_label(tokenizer, t), push) for t, push in r]
            for c, r in enumerate(rows) if r}


def run_demo(out: Path | None, *, quick: bool = False, seed: int = 0, overwrite: bool = False,
             quiet: bool = False, log: Callable[[str], None] | None = None,
             notice: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train the demo model on the keyword corpus (80/10/10 split) and measure its attention.

    Returns a dict: ``accuracy`` and ``focus`` on the test part, ``seconds``,
    ``moved`` (the words that moved the decision most per predicted class, by
    exact contributions), ``table`` (raw attention's most attended words per
    class), and per test document its
    ``tokens``, pooling ``weights``, ``labels`` and ``key_positions``.
    """
    import torch

    from attnkit.data.readers import Example
    from attnkit.data.synthetic import keyword_corpus
    from attnkit.train.config import TrainConfig
    from attnkit.train.runs import checkpoint as ckpt
    from attnkit.train.runs.run import new_run_id
    from attnkit.train.tasks.classify.inference import attention_focus, pooling_weights
    from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier

    start = time.perf_counter()
    # A model this small gains nothing from intra-op threads and loses much to their
    # synchronisation on a busy machine (49 ms vs 370 ms per step measured on 2 shared cores).
    torch.set_num_threads(1)
    n, epochs = DEMO_SIZES["quick" if quick else "full"]
    corpus = keyword_corpus(n, seed=seed)
    cut_val, cut_test = int(0.8 * n), int(0.9 * n)
    as_examples = [Example(d.text, d.label) for d in corpus]
    run_id = new_run_id()
    if out is not None:  # refuse an occupied directory before training, touching nothing
        if not overwrite and is_demo_run(out):
            overwrite = True  # the demo's own earlier run: replaced at the first commit, whole until then
            if not quiet:
                (notice or (lambda _line: None))(f"replacing the earlier demo run in {out}")
        # demo has --out and --overwrite, no --resume
        ckpt.check_run_dir(out, run_id, overwrite=overwrite, resumable=False,
                           flags={"out": "--out", "overwrite": "--overwrite"})
    config = TrainConfig.from_dict({**DEMO_TRAIN, "epochs": epochs, "seed": seed})
    baseline = _baseline(as_examples[:cut_test], as_examples[cut_test:])
    result = fit_classifier(
        as_examples[:cut_val], as_examples[cut_val:cut_test], as_examples[cut_test:],
        model_name="document", model_options=DEMO_MODEL, train_config=config,
        data=DataSettings(max_len=64), out_dir=out, run_id=run_id, overwrite=overwrite, quiet=quiet,
        log=None if quiet else log, extra={"data": {"source": DEMO_SOURCE, "n": n, "seed": seed}},
        baseline=baseline)
    assert result.test is not None and result.test_data is not None
    test_docs = corpus[cut_test:]
    ds = result.test_data
    from attnkit.data.batching import collate

    batch = collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        _, weights = pooling_weights(result.model, batch["ids"], batch["lengths"])  # (N, T)
    focus = float(attention_focus(weights, [d.key_positions for d in test_docs]).mean())
    tokens = [[result.tokenizer.id_to_token(int(i)) for i in ds.ids[r]] for r in range(len(ds))]
    rows = [weights[r, : len(tokens[r])].tolist() for r in range(len(ds))]
    table = most_attended_words(tokens, rows, [d.label for d in test_docs])
    moved = words_that_moved(result.model, [list(map(int, d)) for d in ds.ids], result.tokenizer,
                             result.label_vocab)
    accuracy = float(result.test["accuracy"])
    if out is not None:  # the reports join the run in one commit
        import tempfile

        from attnkit.train.runs.run import add_to_run

        with tempfile.TemporaryDirectory() as folder:
            write_demo_figures(Path(folder), tokens, rows, result.model, batch, result.label_vocab)
            add_to_run(out, {"report.txt": format_report(table, accuracy, focus, moved),
                             **{name: (Path(folder) / name).read_bytes() for name in DEMO_FIGURES}})
    # tokens / weights / labels / key_positions: the test documents' per-token pooling
    # attention, ready for an HTML report.
    return {"accuracy": accuracy, "baseline": baseline, "focus": focus, "seconds": time.perf_counter() - start,
            "table": table, "moved": moved,
            "documents": n, "tokens": tokens, "weights": rows, "labels": [d.label for d in test_docs],
            "key_positions": [d.key_positions for d in test_docs]}


DEMO_SOURCE = "keyword_corpus"  # config.json's data.source in a run the demo wrote


def is_demo_run(out: Path) -> bool:
    """Whether ``out`` holds a committed run that ``attnkit demo`` wrote (any other run, a user's
    trained one included, is replaced only with ``--overwrite``)."""
    from attnkit.train.runs.rundir import read_run_config

    if not (out / "current.json").is_file():
        return False
    try:
        data = read_run_config(out).get("data")
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("source") == DEMO_SOURCE


REPORT_DOCUMENTS = 12  # test documents shown in report.html
DEMO_FIGURES = ("report.html", "explanation.png")  # what write_demo_figures writes


def _baseline(train: list[Any], test: list[Any]) -> dict[str, Any] | None:
    """The TF-IDF baseline on the demo's split (train + validation, test), or None without scikit-learn."""
    from attnkit.train.tasks.classify.baseline import baseline_scores

    try:
        scores = baseline_scores(train, test)
    except ImportError:
        return None
    scores.pop("predictions")
    return scores


def write_demo_figures(out: Path, tokens: list[list[str]], weights: list[list[float]], model: Any,
                       batch: dict[str, Any], labels: Any) -> None:
    """Write ``report.html`` (the interactive report of the first test documents) and
    ``explanation.png`` (the first document, tokens shaded by attention)."""
    import numpy as np
    import torch

    from attnkit.viz.views import AttentionView, write_views

    n = min(REPORT_DOCUMENTS, len(tokens))
    with torch.no_grad():
        probs = model(batch["ids"][:n], batch["lengths"][:n]).softmax(-1)  # (n, C)
    views = [
        AttentionView(tokens[i], np.zeros((0, 1, 1, 1)), np.asarray(weights[i], dtype=np.float32),
                      labels.decode(int(probs[i].argmax())), float(probs[i].max()))
        for i in range(n)
    ]
    write_views(views, out / DEMO_FIGURES[0], "attnkit demo: where the classifier looks")
    write_views(views[:1], out / DEMO_FIGURES[1], "attnkit demo: why the model predicted this")
