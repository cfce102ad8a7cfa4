"""Argument validators: the one home of the checks that every layer of attnkit repeats.

Each validator takes the argument's name and value, returns the value (with
its type narrowed) when it is acceptable, and otherwise raises ``ValueError``
naming the argument, what was expected and what came::

    positive_int("d_model", 0)       ValueError: d_model must be a positive int, got 0
    probability("dropout", 1.0)      ValueError: dropout must be a float in [0, 1), got 1.0
    one_of("pooling", "max", POOLINGS)
                                     ValueError: pooling must be one of ['attention', 'mean'], got 'max'

The message texts are part of the interface: users and tests match them.
``bool`` is rejected wherever a number is expected (``True`` is an ``int`` to
Python, but never a width or a rate).

A config read from JSON is checked field by field against its dataclass's
type hints by :func:`dataclass_kwargs` (unknown and missing keys, a list where
an int belongs, a NaN where a number belongs), before the class's own range
checks run::

    dataclass_kwargs(DocumentClassifierConfig, {"layer": {"d_model": [64]}, ...})
                    TypeError: DocumentClassifierConfig field layer.d_model must be an int, got [64] (list)

This module sits below everything else and imports nothing from attnkit, so
any module may use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["positive_int", "non_negative_int", "positive_float", "probability", "one_of", "dataclass_kwargs",
           "nested_paths_hint", "spell_settings", "setting", "setting_of", "setting_fields", "tree_from_flat",
           "check_settings",
           "is_type", "parse_duration", "shown", "MAX_SEED"]

T = TypeVar("T")

MAX_SEED = 2**32 - 1
"""The largest seed torch, NumPy and Python all take (a larger one overflows torch's 64-bit seed after the offsets
the training adds): every seed setting's upper bound."""


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int > 0: a width, a count of heads or layers, a length."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def non_negative_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 0: an offset, an index, a depth that may be zero."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def positive_float(name: str, value: object) -> float:
    """``value`` as a float if it is a number > 0 (an epsilon, a scale)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive float, got {value!r}")
    return float(value)


def attention_scale(scale: object, dh: int) -> float:
    """The logit scale of attention: ``scale`` when it is a positive number, ``1 / sqrt(dh)`` for None."""
    if scale is None:
        return 1.0 / math.sqrt(dh)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float or None, got {scale!r}")
    return float(scale)


def probability(name: str, value: object) -> float:
    """``value`` as a float in ``[0, 1)``: a dropout rate (1 would drop everything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")
    return float(value)


def one_of(name: str, value: T, choices: Sequence[T]) -> T:
    """``value`` if it is one of ``choices``; the error lists the valid ones and, for a misspelt string,
    the close one (``"; did you mean 'document'?"``)."""
    if value not in choices:
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1) \
            if isinstance(value, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}{hint}")
    return value


def dataclass_kwargs(cls: type, data: object, *, what: str | None = None) -> dict[str, Any]:
    """The keyword arguments of dataclass ``cls`` from ``data`` (a dict read from JSON), checked by type.

    Unknown keys and missing required fields raise ValueError listing the
    valid fields. Each value must fit its field's type hint (``int``, ``float``
    (finite; an int is accepted), ``bool``, ``str``, ``X | None``,
    ``Literal[...]``, ``tuple[...]``, ``list[...]``, ``dict[...]``, or another
    dataclass), else a TypeError names the field and what came; JSON lists
    become tuples where the field is a tuple. A field whose hint is a dataclass
    (a model config's layer config) takes a dict, checked the same way and
    built into that dataclass (a field the dict leaves out takes its value in
    the field's default, where that default is such a dataclass); messages
    name its fields by their path (``encoder.d_ff``). Range checks stay with the class (its ``__post_init__``).
    ``what`` names the config in messages (default: the class name).
    """
    return _kwargs(cls, data, what or cls.__name__, "")


