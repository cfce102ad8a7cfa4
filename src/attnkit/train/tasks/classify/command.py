"""The classifiers' own commands, generated from the trees here (:func:`attnkit.cli.train.served_command`):
``attnkit predict``, ``evaluate`` and ``report`` read a run, ``cv`` cross-validates, ``baseline`` scores the
baseline alone and ``demo`` trains the demo's run; each function returns (or yields) the lines the
command prints and says its notices through :class:`~attnkit.train.registry.Say`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit._checks import MAX_SEED, setting, setting_of, shown
from attnkit.data.readers import ReaderSettings
from attnkit.train.config import TrainConfig
from attnkit.train.registry import Say, allow_unfinished
from attnkit.train.tasks.classify.settings import ClassifyData

__all__ = ["PredictCommand", "EvaluateCommand", "ReportCommand", "BaselineCommand", "DemoCommand", "predict_command",
           "evaluate_command", "report_command", "cv_command", "baseline_command", "demo_command",
           "texts_to_classify", "truncation_line", "load_classifier"]

Warn = Callable[[str], None]


def _run() -> Any:
    return setting("", "The classification run.", argument=True, required=True, path="dir")


def load_classifier(run: str, allow_unfinished: bool, warn: Warn) -> Any:
    """The :class:`~attnkit.train.tasks.classify.predictor.Predictor` of run ``run`` (either backend): an
    unfinished run is refused, or served with its notice said through ``warn``; a run of another task is refused
    naming the command that serves it."""
    from attnkit.train.tasks.classify.predictor import Predictor

    predictor = Predictor.from_pretrained(run, allow_unfinished=allow_unfinished)
    if predictor.notice:
        warn(predictor.notice)
    return predictor


# --- predict -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredictCommand:
    """Classify texts with a trained run.

    \b
    Example:
      attnkit predict runs/reviews "a quietly moving film" --explain
    """

    run: str = _run()
    texts: tuple[str, ...] = setting((), "Texts to classify.", argument=True, multiple=True)
    text_file: str | None = setting(None, "Classify the texts of this file as well: the --text-field column of a "
                                          ".csv, .tsv or .jsonl file, every non-empty line of any other.",
                                    flag="--file", path="file")
    text_field: str = setting("text", "Text column/field of a --file .csv/.tsv/.jsonl.")
    delimiter: str | None = setting(None, "Column separator of a --file .csv/.tsv, e.g. ';' or tab.", metavar="CHAR")
    encoding: str = setting("utf-8", "Text encoding of --file.")
    explain: bool = setting(False, "List the most attended tokens of each prediction (and, for a model with an "
                                   "n-gram half, what each half adds and the n-grams that add most).")
    top: int = setting(5, "How many tokens --explain lists.", low=1)
    as_json: bool = setting(False, "One JSON object per line.", flag="--json")
    allow_unfinished: bool = allow_unfinished()


def predict_command(s: PredictCommand, say: Say) -> Iterator[str]:
    """Each text's label, probability and text (``as_json``: a JSON object), and with ``explain`` its
    explanation, its most attended tokens and, for a model with an n-gram half, what each half adds and the
    n-grams that add most (a NumPy run's predictions have only the tokens: nothing that needs torch is imported
    for them)."""
    from attnkit.train.runs.resume import PlanError

    items = list(s.texts)
    if s.text_file:
        items += texts_to_classify(s.text_file, say.warn, encoding=s.encoding, text_field=s.text_field,
                                   delimiter=s.delimiter)
    if not items:
        raise PlanError("give at least one TEXT argument or `text_file`")
    predictor = load_classifier(s.run, s.allow_unfinished, say.warn)
    if predictor.tokenizer is not None and (notice := truncation_line(predictor.tokenizer, items,
                                                                      predictor.read_len)):
        say.warn(notice)  # a NumPy run reads whitespace-split words
    top = s.top if s.explain else 0
    for p in predictor.explain(items, top=top):
        if s.as_json:
            yield json.dumps(p.fields())
            continue
        yield f"{shown(p.label)}\t{p.probability:.3f}\t{shown(p.text)}"
        if top and p.explanation:
            from attnkit.attribution.report import explanation_line

            yield shown("    " + explanation_line(p.explanation, top, s.run))
        if top:
            yield shown("    attended: " + ", ".join(f"{tok} ({w:.2f})" for tok, w in p.top_tokens))
        if top and p.halves:
            from attnkit.train.tasks.classify.inference import format_ngrams

            yield (f"    margin from the network {p.halves['network']:+.2f}, "
                   f"from n-grams {p.halves['ngrams']:+.2f}: " + shown(format_ngrams(p.top_ngrams)))


def texts_to_classify(path: str | Path, warn: Warn, *, encoding: str = "utf-8", text_field: str = "text",
                      delimiter: str | None = None) -> list[str]:
    """The texts of a file given to ``predict --file``: the ``--text-field`` column of a .csv/.tsv/.jsonl
    (never its header or its label column; a note says which column was read), else every non-empty line, with
    a warning when the first line looks like a header of columns (both through ``warn``)."""
    from attnkit.data.readers import format_from_name, read_text_lines, read_texts, sniff_delimiter

    p = Path(path)
    fmt = format_from_name(p)
    if fmt in ("csv", "tsv", "jsonl"):
        texts = read_texts(p, format=fmt, encoding=encoding, text_field=text_field, delimiter=delimiter)
        warn(f"note: classifying the {text_field!r} {'field' if fmt == 'jsonl' else 'column'} of {p} "
             f"({len(texts)} texts)")
        return texts
    lines = [line for line in read_text_lines(p, encoding, encoding_flag="--encoding") if line.strip()]
    if lines and sniff_delimiter(lines[0], [text_field], "") is not None and lines[0].count(" ") == 0:
        warn(f"warning: the first line of {p}, {lines[0][:60]!r}, looks like a header of columns; --file "
             f"classifies every line of a plain text file as one text (a .csv, .tsv or .jsonl file is read by "
             f"its --text-field column)")
    return lines


def truncation_line(tokenizer: Any, texts: Sequence[str], max_len: int) -> str | None:
    """:func:`~attnkit.data.readers.truncation_notice` for a run's tokenizer and ``max_len``, counting tokens as
    :func:`attnkit.data.tokenization.encode_batch` does (no special tokens), so ``kept`` is what the run's
    model sees."""
    from attnkit.data.readers import truncation_notice
    from attnkit.data.tokenization import tokenizable

    encodings = tokenizer.encode_batch(tokenizable(texts), add_special_tokens=False)
    counts = [(min(len(e.ids), max_len), len(e.ids)) for e in encodings]
    return truncation_notice(counts, what=f"the run's maximum length, {max_len}")


# --- evaluate ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluateCommand:
    """Score a trained run on labelled data: accuracy, macro-F1, confusion matrix.

    \b
    Example:
      attnkit evaluate runs/reviews --data test.csv
      attnkit evaluate runs/reviews --data test.csv --faithfulness --json > scores.json
    """

    run: str = _run()
    data: str | None = setting(None, "Labelled data to score.", path="any", required=True)
    reader: ReaderSettings = dataclasses.field(default_factory=ReaderSettings)
    as_json: bool = setting(False, "Print the metrics as JSON.", flag="--json")
    faithfulness: bool = setting(False, "Also score how faithful each explanation method is on --data: "
                                        "comprehensiveness and sufficiency (ERASER AOPC) beside a random-order "
                                        "control.")
    allow_unfinished: bool = allow_unfinished()


def evaluate_command(s: EvaluateCommand, say: Say) -> Iterator[str]:
    """The run's metrics on ``data`` (``as_json``: as JSON), with ``faithfulness`` each explanation method's."""
    from attnkit.train.metrics import metrics_lines

    predictor = load_classifier(s.run, s.allow_unfinished, say.warn)
    if s.faithfulness and predictor.backend == "numpy":
        raise ValueError(f"`faithfulness` needs a torch run; {s.run} is a NumPy run (attnkit train --backend "
                         "numpy), whose model has no gradients or exact contributions to score")
    assert s.data is not None  # a required flag
    examples = s.reader.read(s.data, say.warn)
    texts = [e.text for e in examples]
    metrics = predictor.evaluate(texts, [e.label for e in examples], progress=True)
    if s.faithfulness:
        from attnkit.attribution.faithfulness import text_faithfulness

        metrics["faithfulness"] = text_faithfulness(predictor.model, predictor.tokenizer, texts,
                                                    max_len=predictor.max_len)
    if s.as_json:
        yield json.dumps(metrics, indent=2)
        return
    yield from metrics_lines(f"{s.run} on {s.data}", metrics, predictor.labels)
    if s.faithfulness:
        from attnkit.attribution.faithfulness import format_table

        yield from format_table(metrics["faithfulness"])


# --- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportCommand:
    """Write report.txt and report.html of a trained run, as train does when training ends.

    The test part is split again from the run's own data, so the reports
    are those train writes. For a run interrupted after its training ended,
    before the reports were written (with --allow-unfinished, also for a run
    whose training did not finish: its best weights so far).

    \b
    Example:
      attnkit report runs/reviews
    """

    run: str = _run()
    data: str | None = setting(None, "The run's training data, if it has moved (default: where the run read it; "
                                     "the content must be the same).", path="any")
    val_path: str | None = setting(None, "The run's --val file, if it has moved.", path="any", flag="--val")
    test_path: str | None = setting(None, "The run's --test file, if it has moved.", path="any", flag="--test")
    allow_unfinished: bool = allow_unfinished()


def report_command(s: ReportCommand, say: Say) -> Iterator[str]:
    """Write the run's reports; the line saying so."""
    from attnkit.train.tasks.classify import start
    from attnkit.train.tasks.classify.reports import result_of_run, write_reports
    from attnkit.train.tasks.classify.training import REPORTS_WRITTEN

    out = Path(s.run)
    predictor = load_classifier(s.run, s.allow_unfinished, say.warn)
    if predictor.backend == "numpy":
        raise ValueError(f"{s.run} is a NumPy run (attnkit train --backend numpy), which has no reports")
    meta = predictor.config
    values: dict[str, Any] = {"data": s.data, "val_path": s.val_path, "test_path": s.test_path}
    values.update(start.resumed_data_source(meta.get("data") or {}, values, out))
    reader = ReaderSettings.of(values).kwargs(say.warn)
    result = result_of_run(out, predictor, start.data_plan(values, out, reader))
    write_reports(out, result, meta["train_config"].get("metric", "accuracy"),
                  (meta.get("metrics") or {}).get("baseline"))
    yield REPORTS_WRITTEN.format(out=out)


