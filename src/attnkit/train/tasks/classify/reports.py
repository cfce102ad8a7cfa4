"""What a finished classification run reports: the test result beside the baseline (as lines), and the
analysis of the committed model on its test part (per-class scores, the confusion matrix, the most attended
words, the n-grams the half weighs most, the explanation shown first with its faithfulness, the confidently
wrong examples), written as ``report.txt`` and ``report.html`` into the run in one commit
(:func:`write_reports`, :func:`attnkit.train.runs.run.add_to_run`). ``attnkit train``, ``cv``, ``report``
and ``baseline`` print and call these.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["result_of_run", "measure", "headline_lines", "comparison_lines", "cv_comparison_lines", "cv_summary",
           "fold_mean_line", "results_analysis",
           "format_report", "report_sections", "write_html_report", "html_report", "write_reports"]

WRONG_SHOWN = 5  # confidently wrong test examples in the report
WORDS_SHOWN = 8  # most attended words per class


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def measure(scores: dict[str, Any], metric: str) -> float | None:
    """The value of ``metric`` in ``scores`` (a test or baseline result); ``f1:<class>`` from its ``per_class``."""
    from attnkit.train.metrics import metric_class

    if metric in scores:
        return float(scores[metric])
    name = metric_class(metric)
    for row in scores.get("per_class") or []:
        if name is not None and row.get("label") == name:
            return float(row["f1"])
    return None


def _columns(metric: str) -> list[str]:
    """The measures a comparison shows: accuracy, macro-F1 and the run's ``metric``."""
    return list(dict.fromkeys(("accuracy", "macro_f1", metric)))


def headline_lines(test: dict[str, Any], metric: str) -> list[str]:
    """The report's first figures: the measure the run was trained for, then every other measure of ``test``."""
    from attnkit.train.metrics import METRICS, metric_title

    value = measure(test, metric)
    lines = [f"{metric_title(metric)} {value:.4f} (the measure this run was trained for: metric {metric})"
             if value is not None else f"metric {metric}"]
    lines.append("   ".join(f"{metric_title(m)} {test[m]:.4f}" for m in METRICS if m in test))
    return lines


def comparison_lines(model: dict[str, Any], base: dict[str, Any], metric: str = "accuracy") -> list[str]:
    """The model, the baseline and their difference (accuracy, macro-F1 and ``metric``) as table lines."""
    from attnkit.train.metrics import metric_title
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME

    columns = [m for m in _columns(metric) if measure(model, m) is not None and measure(base, m) is not None]
    width = max(10, *(len(metric_title(m)) + 2 for m in columns))

    def row(name: str, values: list[str]) -> str:
        return f"{name:<12}" + "".join(f"{v:>{width}}" for v in values)

    lines = [row("", [metric_title(m) for m in columns]),
             row("model", [f"{measure(model, m):.4f}" for m in columns]),
             row("baseline", [f"{measure(base, m):.4f}" for m in columns]),
             row("difference", [_signed(measure(model, m) - measure(base, m)) for m in columns]),  # type: ignore[operator]
             f"baseline: {BASELINE_NAME} (C=4{_weighting(base)}) on the same test part (n={base['n']})"]
    return lines


def _weighting(base: dict[str, Any]) -> str:
    """The baseline's settings beyond C=4: its class weights, and its features when the memory limit cut them."""
    weights = ", class_weight=balanced" if base.get("class_weight") == "balanced" else ""
    limit = base.get("feature_limit")
    if limit is not None and base.get("features", 0) >= limit:
        weights += f", the {limit:,} most frequent 1-2-grams: as many as fit the memory limit"
    return weights


