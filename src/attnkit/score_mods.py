"""``attnkit.score_mods``: the name users import for :mod:`attnkit.core.score_mods`, whose names it re-exports."""

from __future__ import annotations

from typing import Any

from attnkit.core import score_mods as _core
from attnkit.core.score_mods import *  # noqa: F403
from attnkit.core.score_mods import __all__ as __all__


def __getattr__(name: str) -> Any:
    """Any other name of :mod:`attnkit.core.score_mods` (its helpers), read from it."""
    return getattr(_core, name)
