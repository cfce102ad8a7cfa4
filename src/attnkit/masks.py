"""``attnkit.masks``: the name users import for :mod:`attnkit.core.masks`, whose names it re-exports."""

from __future__ import annotations

from typing import Any

from attnkit.core import masks as _core
from attnkit.core.masks import *  # noqa: F403
from attnkit.core.masks import __all__ as __all__


def __getattr__(name: str) -> Any:
    """Any other name of :mod:`attnkit.core.masks` (its helpers), read from it."""
    return getattr(_core, name)
