"""Every task's commands are generated from its settings trees: ``attnkit train --task NAME``
(:func:`task_command`) and the task's own (``attnkit translate``, ``attnkit predict``: :func:`served_command`).

The flags are the tree's leaves (:func:`attnkit.cli.options.settings_options`: name, type, range, default,
help; a group a recipe decides arrives None where not given) and the run's own (``--out``, ``--overwrite``,
``--resume``, ``--max-memory``, ``--quiet``), and ``--config`` reads their values from a TOML or YAML file, as
every training command does (its ``model_options`` table, with ``--model-opt``, gives a model's options); the
help is the tree's docstring. The command parses, makes the tree and calls
:meth:`attnkit.train.registry.Task.run`, which trains, or resumes by the one rule
(:mod:`attnkit.train.runs.resume`). ``attnkit train`` without ``--task`` is the default task's command.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from attnkit._lazy import missing_extra_message
from attnkit.cli.messages import echo, friendly_errors, in_flags, require_room_for_torch
from attnkit.cli.options import config_option, parse_model_options, run_options, settings_options, task_option

__all__ = ["task_command", "served_command", "task_commands"]


def task_command(task: Any) -> click.Command:
    """The ``attnkit train --task NAME`` command of registered task ``task`` (:class:`attnkit.train.registry.Task`)."""
    from attnkit._checks import setting_fields, tree_from_flat
    from attnkit.train.registry import resolve

    tree = resolve(task.settings)
    leaves = [f.name for f, _ in setting_fields(tree)]

    @click.command(task.name, help=tree.__doc__)
    @config_option
    @task_option(task.name)
    @run_options(task.grows, shrinks=task.shrinks)
    @settings_options(tree)
    @friendly_errors
    def command(**values: Any) -> None:
        from click.core import ParameterSource

        from attnkit.train.runs.resume import PlanError, RunOptions
        from attnkit.train.runs.run import committed_run_id, interrupted_advice
        from attnkit.train.runs.rundir import RunLockedError

        ctx = click.get_current_context()
        given = [name for name in leaves
                 if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
        try:
            if "model_opt" in values:  # with the --config file's model_options table
                values["model_opt"] = parse_model_options(ctx, values["model_opt"])
            settings = values if task.takes_flags else tree_from_flat(tree, values)
            run = RunOptions(values["out"], overwrite=values["overwrite"], resume=values["resume"],
                             quiet=values["quiet"], max_memory=values["max_memory"], log=echo,
                             warn=lambda line: click.echo(line, err=True))
        except ValueError as err:
            raise click.UsageError(in_flags(str(err))) from None
        if task.needs_torch(values):
            require_room_for_torch()
        try:  # the run there before (a resume's own), to tell after Ctrl-C what this run saved
            committed = committed_run_id(run.out)
        except (OSError, ValueError):  # a damaged folder: the task names what is wrong with it
            committed = None
        try:
            done = task.run(settings, run, given)
        except PlanError as err:
            raise click.UsageError(in_flags(str(err))) from None
        except KeyboardInterrupt:
            advice = interrupted_advice(run.out, committed if run.resume else None, before=committed,
                                        resume=f"attnkit train{task.task_flag} --out {run.out} --resume",
                                        after=task.after.format(out=run.out) if task.after else None)
            click.echo(f"\ninterrupted; {advice}", err=True)
            sys.exit(130)
        except RunLockedError as err:
            raise click.ClickException(str(err)) from None
        except ImportError as err:  # a part whose library is missing (a backbone, a tokenizer), or no room for it
            from attnkit._memory import address_space_failure

            raise click.ClickException(missing_extra_message(err) or address_space_failure(err) or str(err)) from None
        if done:
            click.echo(done)

    return command


def task_commands() -> dict[str, Any]:
    """Every registered task's own commands by name (:class:`attnkit.train.registry.TaskCommand`)."""
    from attnkit.train.registry import tasks

    return {name: spec for task in tasks().values() for name, spec in task.commands.items()}


def served_command(name: str, spec: Any) -> click.Command:
    """Command ``name`` of a task (:class:`attnkit.train.registry.TaskCommand` ``spec``): its arguments and flags
    are its tree's leaves (with ``--config``, as every command's), its help the tree's docstring; it makes the
    tree (``takes_flags``: the values by name), calls the task's ``run`` and prints the lines it returns."""
    from attnkit._checks import tree_from_flat
    from attnkit.train.registry import resolve

    tree = resolve(spec.settings)

    @click.command(name, help=tree.__doc__)
    @config_option
    @settings_options(tree)
    @friendly_errors
    def command(**values: Any) -> None:
        from attnkit.train.registry import Say
        from attnkit.train.runs.resume import PlanError

        try:
            if "model_opt" in values:  # with the --config file's model_options table
                values["model_opt"] = parse_model_options(click.get_current_context(), values["model_opt"])
            settings = values if spec.takes_flags else tree_from_flat(tree, values)
        except ValueError as err:
            raise click.UsageError(in_flags(str(err))) from None
        try:
            for line in resolve(spec.run)(settings, Say(echo, lambda line: click.echo(line, err=True))) or ():
                click.echo(line)
        except PlanError as err:
            raise click.UsageError(in_flags(str(err))) from None

    return command