def cv_comparison_lines(results: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]],
                        test: dict[str, Any], metric: str = "accuracy") -> list[str]:
    """Per fold the model's and the baseline's ``metric`` and the difference; the means; the paired test."""
    from attnkit.train.metrics import metric_title
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME

    model_values = [measure(r, metric) or 0.0 for r in results]
    base_values = [measure(b, metric) or 0.0 for b in base]
    lines = [f"{metric_title(metric)} per fold", f"{'fold':>4}{'model':>10}{'baseline':>10}{'difference':>12}"]
    for r, m, b in zip(results, model_values, base_values, strict=True):
        lines.append(f"{r['fold']:>4}{m:>10.4f}{b:>10.4f}{_signed(m - b):>12}")
    m, bm = statistics.mean(model_values), statistics.mean(base_values)
    lines.append(f"{'mean':>4}{m:>10.4f}{bm:>10.4f}{_signed(m - bm):>12}")
    lines.append(f"baseline: {BASELINE_NAME} (C=4{_weighting(base[0]) if base else ''}) on the same folds")
    if test["t"] is None:
        lines.append(f"paired test over {test['n']} fold(s): not possible (needs 2 folds that differ in spread); "
                     f"mean difference {_signed(test['mean_difference'])}")
    else:
        lines.append(f"paired t-test over {test['n']} folds: mean difference {_signed(test['mean_difference'])}, "
                     f"{test['confidence']:.0%} interval [{_signed(test['ci_low'])}, {_signed(test['ci_high'])}], "
                     f"t = {test['t']:.2f}, p = {test['p_value']:.3g}")
    return lines


def fold_mean_line(what: str, rows: Sequence[dict[str, Any]], metric: str = "accuracy") -> str:
    """``{what} mean {metric} over N fold(s): M ± SD`` (the spread from two folds on)."""
    values = [measure(r, metric) or 0.0 for r in rows]
    spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{what}mean {metric} over {len(values)} fold(s): {statistics.mean(values):.4f}{spread}"


def cv_summary(examples: Sequence[Any], results: Sequence[dict[str, Any]], *, folds: int, seed: int,
               max_folds: int | None, metric: str, class_weight: str, baseline: bool
               ) -> tuple[list[str], dict[str, Any]]:
    """What ``attnkit cv`` reports of its fold ``results``: the lines (the means; with ``baseline`` the
    baseline on the same folds, with the run's ``class_weight``, beside the model by ``metric``, and the
    paired test) and the record ``--json`` writes."""
    from attnkit.train.tasks.classify.baseline import fold_baselines, paired_test

    lines = [fold_mean_line("", results)] + ([fold_mean_line("", results, metric)] if metric != "accuracy" else [])
    record = {"folds": folds, "results": list(results),
              "mean_accuracy": statistics.mean(r["accuracy"] for r in results), "baseline": None}
    if baseline:
        base = fold_baselines(examples, folds=folds, seed=seed, max_folds=max_folds, class_weight=class_weight)
        test = paired_test([measure(r, metric) or 0.0 for r in results], [measure(b, metric) or 0.0 for b in base])
        lines += cv_comparison_lines(results, base, test, metric)
        record["baseline"] = {"folds": base, "mean_accuracy": statistics.mean(b["accuracy"] for b in base),
                              f"mean_{metric}": statistics.mean(measure(b, metric) or 0.0 for b in base),
                              "paired_test": test}
    return lines, record


def write_reports(out: Path, result: Any, metric: str, base: dict[str, Any] | None) -> None:
    """Add ``report.txt``, ``report.html`` and the faithfulness record of ``result`` (a
    :class:`attnkit.train.tasks.classify.pipeline.FitResult` with a test part) to run ``out`` in one commit
    (:func:`attnkit.train.runs.run.add_to_run`), ``base`` the baseline's figures or None."""
    from attnkit.train.runs.run import add_to_run

    analysis = results_analysis(result)
    analysis["metric"] = metric
    files = {"report.txt": format_report(result.test, analysis, base),
             "report.html": html_report(result.test, analysis, base)}
    if analysis.get("explanation"):
        from attnkit.attribution.report import FAITHFULNESS_FILE, record_text

        files[FAITHFULNESS_FILE] = record_text(analysis["explanation"])
    add_to_run(out, files)