# --- cv ----------------------------------------------------------------------------------------


def cv_command(values: dict[str, Any], say: Say) -> Iterator[str]:
    """Cross-validate on ``values["data"]`` (the flags of :class:`~attnkit.train.tasks.classify.settings.CvCommand`
    by name, its recipe deciding what is not given): each fold's progress said, then the means (with
    ``baseline`` the baseline's beside them); the fold results written to ``out_json``."""
    from attnkit.train.runs.checkpoint import atomic_write_json
    from attnkit.train.tasks.classify import start
    from attnkit.train.tasks.classify.pipeline import cross_validate
    from attnkit.train.tasks.classify.reports import cv_summary

    start.require_baseline(values)
    settings = start.cv_settings(values, values["model_opt"])
    examples = ReaderSettings.of(values).read(values["data"], say.warn)
    results = cross_validate(examples, folds=values["folds"], val=values["val_ratio"], max_folds=values["max_folds"],
                             max_memory=values["max_memory"], quiet=values["quiet"], log=say.log, **settings)
    train_config = settings["train_config"]
    lines, record = cv_summary(examples, results, folds=values["folds"], seed=train_config.seed,
                               max_folds=values["max_folds"], metric=train_config.metric,
                               class_weight=train_config.class_weight, baseline=values["baseline"])
    yield from lines
    if values["out_json"]:
        atomic_write_json(values["out_json"], {"model": settings["model_name"], **record})


