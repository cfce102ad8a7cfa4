"""Where the data sets live: a script's ``--data``, else ``$ATTNKIT_DATA/NAME``, else a relative default.

``ATTNKIT_DATA`` names the folder that holds the data sets, one sub-folder
each (``mr/``, ``multi30k/``, ...). When it is unset the folder is
``../shared/data`` resolved against ``base``: the evaluations, examples and
tests pass the repository root, so the default is ``../shared/data`` next to
the repository; without ``base`` it is resolved against the working
directory. No absolute path of any one machine is built in::

    data_path("mr", args.data, base=REPO)   # --data, else $ATTNKIT_DATA/mr, else REPO/../shared/data/mr
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV_VAR", "DEFAULT_RELATIVE", "DataNotFoundError", "data_root", "data_path"]

ENV_VAR = "ATTNKIT_DATA"
"""The environment variable naming the folder that holds the data sets."""

DEFAULT_RELATIVE = Path("..") / "shared" / "data"
"""The data folder when ``ATTNKIT_DATA`` is unset, relative to the repository root (or the working directory)."""


class DataNotFoundError(FileNotFoundError):
    """A data set's folder is missing; the message says where it was looked for and how to point elsewhere."""


def data_root(base: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds the data sets: ``$ATTNKIT_DATA``, else ``base / ../shared/data``.

    ``base`` defaults to the working directory. The folder is not checked here
    (see :func:`data_path`).
    """
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return Path(value).expanduser()
    return (Path(base) if base is not None else Path.cwd()).joinpath(DEFAULT_RELATIVE).resolve()


def data_path(name: str, data: str | os.PathLike[str] | None = None, *,
              base: str | os.PathLike[str] | None = None, must_exist: bool = True) -> Path:
    """The folder of data set ``name``: ``data`` (a script's ``--data``) when given, else ``data_root(base) / name``.

    Raises:
        DataNotFoundError: ``must_exist`` and the folder (or file given as ``data``)
            does not exist; the message names ``--data`` and ``ATTNKIT_DATA``.
    """
    if not name or Path(name).name != name:
        raise ValueError(f"name must be one data set folder name such as 'mr', got {name!r}")
    if data is not None:
        path = Path(data).expanduser()
        hint = f"given with --data; without it the folder is ${ENV_VAR}/{name}"
    else:
        path = data_root(base) / name
        source = f"{ENV_VAR}={os.environ[ENV_VAR]}" if os.environ.get(ENV_VAR, "").strip() else (
            f"the default {DEFAULT_RELATIVE.as_posix()}, as {ENV_VAR} is unset")
        hint = (f"from {source}; pass --data FOLDER, or set {ENV_VAR} to the folder that holds the "
                f"data sets ({name}/ among them)")
    if must_exist and not path.exists():
        raise DataNotFoundError(f"data set {name!r} not found at {path} ({hint})")
    return path