def result_of_run(out: Path, predictor: Any, source: Any) -> Any:
    """What :func:`write_reports` describes of run ``out`` after the fact (``attnkit report``): its test part
    split again from its own data ``source`` (a :class:`~attnkit.data.sources.DataSource`, checked against the
    run's record) with the run's seed, and the test figures it committed (a run whose training did not finish:
    scored now with the weights ``predictor`` serves, a torch run's
    :class:`~attnkit.train.tasks.classify.predictor.Predictor`). Its reports are those ``train`` writes. A run
    without a test part is a ValueError: the reports describe the test part."""
    from attnkit.data.batching import TextClassificationDataset
    from attnkit.data.sources import load_splits
    from attnkit.train.tasks.classify.pipeline import FitResult

    model, tokenizer, labels, meta = predictor.model, predictor.tokenizer, predictor.label_vocab, predictor.config
    _, val, test = load_splits(source, seed=meta["train_config"]["seed"])
    if not test:
        raise ValueError(f"{out} has no test part (attnkit train --test-ratio 0, without --test): the reports "
                         "describe the test part")
    val_ds, test_ds = (TextClassificationDataset(list(part), tokenizer, labels, predictor.read_len)
                       for part in (val, test))
    metrics = meta.get("metrics") or {}
    if metrics.get("test") is None:  # an unfinished run: its test part is scored now, with the weights served
        metrics["test"] = predictor.evaluate([e.text for e in test], [e.label for e in test])
    return FitResult(model, tokenizer, labels, meta["model_config"], [], metrics["test"], test_ds,
                     val_data=val_ds if len(val_ds) else None)


# --- the analysis of a finished run ------------------------------------------------------------


def _scores(result: Any) -> tuple[Any, Any]:
    """Class probabilities ``(N, C)`` of ``result``'s test part and its pooling weights (None if none): those of
    the pass that scored it, else one pass now."""
    if result.test_scores is not None:
        return tuple(result.test_scores)
    from attnkit.train.tasks.classify.task import ClassificationTask

    task = ClassificationTask(result.test_data, batch_size=128)
    logits, _, weights = task.predict(result.model, result.test_data, batch_size=128, pooling=True)
    return logits.softmax(-1), weights


NGRAM_WEIGHT = "its weight for the class minus the mean over the classes, times the half's scale"


def results_analysis(result: Any, *, wrong: int = WRONG_SHOWN, words: int = WORDS_SHOWN) -> dict[str, Any]:
    """Per-class scores, confusion matrix, most attended words per class, confidently wrong examples.

    For a model with an n-gram half also ``top_ngrams``: per class the n-grams
    the half weighs most toward it (:meth:`attnkit.models.ngram_half.NgramHalf.top_ngrams`).

    ``result`` is a :class:`attnkit.train.tasks.classify.pipeline.FitResult` with a test part.
    The words of a class are ranked by their mean pooling attention per test
    document of that (true) class; the confidently wrong examples are the
    misclassified test examples with the highest predicted probability.
    """
    from attnkit.train.metrics import confusion_matrix, per_class_scores
    from attnkit.train.tasks.classify.demo import most_attended_words
    from attnkit.train.tasks.classify.inference import ngram_text

    ds, labels = result.test_data, list(result.label_vocab.labels)
    probs, weights = _scores(result)
    predicted = probs.argmax(-1).tolist()
    targets = list(ds.labels)
    token = result.tokenizer.id_to_token
    tokens = [[str(token(int(i))) for i in ids] for ids in ds.ids]
    per_class = [{"label": lb, **s} for lb, s in zip(labels, per_class_scores(targets, predicted, len(labels)),
                                                     strict=True)]
    misses = sorted((i for i in range(len(ds)) if predicted[i] != targets[i]),
                    key=lambda i: -float(probs[i, predicted[i]]))[:wrong]
    examples = []
    for i in misses:
        top = sorted(zip(tokens[i], weights[i], strict=False), key=lambda p: -p[1])[:5] if weights else []
        examples.append({"text": ds.examples[i].text, "label": labels[targets[i]], "predicted": labels[predicted[i]],
                         "probability": float(probs[i, predicted[i]]), "attended": top, "tokens": tokens[i],
                         "weights": weights[i] if weights else None})
    attended = (most_attended_words(tokens, weights, [labels[t] for t in targets], top=words)
                if weights is not None else None)
    explanation = _explanation(result, misses, examples, predicted)
    ngrams = None
    if getattr(result.model, "has_ngram_half", False):  # the half's own weights: what the attention does not show
        ngrams = {lb: [(ngram_text(token, ids), w) for ids, w in rows]
                  for lb, rows in zip(labels, result.model.top_ngrams(words), strict=True)}
    return {"labels": labels, "per_class": per_class, "n": len(ds),
            "confusion_matrix": confusion_matrix(targets, predicted, len(labels)).tolist(),
            "most_attended": attended, "top_ngrams": ngrams, "confidently_wrong": examples,
            "explanation": explanation}


