"""The ``attnkit`` command: ``demo``, ``train``, ``evaluate``, ``predict``, ``cv``, ``report``, ``baseline``, ``bench``.

Each command turns flags (and an optional ``--config`` file) into the
library's config dataclasses and calls the library; heavy imports happen
inside the commands so that ``attnkit --help`` is quick. Expected failures
(bad files, bad values, an occupied output directory) end with a one-line
``Error: ...`` and exit status 1 or 2, never a traceback. An unexpected
exception ends the same way, naming its type, unless ``--debug`` (or
``ATTNKIT_DEBUG=1``) asks for the traceback; Ctrl-C ends with status 130.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

import click

from attnkit._lazy import missing_extra_message
from attnkit.cli.messages import user_os_error

__all__ = ["main", "cli", "command", "AttnkitGroup", "DEBUG_HINT", "train_tasks"]

DEBUG_HINT = "run with --debug or ATTNKIT_DEBUG=1 for the traceback"

# Commands that live in their own modules, imported only when used.
LAZY_COMMANDS = {
    "visualize": "attnkit.cli.visualize:visualize",
    "serve": "attnkit.cli.serve:serve",
    "verify": "attnkit.cli.verify:verify",
}


def train_tasks() -> dict[str, click.Command]:
    """The commands ``attnkit train --task NAME ...`` hands its arguments to: one generated from the settings
    tree of every registered task (:func:`attnkit.cli.train.task_command`)."""
    from attnkit.cli.train import task_command
    from attnkit.train.registry import tasks

    return {name: task_command(task) for name, task in tasks().items()}


def command(name: str) -> click.Command:
    """The ``attnkit`` command ``name`` (``attnkit train``: the default task's), as the group runs it."""
    found = cli.get_command(click.Context(cli), name)
    if found is None:
        raise KeyError(f"attnkit has no command {name!r}")
    return found


def _default_train() -> click.Command:
    """``attnkit train`` without ``--task``: the command of the task registered as the default."""
    from attnkit.cli.train import task_command
    from attnkit.train.registry import tasks

    return task_command(next(task for task in tasks().values() if task.default))


def _load(target: str) -> click.Command:
    module, _, attr = target.partition(":")
    command = getattr(importlib.import_module(module), attr)
    assert isinstance(command, click.Command)
    return command


def _task(ctx: click.Context, commands: Iterable[click.Command], args: list[str]) -> str | None:
    """The value of ``--task`` in ``train``'s arguments ``args``, read by click's own parser over the options
    of every training command ``commands`` (so a value that happens to be spelt ``--task`` is a value, not the
    flag); the task's command reads it again and refuses another name."""
    options: list[click.Parameter] = []
    seen: set[str] = set()
    for command in commands:
        for param in command.params:
            if isinstance(param, click.Option) and not seen & {*param.opts, *param.secondary_opts}:
                options.append(param)
                seen |= {*param.opts, *param.secondary_opts}
    union = click.Command("train", params=options)
    scratch = click.Context(union, parent=ctx, ignore_unknown_options=True, resilient_parsing=True)
    values, _, _ = union.make_parser(scratch).parse_args(list(args))
    task = values.get("task")
    return task if isinstance(task, str) else None


class AttnkitGroup(click.Group):
    """A group with lazily imported commands and ``train --task`` routing."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from attnkit.cli.train import task_commands

        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS, *task_commands(), "train"})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from attnkit.cli.train import served_command, task_commands

        if cmd_name == "train":
            return _default_train()
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            return _load(LAZY_COMMANDS[cmd_name])
        if cmd_name in self.commands:  # the group's own commands before a task's of the same name
            return super().get_command(ctx, cmd_name)
        spec = task_commands().get(cmd_name)
        return None if spec is None else served_command(cmd_name, spec)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name == "train" and command is not None:
            commands = train_tasks()
            task = _task(ctx, commands.values(), list(rest))
            if task in commands:
                return name, commands[task], rest
            if task is not None:  # before the wrong command's flags are read
                raise click.UsageError(f"Invalid value for '--task': {task!r} is not a task; tasks: "
                                       f"{', '.join(commands)}", ctx)
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an unexpected exception becomes a one-line error unless ``--debug``."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise  # click's main ends a closed output pipe (`attnkit predict ... | head -1`) quietly
        except KeyboardInterrupt:
            click.echo("\ninterrupted", err=True)
            sys.exit(130)
        except Exception as err:
            if ctx.params.get("debug"):
                raise
            if isinstance(err, OSError):  # a path that cannot be read or written: named, not "unexpected"
                raise click.ClickException(user_os_error(err)) from err
            raise click.ClickException(unexpected_error_message(err)) from err


def unexpected_error_message(err: BaseException) -> str:
    """One line for an exception nobody expected: its type, its message and how to see more; out of memory
    under an address-space limit, the limit (:func:`attnkit._memory.address_space_failure`)."""
    from attnkit._memory import address_space_failure

    hint = address_space_failure(err)
    if hint is None and isinstance(err, ImportError):
        hint = missing_extra_message(err)
    if hint is not None:
        return hint
    text = " ".join(str(err).split()) or "(no message)"
    return f"{type(err).__name__}: {text} ({DEBUG_HINT})"


@click.group(name="attnkit", cls=AttnkitGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="attnkit", prog_name="attnkit")
@click.option("--threads", type=click.IntRange(min=1), envvar="ATTNKIT_THREADS",
              help="CPU threads for torch's intra-op parallelism (default: torch's choice).")
@click.option("--debug", is_flag=True, envvar="ATTNKIT_DEBUG",
              help="Show the full traceback of an unexpected error (env: ATTNKIT_DEBUG=1).")
def cli(threads: int | None, debug: bool) -> None:
    """attnkit: attention mechanisms, correct, fast and visible.

    \b
    Examples:
      attnkit demo
      attnkit train --data reviews.csv --model sentiment --out runs/reviews
      attnkit evaluate runs/reviews --data test.csv
      attnkit predict runs/reviews "a quietly moving film" --explain
      attnkit cv --data path/to/mr --encoding latin-1 --folds 10
      attnkit train --task translate --src train.de.gz --tgt train.en.gz --out runs/de-en
      attnkit train --task caption --out runs/shapes
      torchrun --nproc_per_node=2 -m attnkit train --data reviews.csv --out runs/ddp
    """
    _show_library_notices()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


class _Notices(logging.Handler):
    """The library's notices (the ``attnkit`` logger, warning and above) as lines on standard error."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(record.getMessage(), err=True)


def _show_library_notices() -> None:
    logger = logging.getLogger("attnkit")
    if not any(isinstance(h, _Notices) for h in logger.handlers):
        logger.addHandler(_Notices(logging.WARNING))
        logger.propagate = False


@cli.command()
@click.option("--quick", is_flag=True, help="Fewer, smaller cases.")
@click.option("--json", "out_json", type=click.Path(dir_okay=False), help="Also write the figures to this JSON file.")
@click.option("--case", "cases", multiple=True,
              help="Run only this case (repeatable; default all); see attnkit.bench.CASES.")
def bench(quick: bool, out_json: str | None, cases: tuple[str, ...]) -> None:
    """Time the attention implementations and print a table."""
    try:
        from attnkit import bench as bench_module
    except ImportError as err:
        raise click.ClickException(f"the benchmark module is not available: {err}") from None
    valid = [str(name) for name in bench_module.CASES]
    unknown = sorted(set(cases) - set(valid))
    if unknown:
        raise click.UsageError(f"unknown case(s) {unknown}; valid cases: {valid}")
    selected = [name for name in valid if name in cases] if cases else None
    bench_module.run(selected, quick=quick, out_json=out_json, echo=click.echo)


def main() -> None:
    """Run the ``attnkit`` group (the console script starts in :mod:`attnkit._console`).

    Errors inside a command are handled by :meth:`AttnkitGroup.invoke`; this
    catches what escapes click itself (an option callback, ``--version``).
    """
    try:
        cli.main(prog_name="attnkit")
    except Exception as err:
        if _debug_requested(sys.argv[1:]):
            raise
        click.echo(f"Error: {unexpected_error_message(err)}", err=True)
        sys.exit(1)


def _debug_requested(args: list[str]) -> bool:
    if "--debug" in args:
        return True
    return os.environ.get("ATTNKIT_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
