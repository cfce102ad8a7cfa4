"""``attnkit cv`` (``train`` and the other commands of a task are generated: :mod:`attnkit.cli.train`)."""

from __future__ import annotations

from typing import Any

import click

from attnkit._lazy import require_extra
from attnkit.cli.inputs import read_data
from attnkit.cli.messages import echo, friendly_errors, in_flags
from attnkit.cli.options import (
    config_option,
    memory_option,
    parse_model_options,
    settings_options,
)
from attnkit.train.tasks.classify import start
from attnkit.train.tasks.classify.settings import CvCommand

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
