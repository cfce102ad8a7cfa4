"""Shared command-line options and the ``--config`` file (TOML or YAML).

A config file holds option values keyed by the long option names
(``format = "csv"``, ``val-ratio = 0.2`` or ``batch_size: 64``; ``-`` and
``_`` are the same) plus an optional ``model_options`` table for the model's
config fields; the internal parameter names (``data_format``, ``val_path``)
are accepted too. Its values become the command's defaults, so flags given on
the command line override them. A key that is not an option of the command is
an error that lists the valid keys.

Flags whose default the library decides (``--epochs`` is ``TrainConfig.epochs``)
are :class:`LibraryDefaultOption`: ``None`` on the command line, and their help
reads the default from where the library keeps it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import tomllib
import typing
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import click

from attnkit._checks import flag_name
from attnkit.cli.messages import in_flags
from attnkit.train.memory_budget import max_memory_help

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["settings_options", "run_options", "Duration", "MemorySize", "LibraryDefaultOption", "resolve_default",
           "config_keys", "allow_unfinished_option", "task_option", "config_option", "read_config_file",
           "reader_options", "parse_model_options"]

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


def config_keys(command: click.Command) -> dict[str, str]:
    """The keys a ``--config`` file of ``command`` may hold, each mapped to its parameter name.

    Every long option name counts, with ``_`` for ``-`` (``val_ratio``, ``format``),
    and so does the parameter's own name (``data_format``); ``model_options`` holds
    the ``--model-opt`` fields.
    """
    keys: dict[str, str] = {}
    for p in command.params:
        if not isinstance(p, click.Option) or not p.name or p.name in ("config", "model_opt"):
            continue
        for opt in p.opts:
            if opt.startswith("--"):
                keys[opt[2:].replace("-", "_")] = p.name
        keys.setdefault(p.name, p.name)
    if any(p.name == "model_opt" for p in command.params):
        keys[MODEL_OPTIONS_KEY] = MODEL_OPTIONS_KEY
    return keys


def _valid_key_names(command: click.Command) -> list[str]:
    """The long option names a config file of ``command`` may use, as they are written on the command line."""
    names = [opt[2:] for p in command.params if isinstance(p, click.Option) and p.name not in ("config", "model_opt")
             for opt in p.opts if opt.startswith("--")]
    if any(p.name == "model_opt" for p in command.params):
        names.append(MODEL_OPTIONS_KEY)
    return sorted(names)


def _apply_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    data = read_config_file(value)
    keys = config_keys(ctx.command)
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise click.BadParameter(
            f"unknown key(s) {unknown} in {value}; valid keys: {_valid_key_names(ctx.command)} "
            "(- or _ alike)", param_hint="--config")
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, item in data.items():
        name = keys[key]
        if name in values:
            raise click.BadParameter(f"{value} sets {name!r} twice, as {given_as[name]!r} and {key!r}",
                                     param_hint="--config")
        values[name], given_as[name] = item, key
    extra = values.pop(MODEL_OPTIONS_KEY, None)
    if extra is not None and not isinstance(extra, dict):
        raise click.BadParameter(f"'{MODEL_OPTIONS_KEY}' in {value} must be a table/mapping",
                                 param_hint="--config")
    ctx.meta["attnkit.model_options"] = dict(extra or {})
    ctx.default_map = {**(ctx.default_map or {}), **values}


def config_option(f: F) -> F:
    return click.option(
        "--config", type=click.Path(exists=True, dir_okay=False), is_eager=True, expose_value=False,
        callback=_apply_config,
        help="TOML or YAML file of option values, keyed by the long option names (--format csv is "
             "format = \"csv\"); flags override it.",
    )(f)


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


_NOT_SET = object()


def resolve_default(ref: str) -> Any:
    """The value ``ref`` names: ``"module:NAME"`` (a constant), ``"module:Class.field"`` (a
    dataclass field's default) or ``"module:function.keyword"`` (a keyword's default)."""
    module, _, path = ref.partition(":")
    value: Any = importlib.import_module(module)
    for attr in path.split("."):
        if inspect.isfunction(value):
            value = inspect.signature(value).parameters[attr].default
        else:
            value = getattr(value, attr)
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


class LibraryDefaultOption(click.Option):
    """A flag left ``None`` on the command line, so that the library decides its default.

    ``default_from`` names that default (``"attnkit.train.config:TrainConfig.lr"``, see
    :func:`resolve_default`); the help shows it, read only when help is shown, so
    ``attnkit --help`` imports nothing more.
    On a command with ``--backend``, ``numpy_default_from`` adds the NumPy twin's default
    where it differs, and ``numpy_help`` a sentence about that backend. ``shown`` writes the
    default out instead, for a dataclass whose module loads torch (the tests hold the two equal).
    """

    def __init__(self, *args: Any, default_from: str, numpy_default_from: str | None = None,
                 numpy_help: str | None = None, shown: Any = _NOT_SET, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.default_from = default_from
        self.numpy_default_from = numpy_default_from
        self.numpy_help = numpy_help
        self.shown = shown
        self._plain_help = self.help

    def library_default(self) -> Any:
        """The default the library applies when the flag is not given."""
        return resolve_default(self.default_from) if self.shown is _NOT_SET else self.shown

    def numpy_default(self) -> Any:
        """The NumPy backend's default (``library_default()`` when it has no own one)."""
        return resolve_default(self.numpy_default_from) if self.numpy_default_from else self.library_default()

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        default = _shown(self.library_default())
        help_text = self._plain_help or ""
        if any(p.name == "backend" for p in ctx.command.params):
            if self.numpy_default_from and self.numpy_default() != self.library_default():
                default += f"; numpy backend: {_shown(self.numpy_default())}"
            if self.numpy_help:
                help_text = f"{help_text} {in_flags(self.numpy_help, ctx.command)}".strip()
        # Shown as click shows a default, "[default: 10; x>=1]", then put back: the value
        # the command receives stays None, so the dataclass (or a task's own default) decides.
        saved = self.default, self.show_default
        self.help, self.default, self.show_default = help_text, default, not self.is_flag  # a switch: its help says
        try:
            return super().get_help_record(ctx)
        finally:
            self.default, self.show_default = saved