def _explanation(result: Any, misses: list[int], examples: list[dict[str, Any]], predicted: list[int]
                 ) -> dict[str, Any] | None:
    """:func:`attnkit.attribution.report.explanation_analysis` of the run; each wrong example gets its
    ``moved`` tokens (the shown-first method's five largest scores for the predicted class)."""
    import torch

    from attnkit.attribution.faithfulness import token_label
    from attnkit.attribution.methods import attribute
    from attnkit.attribution.report import explanation_analysis

    ds, val = result.test_data, getattr(result, "val_data", None)
    found = explanation_analysis(result.model, result.tokenizer, list(result.label_vocab.labels),
                                 list(val.ids) if val is not None else None, list(ds.ids))
    if found is None:
        return None
    for i, e in zip(misses, examples, strict=True):
        ids = torch.tensor([list(map(int, ds.ids[i]))])
        scores = attribute(result.model, ids, torch.tensor([ids.shape[1]]), found["shown_first"],
                           target=torch.tensor([predicted[i]]))[0]
        top = torch.argsort(scores, descending=True, stable=True)[:5].tolist()
        e["moved"] = [(token_label(result.tokenizer, int(ids[0, t])), float(scores[t])) for t in top]
    return found


def explanation_lines(explanation: dict[str, Any]) -> list[str]:
    """The explanation a report shows first: its name, how it was chosen and its faithfulness."""
    test = explanation["test"]
    shown, r = test["methods"][explanation["shown_first"]], test["random"]
    chosen = ("chosen on the validation part: the largest comprehensiveness minus sufficiency of "
              f"{len(explanation['validation']['methods'])} methods" if explanation.get("validation")
              else "no validation part to choose on: the first of exact contributions, integrated gradients, "
                   "gradient-weighted relevance, gradient x input, attention that applies")
    lines = [f"explanation shown first: {explanation['title']} ({chosen})",
             f"  faithfulness on the test part (n={test['n']}, ERASER AOPC): comprehensiveness "
             f"{shown['comprehensiveness']:.3f} (random order {r['comprehensiveness']:.3f}; higher is better), "
             f"sufficiency {shown['sufficiency']:.3f} (random order {r['sufficiency']:.3f}; lower is better)"]
    if "attention" in test["methods"] and explanation["shown_first"] != "attention":
        a = test["methods"]["attention"]
        lines.append(f"  raw attention: comprehensiveness {a['comprehensiveness']:.3f}, "
                     f"sufficiency {a['sufficiency']:.3f}")
    return lines


def _words_title(explanation: dict[str, Any]) -> str:
    where = ("mean per test document predicted as the class that holds the word, over the words in at least 1% "
             "of those documents")
    if explanation["words_method"] == "contributions":
        return f"exact contributions: each word's push toward the class over the mean of the classes, {where}"
    return f"{explanation['words_method']} scores for the class, {where}"


def chunked_line(test: dict[str, Any], n: int) -> str:
    """How many of the ``n`` test documents a model reading long documents in chunks read that way."""
    return f"documents longer than max_len, read in overlapping chunks: {test['chunked_documents']} of {n}"


