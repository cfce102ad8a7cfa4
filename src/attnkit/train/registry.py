"""One registry of tasks: what ``attnkit train --task NAME`` trains and what ``attnkit.load_run`` serves.

A task is one object, :class:`Task`, made and registered in its own folder, ``train/tasks/NAME/__init__.py``
(every folder there is imported when the registry is first read, so a new folder is a new task and no other
file names it). It holds the task's settings tree (whose leaves are ``attnkit train --task NAME``'s flags,
built by :func:`attnkit.cli.train.task_command`), the function that trains a run from those settings, the
test that claims a committed ``config.json`` as its own, and the loader that serves it::

    attnkit.load_run("runs/reviews")        # Predictor (classification, torch or numpy backend)
    attnkit.load_run("runs/de-en")          # Translator: .translate(["ein haus"])
    attnkit.load_run("runs/captions")       # CaptionRun: .caption(images)

Functions and classes are named ``"module:attribute"`` and imported when used, so reading the registry (and
``attnkit --help``) imports no torch. docs/design.md, "How to add a task", walks through a new one.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Task", "TaskCommand", "Say", "register_task", "tasks", "task_of_run", "load_run", "resolve",
           "allow_unfinished"]

ALLOW_UNFINISHED = "Use a run whose training did not finish (its best weights so far) instead of refusing it."


def allow_unfinished() -> Any:
    """The ``allow_unfinished`` setting of every command that reads a run (``--allow-unfinished``)."""
    from attnkit._checks import setting

    return setting(False, ALLOW_UNFINISHED)


def resolve(target: Any) -> Any:
    """``target`` itself, or the attribute a ``"module:attribute"`` (or ``"module:Class.method"``) string names."""
    if not isinstance(target, str):
        return target
    module, _, path = target.partition(":")
    value: Any = importlib.import_module(module)
    for attribute in path.split("."):
        value = getattr(value, attribute)
    return value


@dataclass(frozen=True)
class Say:
    """Where a task's command says things: ``log`` a line of its progress on standard output (its
    `` `settings` `` written as the command's flags), ``warn`` a notice on standard error."""

    log: Callable[[str], None]
    warn: Callable[[str], None]


@dataclass(frozen=True)
class TaskCommand:
    """A command a task answers besides training it (``attnkit translate``, ``attnkit predict``), generated as
    ``attnkit train --task NAME`` is (:func:`attnkit.cli.train.served_command`). ``settings``: its tree of
    :func:`attnkit._checks.setting` leaves (its arguments and flags; the docstring is its help); ``run(settings,
    say)`` does its work and returns (or yields) the lines it prints (:class:`Say`: what it says on the way; a
    :class:`~attnkit.train.runs.resume.PlanError` is a usage error). Both may be ``"module:attribute"`` strings.
    A command whose recipe decides what is not given (its tree's ``decided_by_recipe`` groups arrive None)
    ``takes_flags``: ``run`` gets the values by name, as :class:`Task`'s ``train`` does."""

    settings: Any
    run: Any
    takes_flags: bool = False


