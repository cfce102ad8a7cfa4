"""Hugging Face forward state attnkit's layers read: the position ids of the running model forward.

Kept apart from :mod:`attnkit.integrations.transformers` so that reading it loads no library.
"""

from __future__ import annotations

import contextvars

from torch import Tensor

__all__ = ["FORWARD_POSITION_IDS"]

FORWARD_POSITION_IDS: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar(
    "attnkit_forward_position_ids", default=None)
"""The ``position_ids`` of the Hugging Face model forward running on the attnkit backend (this thread or task):
set by :func:`attnkit.integrations.transformers.watch_positions`, read where a layer passes none."""
