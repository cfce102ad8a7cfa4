"""How a task is told where and how to run (:class:`RunOptions`), and the one rule of ``--resume``.

A resumed run goes on with the settings it was started with. A setting given again with its saved value is
accepted; one given with another value is refused, naming its flag, the saved and the given value; a
setting the task lets change (``epochs``: train longer or shorter than planned) is applied and said in one
line. Paths are not compared: a run's data may move, and the data record
(:mod:`attnkit.train.runs.data_record`) checks that the files found hold the bytes the run was trained on.
Every task resumes by this rule (:meth:`attnkit.train.registry.Task.run`).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

from attnkit._checks import flag_name, setting_fields

__all__ = ["RunOptions", "PlanError", "ResumeError", "resumed_settings", "leaf_values", "flat_config", "RUN_FLAGS"]

T = TypeVar("T")

RUN_FLAGS = {"out": "--out", "overwrite": "--overwrite", "resume": "--resume"}
"""Option -> flag, for the run folder's refusals (:func:`attnkit.train.runs.rundir.check_run_dir`)."""


@dataclass(frozen=True)
class RunOptions:
    """Where a run is written and how it reports, whatever the task: what ``attnkit train`` reads besides the
    task's settings."""

    out: str
    overwrite: bool = False
    resume: bool = False
    quiet: bool = False
    max_memory: int | None = None
    """Bytes the run may plan to use (None: a share of the memory available,
    :mod:`attnkit.train.memory_budget`)."""
    log: Callable[[str], None] = print
    """Where the run's summary lines go (per-epoch lines too unless ``quiet``)."""
    warn: Callable[[str], None] = functools.partial(print, file=sys.stderr)
    """Where warnings go."""

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise ResumeError("`resume` continues the run in `out` and `overwrite` replaces it; give one")

    @property
    def epoch_log(self) -> Callable[[str], None] | None:
        """Where per-epoch lines go: ``log``, or nowhere when ``quiet``."""
        return None if self.quiet else self.log


class PlanError(ValueError):
    """Settings that make no run, named in the message (a command shows it as a usage error)."""


class ResumeError(PlanError):
    """A resume the rule refuses (a changed setting, or ``--resume`` with ``--overwrite``)."""


def leaf_values(tree: Any) -> dict[str, Any]:
    """The leaves of settings tree ``tree`` by name (:func:`attnkit._checks.setting_fields`)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(tree):
        value = getattr(tree, f.name)
        values.update(leaf_values(value) if "attnkit" not in f.metadata and dataclasses.is_dataclass(value)
                      else {f.name: value})
    return values


def _replace(tree: T, changes: dict[str, Any]) -> T:
    """``tree`` with the leaves named in ``changes`` replaced, in whichever group holds them."""
    own = {f.name: changes[f.name] for f in dataclasses.fields(tree)  # type: ignore[arg-type]
           if f.name in changes and "attnkit" in f.metadata}  # a group may share a leaf's name (`data`)
    groups = {f.name: _replace(getattr(tree, f.name), changes) for f in dataclasses.fields(tree)  # type: ignore[arg-type]
              if "attnkit" not in f.metadata and dataclasses.is_dataclass(getattr(tree, f.name))}
    return dataclasses.replace(tree, **own, **groups)  # type: ignore[type-var]


def resumed_settings(saved: T, given: T, names: Collection[str], *, run: str, grows: Collection[str] = (),
                     log: Callable[[str], None] = print) -> T:
    """The settings run ``run`` goes on with: ``saved``, with the leaves ``names`` (those given on the
    command line) of ``given`` checked by the rule above. Path leaves are taken from ``given`` when given."""
    fields = {f.name: f for f, _ in setting_fields(type(saved))}
    before, after = leaf_values(saved), leaf_values(given)
    paths = {n for n in names if n in fields and fields[n].metadata["attnkit"]["path"] is not None}
    changed = {n: after[n] for n in names if n in fields and n not in paths and after[n] != before[n]}
    refused = [n for n in changed if n not in grows]
    if refused:
        said = "; ".join(f"{flag_name(n, fields[n].metadata['attnkit'])} is {_shown(before[n])} there, given "
                         f"{_shown(after[n])}" for n in refused)
        raise ResumeError(f"`resume` continues {run} with its saved settings: {said}; leave "
                          f"{'it' if len(refused) == 1 else 'them'} out (or give the saved value) to resume, or "
                          "start a new run (another `out`, or `overwrite`) with the new settings")
    for n, value in changed.items():
        log(f"{flag_name(n, fields[n].metadata['attnkit'])} {_shown(value)}: {run} was started with "
            f"{_shown(before[n])} and now goes on with {_shown(value)}")
    return _replace(saved, {**changed, **{n: after[n] for n in paths}})


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as ``{"layer.d_model": 16, ...}``, as ``--model-opt`` names its fields."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
