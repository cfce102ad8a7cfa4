"""Shared command-line options and the ``--config`` file (TOML or YAML).

A config file holds option values by name (``batch_size = 64`` or
``batch-size: 64``) plus an optional ``model_options`` table for the model's
config fields. Its values become the command's defaults, so flags given on the
command line override them. A key that is not an option of the command is an
error that lists the valid keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from attnkit.data.readers import SkippedRows

import tomllib

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["allow_unfinished_option", "load_run", "task_option", "TASKS", "config_option", "read_config_file", "train_options", "data_options", "reader_options",
           "model_options", "parse_model_options", "collect_train_config", "collect_data_settings",
           "reader_kwargs", "report_skipped_rows"]

MODEL_OPTIONS_KEY = "model_options"


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.toml`` or ``.yaml``/``.yml`` file into a dict (keys with ``-`` become ``_``)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise click.BadParameter(f"{p} must end in .toml, .yaml or .yml", param_hint="--config")
    text = p.read_text(encoding="utf-8")
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except (tomllib.TOMLDecodeError, ValueError) as err:
        raise click.BadParameter(f"{p} is not valid {suffix[1:].upper()}: {err}", param_hint="--config") from None
    except Exception as err:  # yaml.YAMLError without importing yaml at module level
        raise click.BadParameter(f"{p} is not valid YAML: {' '.join(str(err).split())}",
                                 param_hint="--config") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{p} must hold a table/mapping of option values", param_hint="--config")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _apply_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    data = read_config_file(value)
    valid = sorted(p.name for p in ctx.command.params
                   if isinstance(p, click.Option) and p.name and p.name not in ("config", "model_opt"))
    allowed = valid + ([MODEL_OPTIONS_KEY] if any(p.name == "model_opt" for p in ctx.command.params) else [])
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise click.BadParameter(
            f"unknown key(s) {unknown} in {value}; valid keys: {sorted(allowed)}", param_hint="--config")
    extra = data.pop(MODEL_OPTIONS_KEY, None)
    if extra is not None and not isinstance(extra, dict):
        raise click.BadParameter(f"'{MODEL_OPTIONS_KEY}' in {value} must be a table/mapping",
                                 param_hint="--config")
    ctx.meta["attnkit.model_options"] = dict(extra or {})
    ctx.default_map = {**(ctx.default_map or {}), **data}


def config_option(f: F) -> F:
    return click.option(
        "--config", type=click.Path(exists=True, dir_okay=False), is_eager=True, expose_value=False,
        callback=_apply_config,
        help="TOML or YAML file of option values (keys as the long option names); flags override it.",
    )(f)


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def train_options(f: F) -> F:
    """Flags of :class:`attnkit.train.TrainConfig` (unset flags keep its defaults)."""
    return _stack(
        click.option("--epochs", type=click.IntRange(min=1), help="Maximum epochs [10]."),
        click.option("--batch-size", type=click.IntRange(min=1), help="Examples per step and process [32]."),
        click.option("--lr", type=float, help="Peak AdamW learning rate [1e-3]."),
        click.option("--weight-decay", type=float, help="Decoupled weight decay [0.01]."),
        click.option("--warmup-ratio", type=float, help="Share of steps with linear warmup [0.1]."),
        click.option("--clip-norm", type=float, help="Gradient-norm clipping, 0 = off [1.0]."),
        click.option("--patience", type=click.IntRange(min=0), help="Early-stopping patience in epochs, 0 = off [3]."),
        click.option("--label-smoothing", type=float, help="Cross-entropy label smoothing [0]."),
        click.option("--seed", type=click.IntRange(min=0), help="Seed for weights, dropout and batch order [0]."),
        click.option("--device", type=str, help="auto, cpu, cuda or cuda:N [auto]."),
    )(f)


def data_options(f: F) -> F:
    """Flags of :class:`attnkit.train.pipeline.DataSettings`."""
    return _stack(
        click.option("--tokenizer", type=click.Choice(["word", "wordpiece", "bpe"]), help="Tokenizer kind [word]."),
        click.option("--vocab-size", type=click.IntRange(min=1), help="Tokenizer vocabulary size [20000]."),
        click.option("--min-frequency", type=click.IntRange(min=1), help="Minimum token count [1]."),
        click.option("--max-len", type=click.IntRange(min=1), help="Truncate documents to this many tokens [256]."),
    )(f)


def reader_options(f: F) -> F:
    """How to read a data file (see :func:`attnkit.data.read_examples`)."""
    return _stack(
        click.option("--format", "data_format", type=str,
                     help="csv, tsv, jsonl, label-tab-text, label-space-text, folder or polarity "
                          "(guessed from the name when omitted)."),
        click.option("--encoding", type=str, help="Text encoding of the data [utf-8]."),
        click.option("--text-field", type=str, help="Text column/field for csv, tsv, jsonl [text]."),
        click.option("--label-field", type=str, help="Label column/field for csv, tsv, jsonl [label]."),
        click.option("--skip-bad-rows", is_flag=True,
                     help="Skip rows with an empty text or an empty or null label, and say on stderr "
                          "how many and where, instead of stopping at the first with an error."),
    )(f)


def model_options(f: F) -> F:
    return _stack(
        click.option("--model", type=str, help="Model name: document, sentiment or han [sentiment]."),
        click.option("--model-opt", multiple=True, metavar="KEY=VALUE",
                     help="A model config field, e.g. --model-opt d_model=128 (repeatable)."),
    )(f)


def parse_model_options(ctx: click.Context, pairs: tuple[str, ...]) -> dict[str, Any]:
    """The config file's ``model_options`` updated by ``--model-opt KEY=VALUE`` flags (JSON values)."""
    options = dict(ctx.meta.get("attnkit.model_options", {}))
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--model-opt")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return options


