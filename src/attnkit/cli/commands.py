"""``attnkit evaluate``, ``predict``, ``cv`` and ``report`` (``train`` is generated: :mod:`attnkit.cli.train`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from attnkit._lazy import require_extra
from attnkit.cli.inputs import read_data, read_texts_to_classify, warn_truncated
from attnkit.cli.messages import echo, friendly_errors, in_flags, print_metrics, shown
from attnkit.cli.options import (
    allow_unfinished_option,
    config_option,
    load_classifier,
    memory_option,
    parse_model_options,
    reader_kwargs,
    reader_options,
    settings_options,
)
from attnkit.train.tasks.classify import start
from attnkit.train.tasks.classify.settings import CvCommand

# --- report ------------------------------------------------------------------------------------


@click.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--data", type=click.Path(exists=True),
              help="The run's training data, if it has moved (default: where the run read it; the content "
                   "must be the same).")
@click.option("--val", "val_path", type=click.Path(exists=True), help="The run's --val file, if it has moved.")
@click.option("--test", "test_path", type=click.Path(exists=True), help="The run's --test file, if it has moved.")
@allow_unfinished_option
@friendly_errors
def report(run: str, allow_unfinished: bool, **values: Any) -> None:
    """Write report.txt and report.html of a trained run, as train does when training ends.

    The test part is split again from the run's own data, so the reports
    are those train writes. For a run interrupted after its training ended,
    before the reports were written (with --allow-unfinished, also for a run
    whose training did not finish: its best weights so far).

    \b
    Example:
      attnkit report runs/reviews
    """
    from attnkit.train.tasks.classify.reports import result_of_run, write_reports
    from attnkit.train.tasks.classify.training import REPORTS_WRITTEN

    out = Path(run)
    predictor = load_classifier(run, allow_unfinished)
    if predictor.backend == "numpy":
        raise click.ClickException(f"{run} is a NumPy run (attnkit train --backend numpy), which has no reports")
    meta = predictor.config
    try:
        values.update(start.resumed_data_source(meta.get("data") or {}, values, out))
    except start.PlanError as err:
        raise click.UsageError(in_flags(str(err))) from None
    result = result_of_run(out, predictor, start.data_plan(values, out, reader_kwargs(values)))
    write_reports(out, result, meta["train_config"].get("metric", "accuracy"),
                  (meta.get("metrics") or {}).get("baseline"))
    click.echo(REPORTS_WRITTEN.format(out=out))


# --- evaluate ----------------------------------------------------------------------------------


@click.command()
@config_option
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--data", required=True, type=click.Path(exists=True), help="Labelled data to score.")
@reader_options
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option("--faithfulness", is_flag=True,
              help="Also score how faithful each explanation method is on --data: comprehensiveness and "
                   "sufficiency (ERASER AOPC) beside a random-order control.")
@allow_unfinished_option
@friendly_errors
def evaluate(run: str, data: str, as_json: bool, faithfulness: bool, allow_unfinished: bool,
             **values: Any) -> None:
    """Score a trained run on labelled data: accuracy, macro-F1, confusion matrix.

    \b
    Example:
      attnkit evaluate runs/reviews --data test.csv
      attnkit evaluate runs/reviews --data test.csv --faithfulness --json > scores.json
    """
    predictor = load_classifier(run, allow_unfinished)
    if faithfulness and predictor.backend == "numpy":
        raise click.ClickException(f"--faithfulness needs a torch run; {run} is a NumPy run (attnkit train --backend "
                                   "numpy), whose model has no gradients or exact contributions to score")
    examples = read_data(data, values)
    texts = [e.text for e in examples]
    metrics = predictor.evaluate(texts, [e.label for e in examples], progress=True)
    if faithfulness:
        from attnkit.attribution.faithfulness import format_table, text_faithfulness

        metrics["faithfulness"] = text_faithfulness(predictor.model, predictor.tokenizer, texts,
                                                    max_len=predictor.max_len)
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
        return
    print_metrics(f"{run} on {data}", metrics, predictor.labels)
    if faithfulness:
        click.echo("\n".join(format_table(metrics["faithfulness"])))


# --- predict -----------------------------------------------------------------------------------


@click.command()
@config_option
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.argument("texts", nargs=-1)
@click.option("--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="Classify the texts of this file as well: the --text-field column of a .csv, .tsv or .jsonl "
                   "file, every non-empty line of any other.")
@click.option("--text-field", default="text", show_default=True, help="Text column/field of a --file .csv/.tsv/.jsonl.")
@click.option("--delimiter", metavar="CHAR", help="Column separator of a --file .csv/.tsv, e.g. ';' or tab.")
@click.option("--encoding", default="utf-8", show_default=True, help="Text encoding of --file.")
@click.option("--explain", is_flag=True,
              help="List the most attended tokens of each prediction (and, for a model with an n-gram half, "
                   "what each half adds and the n-grams that add most).")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many tokens --explain lists.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@allow_unfinished_option
@friendly_errors
def predict(run: str, texts: tuple[str, ...], text_file: str | None, text_field: str, delimiter: str | None,
            encoding: str, explain: bool, top: int, as_json: bool, allow_unfinished: bool) -> None:
    """Classify texts with a trained run.

    \b
    Example:
      attnkit predict runs/reviews "a quietly moving film" --explain
    """
    items = list(texts)
    if text_file:
        items += read_texts_to_classify(text_file, encoding=encoding, text_field=text_field, delimiter=delimiter)
    if not items:
        raise click.UsageError("give at least one TEXT argument or --file")
    predictor = load_classifier(run, allow_unfinished)
    if predictor.tokenizer is not None:  # a NumPy run reads whitespace-split words
        warn_truncated(predictor.tokenizer, items, predictor.read_len)
    predictions = predictor.explain(items, top=top if explain else 0)
    _print_predictions(predictions, run, top if explain else 0, as_json)


def _print_predictions(predictions: list[Any], run: str, top: int, as_json: bool) -> None:
    """Each prediction as a JSON line, or as its label line and, explained (``top``), its explanation, its most
    attended tokens and, for a model with an n-gram half, what each half adds and the n-grams that add most
    (a NumPy run's predictions have only the tokens: nothing that needs torch is imported for them)."""
    for p in predictions:
        if as_json:
            click.echo(json.dumps(p.fields()))
            continue
        click.echo(f"{shown(p.label)}\t{p.probability:.3f}\t{shown(p.text)}")
        if top and p.explanation:
            from attnkit.attribution.report import explanation_line

            click.echo(shown("    " + explanation_line(p.explanation, top, run)))
        if top:
            click.echo(shown("    attended: " + ", ".join(f"{tok} ({w:.2f})" for tok, w in p.top_tokens)))
        if top and p.halves:
            from attnkit.train.tasks.classify.inference import format_ngrams

            click.echo(f"    margin from the network {p.halves['network']:+.2f}, "
                       f"from n-grams {p.halves['ngrams']:+.2f}: " + shown(format_ngrams(p.top_ngrams)))


# --- cv ----------------------------------------------------------------------------------------


@click.command()
@config_option
@settings_options(CvCommand)
@click.option("--json", "out_json", type=click.Path(dir_okay=False), help="Also write the fold results here.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@memory_option
@click.pass_context
@friendly_errors
def cv(ctx: click.Context, **values: Any) -> None:
    """Stratified k-fold cross-validation; prints per-fold and mean accuracy.

    \b
    Example:
      attnkit cv --data path/to/mr --encoding latin-1 --folds 10
    """
    from attnkit.train.runs.checkpoint import atomic_write_json
    from attnkit.train.tasks.classify.pipeline import cross_validate
    from attnkit.train.tasks.classify.reports import cv_summary

    if values["baseline"]:  # before any work: the data is not read, nothing is trained
        require_extra("--baseline", "sklearn")
    try:
        settings = start.cv_settings(values, parse_model_options(ctx, values["model_opt"]))
    except start.PlanError as err:
        raise click.UsageError(in_flags(str(err))) from None
    examples = read_data(values["data"], values)
    results = cross_validate(examples, folds=values["folds"], val=values["val_ratio"], max_folds=values["max_folds"],
                             max_memory=values["max_memory"], quiet=values["quiet"], log=echo, **settings)
    train_config = settings["train_config"]
    lines, record = cv_summary(examples, results, folds=values["folds"], seed=train_config.seed,
                               max_folds=values["max_folds"], metric=train_config.metric,
                               class_weight=train_config.class_weight, baseline=values["baseline"])
    click.echo("\n".join(lines))
    if values["out_json"]:
        atomic_write_json(values["out_json"], {"model": settings["model_name"], **record})
