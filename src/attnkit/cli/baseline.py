"""``attnkit baseline``, the baseline beside ``train`` and ``cv`` results, and a run's ``report.txt``.

The baseline (:mod:`attnkit.train.tasks.classify.baseline`: TF-IDF word 1–2-grams + logistic
regression) is scored on the same test examples as the model: the test part of
``train``'s seeded split, or each fold of ``cv``. ``--baseline`` prints it in
one table with the model and the difference; for ``cv`` per fold, with the
paired t-test over the folds.

After ``attnkit train`` the run directory also gets ``report.txt`` and
``report.html`` (the same figures as escaped tables above the offline
attention report of the wrong examples), the analysis of the finished model on
its test part: per-class precision, recall and F1, the confusion matrix, the
most attended words per class and the test examples the model gets most
confidently wrong, with the words it attended to. It is derived from the
committed model, like the demo's report, so it joins the run in a commit of its
own (:func:`attnkit.train.runs.run.add_to_run`): the finished generation again with
the reports, linked at the run's root. The baseline is scored before training
(:func:`attnkit.train.tasks.classify.plan.run_plan`) and committed in config.json as
``metrics.baseline``; the table printed here is read from there.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import click

from attnkit._lazy import require_extra
from attnkit.cli.inputs import read_data
from attnkit.cli.messages import friendly_errors, print_metrics
from attnkit.cli.options import (
    SEED,
    LibraryDefaultOption,
    config_option,
    ratio_option,
    reader_kwargs,
    reader_options,
    resolve_default,
    settings_options,
)
from attnkit.train.config import TrainConfig

__all__ = ["baseline", "after_training", "write_reports"]

SEED_DEFAULT = "attnkit.train.config:TrainConfig.seed"


def after_training(plan: Any, result: Any, baseline: bool) -> None:
    """Print the baseline beside the test result (with ``--baseline``), write ``report.txt`` and ``report.html``.

    The baseline is the one :func:`attnkit.train.tasks.classify.plan.run_plan` scored before
    training and committed as ``metrics.baseline`` in the run's config.json.
    """
    from attnkit.train.runs.checkpoint import read_run_config
    from attnkit.train.tasks.classify.reports import comparison_lines

    out = Path(plan.out)
    base = read_run_config(out).get("metrics", {}).get("baseline") if baseline else None
    if base is not None:
        for line in comparison_lines(result.test, base, plan.train_config.metric):
            click.echo(line)
    write_reports(out, result, plan.train_config.metric, base)


def write_reports(out: Path, result: Any, metric: str, base: dict[str, Any] | None) -> None:
    """:func:`attnkit.train.tasks.classify.reports.write_reports`, and the line that says so."""
    from attnkit.train.tasks.classify.reports import write_reports as write

    write(out, result, metric, base)
    click.echo(f"wrote {out / 'report.txt'} and report.html (per-class scores, the explanation shown first and "
               f"its faithfulness, words that moved the decision, confidently wrong examples)")


@click.command()
@config_option
@click.option("--data", required=True, type=click.Path(exists=True), help="Labelled data (file or folder).")
@click.option("--val", "val_path", type=click.Path(exists=True), help="Validation data, as for attnkit train.")
@click.option("--test", "test_path", type=click.Path(exists=True), help="Test data, as for attnkit train.")
@click.option("--folds", type=click.IntRange(min=2),
              help="Cross-validate on the folds of attnkit cv --folds K instead of train's split.")
@click.option("--max-folds", type=click.IntRange(min=1), help="With --folds: only the first N folds.")
@ratio_option("val", help="Share of --data that attnkit train holds out for validation (the baseline trains on it).")
@ratio_option("test", help="Share of --data held out for testing when --test is absent.")
@click.option("--seed", type=SEED, cls=LibraryDefaultOption, default_from=SEED_DEFAULT,
              help="The split or fold seed (train's and cv's --seed).")
@settings_options(TrainConfig, only=("class_weight",))  # the field train's and cv's --class-weight set
@reader_options
@friendly_errors
def baseline(**values: Any) -> None:
    """Score TF-IDF 1-2-grams + logistic regression on train's split or cv's folds.

    \b
    Examples:
      attnkit baseline --data reviews.csv
      attnkit baseline --data path/to/mr --encoding latin-1 --folds 10
    """
    require_extra("attnkit baseline", "sklearn")
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME, fold_baselines, split_baseline
    from attnkit.train.tasks.classify.reports import fold_mean_line

    seed = values["seed"] if values["seed"] is not None else resolve_default(SEED_DEFAULT)
    if values["folds"] is None:
        from attnkit.data.sources import DataSource

        source = DataSource(train=values["data"], val=values["val_path"], test=values["test_path"],
                            val_ratio=values["val_ratio"], test_ratio=values["test_ratio"],
                            reader=reader_kwargs(values))
        scores = split_baseline(source, seed=seed, class_weight=values["class_weight"])
        print_metrics(f"baseline ({BASELINE_NAME}, C=4) on train's test part", scores, scores["labels"])
        return
    if values["val_path"] or values["test_path"]:
        raise click.UsageError("--folds splits --data itself; it takes no --val or --test")
    rows = fold_baselines(read_data(values["data"], values), folds=values["folds"], seed=seed,
                          max_folds=values["max_folds"], class_weight=values["class_weight"])
    for r in rows:
        click.echo(f"fold {r['fold']:>2}/{values['folds']}  accuracy {r['accuracy']:.4f}  "
                   f"macro-F1 {r['macro_f1']:.4f}")
    click.echo(fold_mean_line(f"baseline ({BASELINE_NAME}, C=4) ", rows)
               + f"  macro-F1 {statistics.mean(r['macro_f1'] for r in rows):.4f}")
