"""What the commands say: one line for an expected failure, and the metrics of a classifier.

:func:`friendly_errors` turns attnkit's user errors (a ``ValueError`` with a
message that names the flag, file or field; an ``OSError`` naming its path)
into click's ``Error: ...`` line without a traceback; every command wears it.

A setting in the library's messages is written as its config name between
backticks (`` `on_nan` ``), the name the Python API takes; :func:`in_flags`
writes it as the running command's flag (``--on-nan``) when the command has
one, else as the bare name, so no command suggests a flag it lacks.

A user's text shown on the terminal goes through :func:`shown`: a control
character (NUL, escape, a line break inside a text), a bidirectional override
(U+202E) or a lone surrogate is written as its escape (``\\x00``, ``\\u202e``),
so that the output cannot move the cursor, reverse what follows or fail to
encode. JSON output (``--json``) stays exact.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from attnkit._checks import shown, spell_settings

__all__ = ["friendly_errors", "user_os_error", "in_flags", "echo", "shown"]

F = TypeVar("F", bound=Callable[..., Any])

def in_flags(text: str, command: click.Command | None = None) -> str:
    """``text`` with each `` `setting` `` written as ``command``'s flag for it, else as the bare name.

    ``command`` None is the running command (none running: every name bare).
    """
    if command is None:
        ctx = click.get_current_context(silent=True)
        command = ctx.command if ctx is not None else None
    flags = {p.name: max(p.opts, key=len) for p in (command.params if command else [])
             if isinstance(p, click.Option) and p.name}
    return spell_settings(text, flags)


def echo(line: str) -> None:
    """``click.echo`` of a library log line, its settings written as the running command's flags."""
    click.echo(in_flags(line))


def friendly_errors(f: F) -> F:
    """Turn expected failures (bad values, bad files, OS errors) into a one-line ``Error: ...``."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (click.ClickException, BrokenPipeError):  # a closed pipe ends quietly (click's main)
            raise
        except ValueError as err:
            raise click.ClickException(in_flags(str(err))) from None
        except OSError as err:
            raise click.ClickException(in_flags(user_os_error(err))) from None
    return wrapper  # type: ignore[return-value]


def require_room_for_torch() -> None:
    """Refuse in one line, before torch is imported, a command whose address-space limit cannot hold it
    (:func:`attnkit._memory.torch_room_failure`)."""
    from attnkit._memory import torch_room_failure

    short = None if "torch" in sys.modules else torch_room_failure()
    if short is not None:
        raise click.ClickException(short)


def user_os_error(err: OSError) -> str:
    """One line for an OSError: attnkit's own messages as they are, a raw one as ``PATH: reason (CODE)``; out of
    memory under an address-space limit, the limit (:func:`attnkit._memory.address_space_failure`)."""
    from attnkit._memory import address_space_failure
    from attnkit.train.runs.fileops import os_error_message

    limit = address_space_failure(err)
    if limit is not None:
        return limit
    return str(err) if err.errno is None or err.filename is None and err.strerror is None else os_error_message(err)