# --- baseline ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineSplit:
    """The split or folds the baseline is scored on, as ``train`` and ``cv`` make them."""

    folds: int | None = setting(None, "Cross-validate on the folds of attnkit cv --folds K instead of train's split.",
                                low=2)
    max_folds: int | None = setting(None, "With --folds: only the first N folds.", low=1)
    seed: int | None = setting(None, "The split or fold seed (train's and cv's --seed).", low=0, high=MAX_SEED,
                               default_from="attnkit.train.config:TrainConfig.seed")
    class_weight: str = setting_of(TrainConfig, "class_weight")  # the field train's and cv's --class-weight set


@dataclass(frozen=True)
class BaselineCommand:
    """Score TF-IDF 1-2-grams + logistic regression on train's split or cv's folds.

    \b
    Examples:
      attnkit baseline --data reviews.csv
      attnkit baseline --data path/to/mr --encoding latin-1 --folds 10
    """

    data: ClassifyData = dataclasses.field(default_factory=ClassifyData)  # the data flags of attnkit train
    split: BaselineSplit = dataclasses.field(default_factory=BaselineSplit)


def baseline_command(s: BaselineCommand, say: Say) -> Iterator[str]:
    """The baseline (:mod:`attnkit.train.tasks.classify.baseline`) scored on the test examples a model is: the test
    part of ``train``'s seeded split, or each fold of ``cv`` (``train --baseline`` and ``cv --baseline`` print it
    beside the model, :mod:`attnkit.train.tasks.classify.reports`)."""
    import statistics

    from attnkit._lazy import require_extra
    from attnkit.train.metrics import metrics_lines
    from attnkit.train.runs.resume import PlanError

    data, split = s.data, s.split
    if data.data is None:
        raise PlanError("Missing option '--data'.")
    require_extra("attnkit baseline", "sklearn")
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME, fold_baselines, split_baseline
    from attnkit.train.tasks.classify.reports import fold_mean_line

    seed = TrainConfig.seed if split.seed is None else split.seed
    reader = data.kwargs(say.warn)
    if split.folds is None:
        from attnkit.data.sources import DataSource

        source = DataSource(train=data.data, val=data.val_path, test=data.test_path, val_ratio=data.val_ratio,
                            test_ratio=data.test_ratio, reader=reader)
        scores = split_baseline(source, seed=seed, class_weight=split.class_weight)
        yield from metrics_lines(f"baseline ({BASELINE_NAME}, C=4) on train's test part", scores, scores["labels"])
        return
    if data.val_path or data.test_path:
        raise PlanError("--folds splits --data itself; it takes no --val or --test")
    rows = fold_baselines(data.read(data.data, say.warn), folds=split.folds, seed=seed,
                          max_folds=split.max_folds, class_weight=split.class_weight)
    for r in rows:
        yield f"fold {r['fold']:>2}/{split.folds}  accuracy {r['accuracy']:.4f}  macro-F1 {r['macro_f1']:.4f}"
    yield (fold_mean_line(f"baseline ({BASELINE_NAME}, C=4) ", rows)
           + f"  macro-F1 {statistics.mean(r['macro_f1'] for r in rows):.4f}")


