"""``attnkit.functional``: the name users import for :mod:`attnkit.core.functional`, whose names it re-exports."""

from __future__ import annotations

from typing import Any

from attnkit.core import functional as _core
from attnkit.core.functional import *  # noqa: F403
from attnkit.core.functional import __all__ as __all__


def __getattr__(name: str) -> Any:
    """Any other name of :mod:`attnkit.core.functional` (its helpers), read from it."""
    return getattr(_core, name)