def format_report(test: dict[str, Any], analysis: dict[str, Any], base: dict[str, Any] | None) -> str:
    """``report.txt``: the test scores (beside the baseline, if given) and :func:`results_analysis`."""
    from attnkit.train.tasks.classify.inference import format_ngrams

    labels = analysis["labels"]
    width = max(10, *(len(lb) + 2 for lb in labels))
    metric = analysis.get("metric", "accuracy")
    lines = [f"attnkit train: results on the test part (n={analysis['n']})", *headline_lines(test, metric), ""]
    if base is not None:
        lines += [*comparison_lines(test, base, metric), ""]
    if "chunked_documents" in test:
        lines += [chunked_line(test, analysis["n"]), ""]
    lines += ["per class", f"{'class':<{width}}{'precision':>10}{'recall':>10}{'F1':>10}{'support':>10}"]
    lines += [f"{c['label']:<{width}}{c['precision']:>10.4f}{c['recall']:>10.4f}{c['f1']:>10.4f}{c['support']:>10}"
              for c in analysis["per_class"]]
    lines += ["", "confusion matrix (rows: true, columns: predicted)",
              " " * width + "".join(f"{lb[:width - 1]:>{width}}" for lb in labels)]
    lines += [f"{lb:<{width}}" + "".join(f"{v:>{width}}" for v in row)
              for lb, row in zip(labels, analysis["confusion_matrix"], strict=True)]
    explanation = analysis.get("explanation")
    if explanation:
        lines += ["", *explanation_lines(explanation), "",
                  f"words that moved the decision most per class ({_words_title(explanation)})"]
        lines += [f"  {c}: " + ", ".join(f"{t} ({m:+.2f})" for t, m in rows)
                  for c, rows in explanation["words"].items()]
    lines += ["", "raw attention: most attended words per class (true class; mean pooling attention per document)"]
    if analysis["most_attended"] is None:
        lines.append("  (this model has no pooling attention)")
    else:
        for c, rows in analysis["most_attended"].items():
            lines.append(f"  {c}: " + ", ".join(f"{t} ({m:.3f})" for t, m in rows))
    if analysis.get("top_ngrams"):
        lines += ["", f"n-grams weighed most toward each class (the n-gram half; {NGRAM_WEIGHT})"]
        lines += [f"  {c}: " + format_ngrams(rows)
                  for c, rows in analysis["top_ngrams"].items()]
    lines += ["", "most confidently wrong test examples (with the words that moved them most, and their most "
              "attended words)"]
    if not analysis["confidently_wrong"]:
        lines.append("  (none: every test example is classified correctly)")
    for k, e in enumerate(analysis["confidently_wrong"], 1):
        text = e["text"] if len(e["text"]) <= 300 else e["text"][:297] + "..."
        lines.append(f"{k}. true {e['label']}, predicted {e['predicted']} ({e['probability']:.3f}): {text}")
        if e.get("moved"):
            lines.append("   moved: " + ", ".join(f"{t} ({w:+.2f})" for t, w in e["moved"]))
        if e["attended"]:
            lines.append("   attended: " + ", ".join(f"{t} ({w:.2f})" for t, w in e["attended"]))
    return "\n".join(lines) + "\n"


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def report_sections(test: dict[str, Any], analysis: dict[str, Any], base: dict[str, Any] | None
                    ) -> list[dict[str, Any]]:
    """:func:`format_report`'s figures as summary sections of :func:`attnkit.viz.report.render_html`."""
    from attnkit.train.tasks.classify.inference import format_ngrams

    labels = analysis["labels"]
    from attnkit.train.metrics import METRICS, metric_title

    metric = analysis.get("metric", "accuracy")
    columns = [m for m in dict.fromkeys((metric, *METRICS)) if measure(test, m) is not None
               and (base is None or measure(base, m) is not None)]
    scores = [["model", *(f"{measure(test, m):.4f}" for m in columns)]]
    text = [f"test part: n={analysis['n']}", headline_lines(test, metric)[0]]
    if base is not None:
        from attnkit.train.tasks.classify.baseline import BASELINE_NAME

        scores += [["baseline", *(f"{measure(base, m):.4f}" for m in columns)],
                   ["difference", *(_signed(measure(test, m) - measure(base, m)) for m in columns)]]  # type: ignore[operator]
        text.append(f"baseline: {BASELINE_NAME} (C=4{_weighting(base)}) on the same test part (n={base['n']})")
    if "chunked_documents" in test:
        text.append(chunked_line(test, analysis["n"]))
    sections = [
        {"title": "Results on the test part", "text": text, "columns": ["", *(metric_title(m) for m in columns)],
         "rows": scores},
        {"title": "Per class", "columns": ["class", "precision", "recall", "F1", "support"],
         "rows": [[c["label"], f"{c['precision']:.4f}", f"{c['recall']:.4f}", f"{c['f1']:.4f}", c["support"]]
                  for c in analysis["per_class"]]},
        {"title": "Confusion matrix", "text": ["rows: true class, columns: predicted class"],
         "columns": ["", *labels], "rows": [[lb, *row] for lb, row in zip(labels, analysis["confusion_matrix"],
                                                                          strict=True)]}]
    explanation = analysis.get("explanation")
    if explanation:
        test_part = explanation["test"]
        sections.append({"title": f"Explanation shown first: {explanation['title']}",
                         "text": [*explanation_lines(explanation), "raw attention: the views below"],
                         "columns": ["method", "comprehensiveness (higher is better)",
                                     "sufficiency (lower is better)"],
                         "rows": [[m, f"{v['comprehensiveness']:.3f}", f"{v['sufficiency']:.3f}"]
                                  for m, v in test_part["methods"].items()]
                         + [["random order (control)", f"{test_part['random']['comprehensiveness']:.3f}",
                             f"{test_part['random']['sufficiency']:.3f}"]]})
        sections.append({"title": "Words that moved the decision most per class", "text": [_words_title(explanation)],
                         "columns": ["class", "words"],
                         "rows": [[c, ", ".join(f"{t} ({m:+.2f})" for t, m in rows)]
                                  for c, rows in explanation["words"].items()]})
    attended = analysis["most_attended"]
    sections.append({"title": "Raw attention: most attended words per class",
                     "text": ["true class; mean pooling attention per document"] if attended is not None
                     else ["this model has no pooling attention"],
                     "columns": ["class", "words"] if attended is not None else [],
                     "rows": [[c, ", ".join(f"{t} ({m:.3f})" for t, m in rows)] for c, rows in attended.items()]
                     if attended is not None else []})
    if analysis.get("top_ngrams"):
        sections.append({"title": "N-grams weighed most toward each class",
                         "text": [f"the n-gram half; {NGRAM_WEIGHT}"],
                         "columns": ["class", "n-grams"],
                         "rows": [[c, format_ngrams(rows)]
                                  for c, rows in analysis["top_ngrams"].items()]})
    wrong = analysis["confidently_wrong"]
    sections.append({"title": "Most confidently wrong test examples",
                     "text": [] if wrong else ["none: every test example is classified correctly"],
                     "columns": ["#", "true", "predicted", "probability", "text", "moved", "attended"]
                     if wrong else [],
                     "rows": [[k, e["label"], e["predicted"], f"{e['probability']:.3f}", _short(e["text"]),
                               ", ".join(f"{t} ({w:+.2f})" for t, w in e.get("moved", ())),
                               ", ".join(f"{t} ({w:.2f})" for t, w in e["attended"])]
                              for k, e in enumerate(wrong, 1)]})
    return sections


