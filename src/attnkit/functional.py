"""``attnkit.functional``: the name users import for :mod:`attnkit.attention.functional` (the same module object)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from attnkit.attention import functional as _module

if TYPE_CHECKING:
    from attnkit.attention.functional import *  # noqa: F403

sys.modules[__name__] = _module
