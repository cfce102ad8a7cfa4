"""Translation from the command line: ``train --task translate`` and ``translate``.

Both commands are thin layers over :mod:`attnkit.train.tasks.translate.translation`::

    train_translate --src train.de.gz --tgt train.en.gz --val-src val.de.gz --val-tgt val.en.gz --out runs/de-en
    translate runs/de-en "Ein Mann fährt Fahrrad." --beam-size 4 --alignment align.png
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from attnkit.cli.messages import echo, friendly_errors, require_room_for_torch
from attnkit.cli.options import (
    allow_unfinished_option,
    refuse_resume_flags,
    refusing_memory_option,
    settings_options,
    task_option,
)
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.tasks.translate.settings import (
    BEAM_SIZE,
    LENGTH_PENALTY,
    TRAINING_FLAGS,
    TranslationModelSettings,
    TranslationSettings,
    TranslationTokenizerSettings,
)

__all__ = ["train_translate", "translate"]


# --- commands ------------------------------------------------------------------------------------


@click.command("train-translate")
@task_option("translate")
@click.option("--src", "src_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training source sentences, one per line (plain or .gz).")
@click.option("--tgt", "tgt_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training target sentences, line-aligned with --src.")
@click.option("--val-src", type=click.Path(exists=True, dir_okay=False), help="Validation source sentences.")
@click.option("--val-tgt", type=click.Path(exists=True, dir_okay=False), help="Validation target sentences.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to write.")
@settings_options(TranslationTokenizerSettings)
@settings_options(TranslationModelSettings)
@settings_options(TranslationTrainConfig, only=TRAINING_FLAGS)
@click.option("--overwrite", is_flag=True, help="Replace a different run already in --out.")
@click.option("--resume", is_flag=True,
              help="Go on with the interrupted run in --out after its last finished epoch, with its saved settings "
                   "(other setting flags are refused; --epochs may grow).")
@refusing_memory_option
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@friendly_errors
def train_translate(**v: Any) -> None:
    """Train a Transformer translation model on a parallel corpus.

    \b
    Example:
      attnkit train --task translate --src train.de.gz --tgt train.en.gz \\
          --val-src val.de.gz --val-tgt val.en.gz --out runs/de-en --time-budget 60
    """
    require_room_for_torch()
    from attnkit.cli.rundata import RUN_FLAGS
    from attnkit.data.parallel import read_parallel
    from attnkit.train.runs.rundir import RunLockedError, read_run_config
    from attnkit.train.tasks.translate.translation import fit_translation

    if (v["val_src"] is None) != (v["val_tgt"] is None):
        raise click.UsageError("give both --val-src and --val-tgt, or neither")
    if v["resume"] and v["overwrite"]:
        raise click.UsageError("--resume continues the run in --out and --overwrite replaces it; give one")
    given: list[str] = []
    if v["resume"]:
        given = refuse_resume_flags(click.get_current_context(), v["out"], RESUME_READS)
        if _finished(v["out"]):
            click.echo(f"{v['out']} finished training already; nothing to resume (it was left as it is)")
            return
        if "epochs" in given:
            _say_more_epochs(v["out"], v["epochs"])
    data = _data_record(v)
    train = read_parallel(v["src_path"], v["tgt_path"])
    val = read_parallel(v["val_src"], v["val_tgt"]) if v["val_src"] else None
    settings = TranslationSettings.from_flat(v)
    if v["resume"]:  # the run's own training settings, with --epochs if given (the model's come from the run)
        saved = TranslationTrainConfig.from_dict(read_run_config(v["out"])["train_config"])
        training = dataclasses.replace(saved, epochs=v["epochs"]) if "epochs" in given else saved
        settings = dataclasses.replace(settings, training=training)
    else:
        notice = warmup_notice(train.sources, train.targets, v["max_tokens"], v["epochs"], v["warmup_steps"])
        if notice is not None:
            click.echo(notice, err=True)
    try:
        summary = fit_translation(train, val, model_options=settings.model.model_options(),
                                  train_config=settings.training, out_dir=v["out"], overwrite=v["overwrite"],
                                  shared_vocab=not settings.tokenizer.separate_vocab,
                                  log=None if v["quiet"] else echo, resume=v["resume"], flags=RUN_FLAGS,
                                  max_memory=v["max_memory"], data=data)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted; {v['out']} holds the last finished epoch, if any (go on with --resume)", err=True)
        sys.exit(130)
    except RunLockedError as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"saved run to {v['out']} ({summary['steps']} steps, {summary['seconds']:.0f} s)")


DATA_FLAGS = {"src": "--src", "tgt": "--tgt", "val_src": "--val-src", "val_tgt": "--val-tgt"}
# What ``--resume`` reads besides the saved settings (refuse_resume_flags): the run, its data, how to report,
# and --epochs, which may grow.
RESUME_READS = {"out", "resume", "quiet", "max_memory", "src_path", "tgt_path", "val_src", "val_tgt", "epochs"}


def _say_more_epochs(out: str, epochs: int) -> None:
    """A resumed run told ``--epochs``: applied and said in one line (the run's plan when it is the same)."""
    from attnkit.train.runs.rundir import read_run_config

    planned = (read_run_config(out).get("progress") or {}).get("epochs")
    if planned != epochs:
        click.echo(f"--epochs {epochs}: {out} planned {planned} epochs and now trains {epochs}")


def _data_record(v: dict[str, Any]) -> dict[str, Any]:
    """The record of the files this command reads (:mod:`attnkit.train.runs.data_record`); resuming, each
    must hold the bytes the run recorded (a run committed before its data was recorded is recorded now)."""
    from attnkit.train.runs.data_record import locate_data, record_data
    from attnkit.train.runs.rundir import read_run_config

    given = {"src": v["src_path"], "tgt": v["tgt_path"], "val_src": v["val_src"], "val_tgt": v["val_tgt"]}
    if v["resume"]:
        saved = read_run_config(v["out"]).get("data") or {}
        if saved:
            return record_data(given, v["out"], known=locate_data(saved, given, v["out"], DATA_FLAGS))
    return record_data(given, v["out"])


WARMUP_SHARE = 0.5  # of all steps: a longer warm-up leaves the rate rising for most of the run


def estimated_steps(sources: list[str], targets: list[str], max_tokens: int) -> int:
    """At least how many optimizer steps one epoch of these pairs takes with ``--max-tokens``, from their
    lengths in words (a subword tokenizer splits a word into one or more tokens, so it is a lower bound)."""
    width = sum(max(len(s.split()), len(t.split()) + 1) for s, t in zip(sources, targets, strict=True))
    return max(1, -(-width // max_tokens))


def warmup_notice(sources: list[str], targets: list[str], max_tokens: int, epochs: int,
                  warmup_steps: int) -> str | None:
    """A warning when ``--warmup-steps`` exceeds :data:`WARMUP_SHARE` of the run's estimated steps (a small
    corpus under the default warm-up of 1000 steps), naming a warm-up that fits; None when it fits."""
    per_epoch = estimated_steps(sources, targets, max_tokens)
    total = per_epoch * epochs
    if warmup_steps <= WARMUP_SHARE * total:
        return None
    fits = max(1, total // 10)
    return (f"warning: --warmup-steps {warmup_steps} is more than half of this run's about {total} steps "
            f"({epochs} epochs of about {per_epoch} on {len(sources)} pairs): the learning rate would still "
            f"be rising when training ends; pass --warmup-steps {fits} (a tenth of the steps), more --epochs, "
            "or a smaller --max-tokens")


def _finished(out: str) -> bool:
    """Whether ``out`` holds a finished run (False for anything else: fit_translation then says what is wrong)."""
    from attnkit.train.runs.rundir import read_run_config, run_status

    try:
        return run_status(read_run_config(out)) == "done"
    except ValueError:
        return False


@click.command("translate")
@click.argument("checkpoint", type=click.Path())
@click.argument("texts", nargs=-1)
@click.option("--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="Translate every non-blank line of this file (plain or .gz) as well.")
@click.option("--beam-size", type=click.IntRange(min=1), default=BEAM_SIZE, show_default=True,
              help="Beam size (1: greedy).")
@click.option("--length-penalty", type=click.FloatRange(0), default=LENGTH_PENALTY, show_default=True,
              help="GNMT length-penalty exponent alpha (0: raw log-probability).")
@click.option("--alignment", "alignment_path", type=click.Path(dir_okay=False),
              help="Plot the cross-attention alignment of the first text to this image file.")
@allow_unfinished_option
@friendly_errors
def translate(checkpoint: str, texts: tuple[str, ...], text_file: str | None, beam_size: int, length_penalty: float,
              alignment_path: str | None, allow_unfinished: bool) -> None:
    """Translate texts with a trained translation run; prints one translation per line.

    \b
    Example:
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --beam-size 4 --alignment align.png
    """
    from attnkit.data.parallel import read_lines
    from attnkit.train.tasks.translate.translation import load_translation_run

    items = list(texts)
    if text_file:
        items += [line for line in read_lines(text_file) if line.strip()]
    if not items:
        raise click.UsageError("give at least one TEXT argument or --file")
    translator = load_translation_run(checkpoint, allow_unfinished=allow_unfinished)
    if translator.meta.get("notice"):
        click.echo(translator.meta["notice"], err=True)
    results = translator.translate(items, beam_size=beam_size, length_penalty=length_penalty,
                                   return_alignment=alignment_path is not None)
    for r in results:
        click.echo(r.text)
    if alignment_path is not None:
        from attnkit.viz.explain import plot_alignment

        first = results[0]
        assert first.alignment is not None
        targets = first.target_tokens + ["[EOS]"] * (first.alignment.shape[0] - len(first.target_tokens))
        plot_alignment(first.alignment.numpy(), first.source_tokens, targets, path=alignment_path)
        click.echo(f"alignment written to {alignment_path}", err=True)
