"""``attnkit train --task NAME``: every task with a settings tree gets its command generated from it.

The flags are the tree's leaves (:func:`attnkit.cli.options.settings_options`: name, type, range, default,
help) and the run's own (``--out``, ``--overwrite``, ``--resume``, ``--max-memory``, ``--quiet``), and
``--config`` reads their values from a TOML or YAML file, as every training command does; the help is the
tree's docstring. The command parses, makes the tree and calls :meth:`attnkit.train.registry.Task.run`,
which trains, or resumes by the one rule (:mod:`attnkit.train.runs.resume`).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from attnkit._lazy import missing_extra_message
from attnkit.cli.messages import echo, friendly_errors, in_flags, require_room_for_torch
from attnkit.cli.options import config_option, run_options, settings_options, task_option

__all__ = ["task_command"]


def task_command(task: Any) -> click.Command:
    """The ``attnkit train --task NAME`` command of registered task ``task`` (:class:`attnkit.train.registry.Task`)."""
    from attnkit._checks import setting_fields, tree_from_flat
    from attnkit.train.registry import resolve

    tree = resolve(task.settings)
    leaves = [f.name for f, _ in setting_fields(tree)]

    @click.command(task.name, help=tree.__doc__)
    @config_option
    @task_option(task.name)
    @run_options(task.grows)
    @settings_options(tree)
    @friendly_errors
    def command(**values: Any) -> None:
        from click.core import ParameterSource

        from attnkit.train.runs.resume import ResumeError, RunOptions
        from attnkit.train.runs.run import committed_run_id, interrupted_advice
        from attnkit.train.runs.rundir import RunLockedError

        ctx = click.get_current_context()
        given = [name for name in leaves
                 if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
        try:
            settings = tree_from_flat(tree, values)
            run = RunOptions(values["out"], overwrite=values["overwrite"], resume=values["resume"],
                             quiet=values["quiet"], max_memory=values["max_memory"], log=echo,
                             warn=lambda line: click.echo(line, err=True))
        except ValueError as err:
            raise click.UsageError(in_flags(str(err))) from None
        require_room_for_torch()
        try:  # the run there before (a resume's own), to tell after Ctrl-C what this run saved
            committed = committed_run_id(run.out)
        except (OSError, ValueError):  # a damaged folder: the task names what is wrong with it
            committed = None
        try:
            done = task.run(settings, run, given)
        except ResumeError as err:
            raise click.UsageError(in_flags(str(err))) from None
        except KeyboardInterrupt:
            advice = interrupted_advice(run.out, committed if run.resume else None, before=committed,
                                        resume=f"attnkit train --task {task.name} --out {run.out} --resume")
            click.echo(f"\ninterrupted; {advice}", err=True)
            sys.exit(130)
        except RunLockedError as err:
            raise click.ClickException(str(err)) from None
        except ImportError as err:  # a part whose library is missing (a backbone, a tokenizer)
            raise click.ClickException(missing_extra_message(err) or str(err)) from None
        if done:
            click.echo(done)

    return command