def nested_paths_hint(cls: type, keys: Sequence[str]) -> str:
    """``"; did you mean layer.d_model?"`` for the ``keys`` unknown to dataclass ``cls`` that are fields of
    one of its nested configs (a model config's ``layer``), named by their path; ``""`` when none is."""
    hints = typing.get_type_hints(cls)
    paths = [f"{f.name}.{key}" for key in keys for f in dataclasses.fields(cls)
             if (nested := _nested_dataclass(hints.get(f.name, Any))) is not None
             and key in {g.name for g in dataclasses.fields(nested)}]
    return f"; did you mean {', '.join(paths)}?" if paths else ""


_SETTING = re.compile(r"`([a-z][a-z0-9_]*)`")


def spell_settings(text: str, flags: Mapping[str, str] | None = None) -> str:
    """``text`` with each setting named in backticks (`` `on_nan` ``, as messages name them) written as
    ``flags[name]`` (a command's ``--on-nan``) where ``flags`` has it, else as the bare name."""
    flags = flags or {}
    return _SETTING.sub(lambda m: flags.get(m.group(1), m.group(1)), text)


def setting(default: Any, help: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, high_open: bool = False, choices: Sequence[Any] | None = None,
            flag: str | None = None, path: str | None = None, duration: bool = False, metavar: str | None = None,
            required: bool = False, check: Callable[[Any], Any] | None = None, default_from: str | None = None,
            multiple: bool = False, argument: bool = False, short: str | None = None, size: bool = False) -> Any:
    """A settings field that says everything about itself once: its default, its help, its range.

    :func:`check_settings` checks a value against it, and the command line builds its flag from it
    (:func:`attnkit.cli.options.settings_options`: ``--name-with-dashes`` unless ``flag``, the help, the default,
    the range), so a field and its flag cannot disagree. ``low``/``high`` bound a number (``*_open``: the bound
    itself is refused); ``choices`` lists the values a string may take; ``path`` is ``"dir"``, ``"file"``, ``"any"``
    (each must exist; any: a file or a folder), ``"new-dir"`` (a folder that may not exist yet) or ``"new-file"`` (a
    file to write) for the command line; ``duration`` marks seconds, which the command line reads as ``90s``,
    ``30m``, ``1.5h`` (:func:`parse_duration`); ``metavar`` names the flag's value in its help (``TOKENS``);
    ``required``: the command line refuses to run without the flag (the dataclass keeps its default, for code that
    fills it later); ``check`` refuses a value by a ValueError (on the command line: the value it returns is the
    flag's); ``default_from``: for a field whose None leaves the choice to the code that reads it, where that code
    keeps the default it applies (``"module:function.keyword"``, :func:`attnkit.cli.options.resolve_default`), shown
    in the flag's help; ``multiple``: a tuple of values, its flag given once for each (``--model-opt``);
    ``argument``: on the command line a positional argument (``RUN``; ``multiple``: any number of them), not a flag;
    ``short``: the flag's one-letter alias (``-q``); ``size``: bytes, which the command line reads as ``4GB``.
    """
    meta = {"help": help, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
            "choices": tuple(choices) if choices is not None else None, "flag": flag, "path": path,
            "duration": duration, "metavar": metavar, "required": required, "check": check,
            "default_from": default_from, "multiple": multiple, "argument": argument, "short": short, "size": size}
    return dataclasses.field(default=default, metadata={"attnkit": meta})


def setting_of(cls: type, name: str) -> Any:
    """Setting ``name`` of settings dataclass ``cls`` again (its default, help, range): for a command that takes
    one setting of a group (``attnkit baseline``'s ``class_weight``), so the two cannot disagree."""
    found = next(f for f in dataclasses.fields(cls) if f.name == name)
    return dataclasses.field(default=found.default, metadata=found.metadata)