_TRAIN_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "warmup_ratio", "clip_norm", "patience",
               "label_smoothing", "seed", "device")
_DATA_KEYS = ("tokenizer", "vocab_size", "min_frequency", "max_len")


def collect_train_config(values: dict[str, Any], **defaults: Any) -> Any:
    """A TrainConfig from the given (non-None) option values over ``defaults``."""
    from attnkit.train.config import TrainConfig

    given = {k: values[k] for k in _TRAIN_KEYS if values.get(k) is not None}
    return TrainConfig.from_dict({**defaults, **given})


def collect_data_settings(values: dict[str, Any], **defaults: Any) -> Any:
    from attnkit.train.pipeline import DataSettings

    given = {k: values[k] for k in _DATA_KEYS if values.get(k) is not None}
    return DataSettings(**{**defaults, **given})


def report_skipped_rows(report: SkippedRows) -> None:
    """Print a :class:`attnkit.data.readers.SkippedRows` as one line on stderr.

    ``skipped 3 bad row(s) in data.csv: line 4 (empty text), line 9 (empty label), ...``
    -- the first five positions, then ``…``.
    """
    click.echo(report.summary(limit=5), err=True)


def reader_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``read_examples`` from the reader options that were given.

    ``--skip-bad-rows`` adds ``skip_bad_rows=True`` and :func:`report_skipped_rows`
    as ``on_skipped``, so every command that reads through these keywords
    reports what it skipped.
    """
    out: dict[str, Any] = {}
    if values.get("data_format"):
        out["format"] = values["data_format"]
    for key in ("encoding", "text_field", "label_field"):
        if values.get(key):
            out[key] = values[key]
    if values.get("skip_bad_rows"):
        out["skip_bad_rows"] = True
        out["on_skipped"] = report_skipped_rows
    return out


def allow_unfinished_option(f: F) -> F:
    return click.option(
        "--allow-unfinished", is_flag=True,
        help="Use a run whose training did not finish (its best weights so far) instead of refusing it.")(f)


def load_run(run: str, allow_unfinished: bool) -> tuple[Any, Any, Any, dict[str, Any]]:
    """``load_checkpoint`` for a command: an unfinished run is refused, or served with a warning line."""
    from attnkit.train.checkpoint import load_checkpoint

    model, tokenizer, labels, meta = load_checkpoint(run, allow_unfinished=allow_unfinished)
    if meta.get("notice"):
        click.echo(meta["notice"], err=True)
    return model, tokenizer, labels, meta


TASKS = ("classify", "translate", "caption")


def task_option(task: str) -> Callable[[F], F]:
    """``--task`` of an ``attnkit train`` command: the group routes ``train --task NAME`` to the task's
    command, which reads the option back and refuses any other name (a routing mistake, never silent)."""
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if value != task:
            raise click.BadParameter(f"this command trains the {task!r} task, not {value!r}", ctx, param)
        return value

    return click.option(
        "--task", type=click.Choice(TASKS), default=task, show_default=True, expose_value=False, callback=check,
        help="classify: text classification; translate / caption: the translation and captioning "
             "trainers, whose options `attnkit train --task NAME --help` lists.")
