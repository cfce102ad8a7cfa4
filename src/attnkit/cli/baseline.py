"""``attnkit baseline``: the baseline (:mod:`attnkit.train.tasks.classify.baseline`: TF-IDF word 1–2-grams +
logistic regression) scored on the same test examples as a model: the test part of ``train``'s seeded split,
or each fold of ``cv``. ``train --baseline`` and ``cv --baseline`` print it beside the model
(:mod:`attnkit.train.tasks.classify.reports`)."""

from __future__ import annotations

import statistics
from typing import Any

import click

from attnkit._lazy import require_extra
from attnkit.cli.inputs import read_data
from attnkit.cli.messages import friendly_errors, print_metrics
from attnkit.cli.options import (
    SEED,
    LibraryDefaultOption,
    config_option,
    reader_kwargs,
    resolve_default,
    settings_options,
)
from attnkit.train.config import TrainConfig
from attnkit.train.tasks.classify.settings import ClassifyData

__all__ = ["baseline"]

SEED_DEFAULT = "attnkit.train.config:TrainConfig.seed"


@click.command()
@config_option
@settings_options(ClassifyData)  # the data flags of attnkit train, read as it reads them
@click.option("--folds", type=click.IntRange(min=2),
              help="Cross-validate on the folds of attnkit cv --folds K instead of train's split.")
@click.option("--max-folds", type=click.IntRange(min=1), help="With --folds: only the first N folds.")
@click.option("--seed", type=SEED, cls=LibraryDefaultOption, default_from=SEED_DEFAULT,
              help="The split or fold seed (train's and cv's --seed).")
@settings_options(TrainConfig, only=("class_weight",))  # the field train's and cv's --class-weight set
@friendly_errors
def baseline(**values: Any) -> None:
    """Score TF-IDF 1-2-grams + logistic regression on train's split or cv's folds.

    \b
    Examples:
      attnkit baseline --data reviews.csv
      attnkit baseline --data path/to/mr --encoding latin-1 --folds 10
    """
    if values["data"] is None:
        raise click.UsageError("Missing option '--data'.")
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