class FieldError(ValueError):
    """A value refused with the name of the field (a request's, a setting's) to blame."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def flag_name(name: str, meta: Mapping[str, Any]) -> str:
    """The command-line flag of :func:`setting` field ``name``: its own ``flag``, else ``--name-with-dashes``."""
    return meta["flag"] or "--" + name.replace("_", "-")


def setting_fields(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    """Every :func:`setting` field of settings dataclass ``cls`` with its type hint, in order, those of its
    nested settings groups (a field whose type is a dataclass) included: the leaves of a settings tree."""
    hints = typing.get_type_hints(cls)
    leaves: list[tuple[dataclasses.Field[Any], Any]] = []
    for f in dataclasses.fields(cls):
        if "attnkit" in f.metadata:
            leaves.append((f, hints[f.name]))
        elif (nested := _nested_dataclass(hints[f.name])) is not None:
            leaves += setting_fields(nested)
    return leaves


def tree_from_flat(cls: type, values: Mapping[str, Any]) -> Any:
    """Settings tree ``cls`` from leaf values by name, as a command's flags give them: a field takes the value
    ``values`` holds for it, a nested settings group (a field whose type is a dataclass, not None by default) is
    built the same way from ``values``, and every field not given keeps its default; other keys are ignored."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        group = None if "attnkit" in f.metadata or f.default is None else _nested_dataclass(hints[f.name])
        if group is not None:
            kwargs[f.name] = tree_from_flat(group, values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def _range_text(meta: Mapping[str, Any]) -> str:
    low, high = meta["low"], meta["high"]
    parts = ([f"{'>' if meta['low_open'] else '>='} {low:g}"] if low is not None else []) + \
        ([f"{'<' if meta['high_open'] else '<='} {high:g}"] if high is not None else [])
    return " and ".join(parts)


def _kind_text(kind: type, meta: Mapping[str, Any]) -> str:
    """What a number field must be, in the words of the validators above where they apply."""
    if kind is int and meta["high"] is None and not meta["low_open"] and meta["low"] in (0, 1):
        return "a positive int" if meta["low"] == 1 else "a non-negative int"
    bounds = _range_text(meta)
    return f"{'an int' if kind is int else 'a number'}{' ' + bounds if bounds else ''}"


def check_settings(obj: Any) -> None:
    """Each :func:`setting` field of dataclass instance ``obj`` within its range and choices, else a
    ValueError naming the field, the range and the value (``None`` passes where the default is ``None``)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        meta = f.metadata.get("attnkit")
        if meta is None:
            continue
        value = getattr(obj, f.name)
        if value is None and f.default is None:
            continue
        if meta["choices"] is not None:
            one_of(f.name, value, meta["choices"])
        if meta["check"] is not None:
            meta["check"](value)
        hint = hints[f.name]
        kind = next((k for k in (bool, int, float) if is_type(hint, k)), None)
        if kind is None:
            continue
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{f.name} must be true or false, got {value!r}")
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (kind is float or isinstance(value, int)) and math.isfinite(value)
        low, high = meta["low"], meta["high"]
        inside = number and (low is None or (value > low if meta["low_open"] else value >= low)) and \
            (high is None or (value < high if meta["high_open"] else value <= high))
        if not inside:
            raise ValueError(f"{f.name} must be {_kind_text(kind, meta)}, got {value!r}")


def is_type(hint: Any, kind: type) -> bool:
    """Whether type hint ``hint`` is ``kind`` or ``kind | None``."""
    return hint is kind or kind in typing.get_args(hint) and type(None) in typing.get_args(hint) and \
        len(typing.get_args(hint)) == 2


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float, *, name: str = "duration") -> float:
    """Seconds of a duration written ``90s``, ``30m``, ``1.5h`` or a bare number of minutes (``30``: the unit
    the time budgets' flags always took); a bad one is a ValueError naming ``name``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = 60.0 * float(text)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text).lower())
        if match is None or match.group(2) not in ("", *_DURATION_UNITS):
            raise ValueError(f"{name} must be a duration such as 90s, 30m or 1.5h (a bare number is minutes), "
                             f"got {text!r}")
        value = float(match.group(1)) * _DURATION_UNITS.get(match.group(2), 60.0)
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be above zero, got {text!r}")
    return value


def _kwargs(cls: type, data: object, name: str, prefix: str) -> dict[str, Any]:
    """:func:`dataclass_kwargs` for the fields under ``prefix`` (``""`` or ``"encoder."``) of config ``name``."""
    if not isinstance(data, Mapping):
        where = f"{name} field {prefix[:-1]}" if prefix else name
        raise TypeError(f"{where} must be a dict of fields, got {_shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(prefix + str(k) for k in set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown {name} field(s) {unknown}; valid fields are {[prefix + k for k in fields]}"
                         f"{nested_paths_hint(cls, sorted(str(k) for k in set(data) - set(fields)))}")
    missing = [prefix + k for k, f in fields.items() if k not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{name} is missing required field(s) {missing}")
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in data.items():
        hint = hints.get(key, Any)
        nested = _nested_dataclass(hint)
        if nested is not None and isinstance(value, Mapping):
            out[key] = _built(nested, {**_default_fields(fields[key], nested), **value}, name, f"{prefix}{key}")
            continue
        try:
            out[key] = _fit(value, hint)
        except _Mismatch:
            raise TypeError(f"{name} field {prefix}{key} must be {_hint_text(hint)}, "
                            f"got {_shown(value)}") from None
    return out


def _nested_dataclass(hint: Any) -> type | None:
    """The dataclass of a field hinted ``D`` or ``D | None``, else None."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    found = [o for o in options if isinstance(o, type) and dataclasses.is_dataclass(o)]
    return found[0] if len(found) == 1 else None


def _default_fields(field: dataclasses.Field[Any], cls: type) -> dict[str, Any]:
    """The fields of ``field``'s default, when that is a ``cls``: what a partial nested dict is laid over."""
    if field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = None if field.default is dataclasses.MISSING else field.default
    if not isinstance(default, cls):
        return {}
    return {f.name: getattr(default, f.name) for f in dataclasses.fields(cls) if f.init}


def _built(cls: type, data: Mapping[str, Any], name: str, path: str) -> Any:
    """Dataclass ``cls`` built from ``data``, the field ``path`` of config ``name``; its own range checks'
    messages, which start with its field's name, get the path in front (``encoder.d_ff must be ...``)."""
    kwargs = _kwargs(cls, data, name, path + ".")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        message = str(err)
        first = message.split(" ", 1)[0]
        known = {f.name for f in dataclasses.fields(cls)}
        message = f"{path}.{message}" if first in known else f"{path}: {message}"
        raise type(err)(f"{name} field {message}") from None


class _Mismatch(Exception):
    pass


def _fit(value: object, hint: Any) -> Any:
    """``value`` converted to ``hint`` (JSON lists to tuples), or :class:`_Mismatch`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _fit(value, option)
            except _Mismatch:
                pass
        raise _Mismatch
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise _Mismatch
    if hint is type(None):
        if value is None:
            return value
        raise _Mismatch
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return value
        raise _Mismatch
    if origin is tuple or hint is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        if not args:
            return tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_fit(v, args[0]) for v in value)
        if len(args) != len(value):
            raise _Mismatch
        return tuple(_fit(v, a) for v, a in zip(value, args, strict=True))
    if origin is list or hint is list:
        if not isinstance(value, list):
            raise _Mismatch
        return [_fit(v, args[0]) for v in value] if args else list(value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        return value
    if isinstance(hint, type) and origin is None:
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value  # a hint this check does not read: the class's own checks decide


def _hint_text(hint: Any) -> str:
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return {"int": "an int", "float": "a finite number", "bool": "true or false", "str": "a string"}.get(
            hint.__name__, hint.__name__)
    return str(hint).replace("typing.", "")


def _shown(value: object) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


# C0 and C1 controls, DEL, the Arabic letter mark, the left-to-right and right-to-left marks, the line and
# paragraph separators, the bidirectional embeddings, overrides and isolates, and lone surrogates.
_UNSHOWABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` as the terminal may show it: each control, bidirectional formatting character or lone
    surrogate written as its escape (``"\\x00"``, ``"\\u202e"``); everything else as it is."""
    return _UNSHOWABLE.sub(_escape, text)