@dataclass(frozen=True)
class Task:
    """One task. ``load``, ``settings`` and ``train`` are objects or ``"module:attribute"`` strings.

    ``settings`` is a dataclass tree of :func:`attnkit._checks.setting` leaves in groups
    (:func:`attnkit._checks.tree_from_flat` builds it from a command's flags) with a ``from_run(config)``
    (the tree a committed ``config.json`` records); ``train(settings, run)`` trains a run
    (:class:`~attnkit.train.runs.resume.RunOptions`) and returns the line the command prints, or None.
    ``grows`` names the settings a resume may change (said in one line); ``serve`` wraps a loaded run for the
    server.

    A task whose recipe decides the settings not given (its tree's ``decided_by_recipe`` groups arrive None)
    ``takes_flags``: ``train(values, run, given)`` gets the command's values by name and resumes by the one rule
    itself (classification). ``shrinks``: how its run shrinks to fit ``--max-memory`` instead of being refused (the
    flag's help says it); ``after``: what is left to do once a run interrupted after its training is saved
    (``{out}``: the run); ``default``: ``attnkit train`` without ``--task`` trains it; ``commands``: the task's own
    commands by name (:class:`TaskCommand`).
    """

    name: str
    description: str
    claims: Callable[[dict[str, Any]], bool]
    load: Any
    """``load(path, *, allow_unfinished, device)`` -> what serves a run."""
    command: str = ""
    """The command that serves such a run (``"attnkit translate"``), for messages."""
    settings: Any = None
    train: Any = None
    grows: tuple[str, ...] = ("epochs",)
    takes_flags: bool = False
    shrinks: str = ""
    after: str | None = None
    default: bool = False
    commands: dict[str, TaskCommand] = field(default_factory=dict)
    serve: Any = None
    """``serve(name, path, loaded)`` -> the run as ``attnkit serve`` answers for it (its ``kind``, ``routes``, a
    method per route, ``info()``); None: served as a classifier (:class:`attnkit.serve.models.ServedModel`)."""
    needs_torch: Callable[[dict[str, Any]], bool] = lambda values: True
    """Whether training with the command's ``values`` loads torch (the command first checks there is room for it)."""

    @property
    def task_flag(self) -> str:
        """What follows ``attnkit train`` to train this task: nothing for the default task, else
        `` --task NAME``."""
        return "" if self.default else " --task " + self.name

    def run(self, settings: Any, run: Any, given: Collection[str] = ()) -> Any:
        """Train (``run.resume``: go on with) a run of this task; ``given`` names the settings the command
        line gave, which a resume checks by the one rule (:func:`attnkit.train.runs.resume.resumed_settings`).
        A finished run is left as it is, said in one line."""
        from attnkit.train.runs.resume import resumed_settings
        from attnkit.train.runs.rundir import run_status

        if self.takes_flags:  # its recipe decides what was not given; it applies the one rule itself
            return resolve(self.train)(settings, run, list(given))
        if run.resume:
            config = self.resumed_config(run.out)
            settings = resumed_settings(resolve(self.settings).from_run(config), settings, given, run=run.out,
                                        grows=() if run_status(config) == "done" else self.grows, log=run.log)
            if run_status(config) == "done":
                run.log(f"{run.out} finished training already; nothing to resume (it was left as it is)")
                return None
        return resolve(self.train)(settings, run)

    def committed(self, path: str | os.PathLike[str], *, allow_unfinished: bool = False) -> tuple[Path, dict[str, Any]]:
        """The committed generation folder of run ``path`` and its ``config.json``, for this task's loader, by
        one rule for every task: a run of another task is refused naming what it is and the command that serves
        it; one whose training did not finish unless ``allow_unfinished`` (then ``config["notice"]`` says which
        weights are served), and the refusal says how to go on with it."""
        from attnkit.train.runs.rundir import RunFileError, committed_dir, read_run_config, require_finished

        folder, config = committed_dir(path), read_run_config(path)
        if not self.claims(config):
            other = next((t for t in tasks().values() if t.claims(config)), None)
            raise RunFileError(f"{path} is {_a(other.description)} run, not {_a(self.description)} run: use "
                               f"{other.command} {path} ..." if other else
                               f"{path} holds a {config.get('model_name')!r} run, not {_a(self.description)} run")
        notice = require_finished(path, config, allow_unfinished=allow_unfinished,
                                  hint=f"continue it with attnkit train{self.task_flag} --out {path} --resume")
        if notice:
            config["notice"] = notice
        return folder, config

    def resumed_config(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The ``config.json`` of the run in ``path`` a resume goes on with, refused (naming what is wrong) when
        there is none or it is another task's run."""
        from attnkit.train.runs.rundir import RunFileError, read_run_config

        try:
            config = read_run_config(path)
        except RunFileError as err:
            raise RunFileError(f"cannot resume: {err}") from None
        if not self.claims(config):
            raise RunFileError(f"cannot resume: {path} holds a {config.get('model_name')!r} run, not "
                               f"{_a(self.description)} run")
        return config


def _a(text: str) -> str:
    return ("an " if text[:1] in tuple("aeiou") else "a ") + text


_TASKS: dict[str, Task] = {}
_found = False


def register_task(task: Task) -> Task:
    """Add ``task``; a name registered twice is an error (one owner per task), and so is a command another task
    answers already, or ``train`` (one owner per command)."""
    if task.name in _TASKS:
        raise ValueError(f"a task named {task.name!r} is registered already")
    owners = {name: other.name for other in _TASKS.values() for name in other.commands} | {"train": "every task"}
    if taken := sorted(set(task.commands) & set(owners)):
        raise ValueError(f"task {task.name!r} registers the command {taken[0]!r}, which {owners[taken[0]]!r} "
                         "answers already")
    _TASKS[task.name] = task
    return task


def tasks() -> dict[str, Task]:
    """Every registered task (the folders of ``attnkit.train.tasks``, imported once, and any registered by
    other code), by name in name order."""
    global _found
    if not _found:
        _found = True
        import attnkit.train.tasks as package

        for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if module.ispkg:
                importlib.import_module(f"{package.__name__}.{module.name}")
    return dict(sorted(_TASKS.items()))


def task_of_run(path: str | os.PathLike[str]) -> Task:
    """The registered task that claims run ``path`` (RunFileError naming the file when none does)."""
    from attnkit.train.runs.rundir import RunFileError, committed_dir, read_run_config

    config = read_run_config(path)
    for task in tasks().values():
        if task.claims(config):
            return task
    raise RunFileError(f"{committed_dir(path) / 'config.json'} names model {config.get('model_name')!r}, which no "
                       f"registered task claims (tasks: {', '.join(tasks())})")


def load_run(path: str | os.PathLike[str], *, allow_unfinished: bool = False, device: str = "cpu") -> Any:
    """Serve run ``path`` through the task that claims it (see the module docstring)."""
    return resolve(task_of_run(path).load)(Path(path), allow_unfinished=allow_unfinished, device=device)