def _library_option(cls: type, f: Any, hint: Any, notes: dict[str, Any]) -> Callable[[F], F]:
    """The flag of field ``f`` of ``cls`` whose default the library decides (:func:`settings_options`), with
    what its tree's ``flag_notes`` say of it (``notes``: ``help``, ``numpy_default_from``, ``numpy_help``)."""
    from attnkit._checks import is_type

    meta, name = f.metadata["attnkit"], f.name
    flag = flag_name(name, meta)
    switch = is_type(hint, bool)
    return click.option(
        f"{flag}/--no-{flag[2:]}" if switch else flag, name, type=None if switch else _flag_type(hint, meta),
        default=None, cls=LibraryDefaultOption, shown=f.default, metavar=meta["metavar"],
        default_from=f"{cls.__module__}:{cls.__qualname__}.{name}", **{"help": meta["help"], **notes})


def reader_options(f: F) -> F:
    """How to read a data file: the flags of :class:`attnkit.data.readers.ReaderSettings`."""
    from attnkit.data.readers import ReaderSettings

    return settings_options(ReaderSettings)(f)


def parse_model_options(ctx: click.Context, pairs: tuple[str, ...]) -> dict[str, Any]:
    """The config file's ``model_options`` updated by ``--model-opt KEY=VALUE`` flags (JSON values).

    A dotted key names a field of a nested config: ``layer.d_ff=512`` sets ``{"layer": {"d_ff": 512}}``,
    over what ``layer`` holds so far (from the config file or an earlier flag); the model's config then
    fills the fields left out and names any unknown one by its path.
    """
    options: dict[str, Any] = {}
    for key, value in ctx.meta.get("attnkit.model_options", {}).items():
        _set_option(options, str(key), value, "--config")
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--model-opt")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        _set_option(options, key.strip(), value, "--model-opt")
    return options