def write_html_report(path: Path, test: dict[str, Any], analysis: dict[str, Any],
                      base: dict[str, Any] | None) -> Path:
    """:func:`html_report` written atomically to ``path``."""
    from attnkit.train.runs.fileops import atomic_write_text

    atomic_write_text(path, html_report(test, analysis, base))
    return path


def html_report(test: dict[str, Any], analysis: dict[str, Any], base: dict[str, Any] | None) -> str:
    """``report.html``: :func:`report_sections` above the attention report of the confidently wrong
    examples (each document's pooling attention over its tokens)."""
    import numpy as np

    from attnkit.viz.report import render_html, report_data

    shown = [e for e in analysis["confidently_wrong"] if e.get("weights")]
    if shown:
        t = max(len(e["tokens"]) for e in shown)
        pooled = np.zeros((len(shown), 1, 1, 1, t), np.float32)  # (B, L=1, H=1, Tq=1, Tk)
        for b, e in enumerate(shown):
            pooled[b, 0, 0, 0, : len(e["tokens"])] = e["weights"]
        data = report_data([["[document]"] for _ in shown], pooled, source_tokens=[e["tokens"] for e in shown],
                           title="attnkit train: results on the test part",
                           predictions=[{"label": e["predicted"], "probability": e["probability"]} for e in shown],
                           example_names=[f"{k}. true {e['label']}" for k, e in enumerate(shown, 1)])
    else:  # nothing wrong, or no pooling attention: the page carries the tables only
        data = report_data(["[document]"], np.ones((1, 1, 1, 1), np.float32), source_tokens=["(none)"],
                           title="attnkit train: results on the test part",
                           example_names=["no wrong example with attention"])
    return render_html(data, report_sections(test, analysis, base))


# --- attnkit baseline --------------------------------------------------------------------------
