"""``attnkit.masks``: the name users import for :mod:`attnkit.attention.masks` (the same module object)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from attnkit.attention import masks as _module

if TYPE_CHECKING:
    from attnkit.attention.masks import *  # noqa: F403

sys.modules[__name__] = _module
