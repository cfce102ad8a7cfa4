"""``attnkit.score_mods``: the name users import for :mod:`attnkit.attention.score_mods` (the same module object)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from attnkit.attention import score_mods as _module

if TYPE_CHECKING:
    from attnkit.attention.score_mods import *  # noqa: F403

sys.modules[__name__] = _module