def _set_option(options: dict[str, Any], key: str, value: Any, flag: str) -> None:
    """Set ``key`` (``name`` or ``group.name``) in ``options``, copying the groups it passes through."""
    *groups, name = key.split(".")
    if not name or not all(groups):
        raise click.BadParameter(f"{key!r} is not a field name or path (names joined by '.', e.g. layer.d_ff)",
                                 param_hint=flag)
    node = options
    for depth, group in enumerate(groups):
        inner = node.get(group)
        if inner is not None and not isinstance(inner, dict):
            path = ".".join(groups[: depth + 1])
            raise click.BadParameter(f"{key}: {path} is already set to {inner!r}, not a group of fields",
                                     param_hint=flag)
        node[group] = node = dict(inner or {})
    node[name] = value


def allow_unfinished_option(f: F) -> F:
    from attnkit.train.registry import ALLOW_UNFINISHED

    return click.option("--allow-unfinished", is_flag=True, help=ALLOW_UNFINISHED)(f)


def task_option(task: str) -> Callable[[F], F]:
    """``--task`` of an ``attnkit train`` command: the group routes ``train --task NAME`` to the task's
    command (:func:`attnkit.train.registry.tasks`), which
    reads the option back and refuses any other name: an unknown task is named with the known ones, a
    routing mistake is never silent."""
    from attnkit.train.registry import tasks

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        known = list(tasks())
        if value not in known:
            raise click.BadParameter(f"{value!r} is not a task; tasks: {', '.join(known)}", ctx, param)
        if value != task:
            raise click.BadParameter(f"this command trains the {task!r} task, not {value!r}", ctx, param)
        return value

    return click.option("--task", metavar="TASK", default=task, show_default=True, expose_value=False,
                        callback=check, cls=_TaskOption)


class _TaskOption(click.Option):
    """``--task``, whose help lists the tasks registered when it is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from attnkit.train.registry import tasks

        names = "; ".join(f"{name}: {t.description}" for name, t in tasks().items())
        self.help = f"The task to train ({names}); `attnkit train --task NAME --help` lists its flags."
        return super().get_help_record(ctx)


class Duration(click.ParamType):
    """A duration such as ``90s``, ``30m`` or ``1.5h`` (a bare number is minutes), as seconds
    (:func:`attnkit._checks.parse_duration`)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from attnkit._checks import parse_duration

        try:
            return parse_duration(value, name=param.opts[0] if param is not None else "duration")
        except ValueError as err:
            self.fail(str(err), param, ctx)


def _flag_type(hint: Any, meta: dict[str, Any]) -> Any:
    """The click type of a :func:`attnkit._checks.setting` field of type hint ``hint``."""
    from attnkit._checks import is_type

    if meta["duration"]:
        return Duration()
    if meta.get("size"):
        return MemorySize()
    if meta["choices"] is not None:
        return click.Choice([str(c) for c in meta["choices"]])
    if meta["path"] is not None:
        return click.Path(exists=not meta["path"].startswith("new-"), file_okay=meta["path"] not in ("dir", "new-dir"),
                          dir_okay=meta["path"] not in ("file", "new-file"))
    bounds = {"min": meta["low"], "max": meta["high"], "min_open": meta["low_open"], "max_open": meta["high_open"]}
    if is_type(hint, int):
        return click.IntRange(**bounds) if meta["low"] is not None or meta["high"] is not None else int
    if is_type(hint, float):
        return click.FloatRange(**bounds) if meta["low"] is not None or meta["high"] is not None else float
    return str


