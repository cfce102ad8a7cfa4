"""Learning-rate schedules: each a pure function of the optimizer step, so resuming needs only the step.

Every schedule here takes ``step``, the number of optimizer steps already taken
(0 for the first step), and returns the factor by which the peak rate is
multiplied for that step. :class:`attnkit.train.Trainer` takes any of them as
``schedule(step, total_steps)``; :func:`for_config` is the default.

=================  ===============================================================
``warmup_linear``  linear warm-up, then linear decay to ``min_ratio`` (BERT; the
                   NumPy twin's trainer uses the very same function)
``inverse_sqrt``   linear warm-up, then decay with the inverse square root of the
                   step (Vaswani et al., 2017, eq. 3, normalised to peak 1)
``cosine``         half a cosine from 1 down to ``floor`` over ``total`` steps
=================  ===============================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from attnkit.reference.trainer import lr_factor as warmup_linear

__all__ = ["Schedule", "warmup_linear", "inverse_sqrt", "cosine", "for_config"]

Schedule = Callable[[int, int], float]
"""``schedule(step, total_steps) -> factor`` of the peak learning rate."""


def inverse_sqrt(step: int, warmup_steps: int) -> float:
    """``min(s / warmup_steps, sqrt(warmup_steps / s))`` at the ``s = step + 1``-th step; 1 without warm-up.

    This is eq. 3 of Vaswani et al. (2017) divided by its peak, reached at ``s = warmup_steps``.
    """
    s = step + 1
    return min(s / warmup_steps, math.sqrt(warmup_steps / s)) if warmup_steps > 0 else 1.0


def cosine(step: int, total: int, floor: float = 0.0) -> float:
    """``floor + (1 - floor) * (1 + cos(pi * step / total)) / 2``, held at ``floor`` after ``total`` steps."""
    progress = min(step / total, 1.0) if total > 0 else 1.0
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def for_config(config: Any) -> Schedule:
    """The warm-up/linear-decay schedule of a :class:`~attnkit.train.config.TrainConfig`."""
    def schedule(step: int, total: int) -> float:
        return warmup_linear(step, total, int(config.warmup_ratio * total), config.min_lr_ratio)
    return schedule