# --- demo --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoCommand:
    """Train an attention classifier on a generated keyword corpus and show where it looks.

    Prints the test accuracy and the attention focus (mean share of the
    pooling attention on the key words), and writes a checkpoint,
    report.txt (the words that moved the decision most per class, then raw
    attention's most attended words), report.html (the offline
    interactive attention report) and explanation.png to --out.
    """

    out: str = setting("runs/demo", "Run directory for the checkpoint and report.txt.", path="new-dir")
    quick: bool = setting(False, "A smaller corpus and fewer epochs (for tests).")
    seed: int = setting(0, "Corpus and training seed.", low=0, high=MAX_SEED)
    overwrite: bool = setting(False, "Replace a run in --out that the demo did not write (its own earlier run is "
                                     "replaced anyway).")
    quiet: bool = setting(False, "No progress bar or per-epoch lines.", short="-q")


def demo_command(s: DemoCommand, say: Say) -> Iterator[str]:
    """Train the demo's run (:mod:`attnkit.train.tasks.classify.demo`); what it found, and what it wrote."""
    from attnkit._lazy import require_extra
    from attnkit.train.runs.rundir import committed_dir

    require_extra("attnkit demo", "matplotlib")  # its explanation.png, written after training
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME
    from attnkit.train.tasks.classify.demo import run_demo

    summary = run_demo(Path(s.out), quick=s.quick, seed=s.seed, overwrite=s.overwrite, quiet=s.quiet, log=say.log,
                       notice=say.warn)
    base = summary["baseline"]
    beside = (f"  ({BASELINE_NAME} on the same split: {base['accuracy']:.4f})" if base
              else "  (no baseline: pip install 'attnkit[tasks]')")
    yield f"test accuracy     {summary['accuracy']:.4f}{beside}"
    yield f"attention focus   {summary['focus']:.4f}  (share of pooling attention on the key words)"
    for c, rows in summary["moved"].items():
        yield f"words that moved the decision most ({c}): " + ", ".join(t for t, _ in rows[:5])
    for c, rows in summary["table"].items():
        yield f"raw attention, most attended ({c}): " + ", ".join(t for t, _ in rows[:5])
    checkpoint = committed_dir(s.out).relative_to(Path(s.out))
    yield (f"wrote {s.out}/ (report.txt, report.html, explanation.png; the checkpoint in {checkpoint}/) "
           f"in {summary['seconds']:.1f}s")