def settings_options(cls: type, *, only: tuple[str, ...] | None = None) -> Callable[[F], F]:
    """One flag per :func:`attnkit._checks.setting` field of settings dataclass ``cls`` and its nested groups
    (:func:`attnkit._checks.setting_fields`; or of ``only``):
    ``--name-with-dashes`` (or the field's ``flag``), its help, its default, its range or choices, its
    path kind; a bool field is a flag (``--x/--no-x`` when it defaults to true), a ``multiple`` one is given
    once per value. The value arrives under the field's own name, so ``cls(**{field: values[field]})`` (a tree:
    :func:`attnkit._checks.tree_from_flat`) builds the settings: a field and its flag cannot disagree.

    The leaves of a tree's groups named in its ``decided_by_recipe`` are flags whose default the library
    decides (a model's recipe, a preset): each arrives ``None`` when not given (:class:`LibraryDefaultOption`,
    a bool field as ``--x/--no-x``), its help showing the field's default. What a flag's help says beyond its
    field's (the recipe's value, another backend's default) the tree says: its ``flag_notes(name, help,
    decided)`` gives :class:`LibraryDefaultOption`'s ``help``, ``numpy_default_from`` and ``numpy_help``
    (classification's: :func:`attnkit.train.tasks.classify.settings.flag_notes`)."""
    from attnkit._checks import setting_fields

    decided = {f.name: group for name in getattr(cls, "decided_by_recipe", ())
               for group in [typing.get_type_hints(cls)[name]] for f, _ in setting_fields(group)}
    notes: Callable[[str, str | None, bool], dict[str, Any]] = getattr(cls, "flag_notes",
                                                                      lambda name, help, decided: {})
    decorators = []
    for f, hint in setting_fields(cls):
        meta = f.metadata["attnkit"]
        if only is not None and f.name not in only:
            continue
        flag = flag_name(f.name, meta)
        if meta.get("argument"):
            decorators.append(click.argument(f.name, nargs=-1 if meta["multiple"] else 1, required=meta["required"],
                                             type=_flag_type(hint, meta)))
        elif f.name in decided:
            decorators.append(_library_option(decided[f.name], f, hint, notes(f.name, meta["help"], True)))
        elif hint is bool:
            decls = [f"{flag}/--no-{flag[2:]}" if f.default else flag, *_short(meta), f.name]
            decorators.append(click.option(*decls, is_flag=True, default=f.default, help=meta["help"]))
        elif meta["multiple"]:
            decorators.append(click.option(flag, f.name, multiple=True, metavar=meta["metavar"], help=meta["help"],
                                           type=_flag_type(hint, meta) if meta["path"] else None))
        else:
            shown = {} if meta["default_from"] is None else {
                "cls": LibraryDefaultOption, "default_from": meta["default_from"], **notes(f.name, None, False)}
            decorators.append(click.option(flag, *_short(meta), f.name, type=_flag_type(hint, meta), default=f.default,
                                           show_default=f.default is not None, help=meta["help"],
                                           required=meta["required"], metavar=meta["metavar"],
                                           callback=_checked(meta["check"], flag), **shown))
    return _stack(*decorators)


def _short(meta: dict[str, Any]) -> list[str]:
    return [meta["short"]] if meta.get("short") else []


def _checked(check: Callable[[Any], Any] | None, flag: str) -> Any:
    """The click callback of a setting's ``check``: the value it returns, its ValueError as the flag's error."""
    if check is None:
        return None

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return None if value is None else check(value)
        except ValueError as err:
            raise click.BadParameter(str(err).removeprefix(f"{flag} "), ctx, param) from None

    return callback


class MemorySize(click.ParamType):
    """A size such as ``4GB``, ``800MB`` or ``1.5GiB``, as bytes
    (:func:`attnkit.train.memory_budget.parse_memory_size`)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from attnkit.train.memory_budget import parse_memory_size

        try:
            return parse_memory_size(value)
        except ValueError as err:
            self.fail(str(err).removeprefix("--max-memory "), param, ctx)


def run_options(grows: Collection[str] = (), *, shrinks: str = "") -> Callable[[F], F]:
    """The flags of where a training run is written and how it reports, alike on every ``attnkit train``
    command: ``--out``, ``--overwrite``, ``--resume`` (``grows``: the settings a resume may change),
    ``--max-memory`` (``shrinks``: how a run shrinks to fit; none: refused above it) and ``--quiet``."""
    may = f"; {', '.join('--' + name.replace('_', '-') for name in grows)} may change" if grows else ""
    return _stack(
        click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to write."),
        click.option("--overwrite", is_flag=True, help="Replace a different run already in --out."),
        click.option("--resume", is_flag=True,
                     help="Go on with the unfinished run in --out after its last finished epoch, with its saved "
                          f"settings (a setting given with another value is refused{may})."),
        click.option("--max-memory", type=MemorySize(), metavar="SIZE", help=max_memory_help(shrinks)),
        click.option("--quiet", "-q", is_flag=True, help="No progress bar or per-epoch lines."),
    )
