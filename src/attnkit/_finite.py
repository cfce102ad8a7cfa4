"""Finite or nothing: what every training loop does with a step whose loss or gradient norm is not finite.

One policy for the torch loop (:class:`attnkit.train.Trainer`, which the
classification, translation and captioning tasks share) and the NumPy twin's
loop (:class:`attnkit.reference.trainer.Trainer`), chosen by ``on_nan``:

``"stop"`` (the default)
    raise :class:`NonFiniteError` naming the epoch, the step and the settings
    that help (by their config names in backticks, which a command writes as
    its flags: :func:`attnkit.cli.messages.in_flags`);
    nothing of the failed epoch is committed, so a run folder keeps its last
    committed state (and a run being overwritten keeps the old one).
``"skip-step"``
    leave the weights and the optimizer as they were for that step, count the
    skip, and stop as above after :data:`MAX_SKIPS_IN_A_ROW` skips in a row
    (a model whose every step diverges is not trained by skipping).

Weights are checked once more before a loop hands them over for a commit
(:func:`refuse_non_finite`), and so are the validation figures
(:func:`refuse_non_finite_metrics`: finite weights whose outputs are NaN are
no more usable); loading refuses a weights file that holds a
NaN or an infinity with the same message.

This module imports nothing from attnkit and neither torch nor NumPy, so
both loops (and the NumPy twin, which loads no torch) use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ON_NAN", "MAX_SKIPS_IN_A_ROW", "NonFiniteError", "StepGuard", "check_on_nan", "refuse_non_finite",
           "refuse_non_finite_metrics", "non_finite_message", "non_finite_names"]

ON_NAN = ("stop", "skip-step")
"""The valid values of ``on_nan`` (``--on-nan``)."""

MAX_SKIPS_IN_A_ROW = 10
"""``on_nan="skip-step"`` stops after this many non-finite steps in a row."""

# What helps, by the settings' names: every command that trains spells its flags alike where it has them.
_CALMER = "Lower the learning rate `lr` or clip the gradient norm with `clip_norm`"


class NonFiniteError(ValueError):
    """Training produced a non-finite loss, gradient norm or weight; the message says where and what to change."""


def check_on_nan(value: object) -> str:
    """``value`` if it is one of :data:`ON_NAN`, else a ValueError naming ``on_nan``."""
    if not isinstance(value, str) or value not in ON_NAN:
        raise ValueError(f"on_nan must be one of {list(ON_NAN)}, got {value!r}")
    return value


def _shown(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:g}"


class StepGuard:
    """Decides, step by step, whether an optimizer step may be taken.

    Args:
        on_nan: ``"stop"`` or ``"skip-step"`` (see the module docstring).
        max_skips: with ``"skip-step"``, stop after this many skips in a row.

    Attributes:
        skipped: steps skipped so far.
        in_a_row: skips since the last step taken.
    """

    def __init__(self, on_nan: str = "stop", *, max_skips: int = MAX_SKIPS_IN_A_ROW) -> None:
        self.on_nan = check_on_nan(on_nan)
        if isinstance(max_skips, bool) or not isinstance(max_skips, int) or max_skips <= 0:
            raise ValueError(f"max_skips must be a positive int, got {max_skips!r}")
        self.max_skips = max_skips
        self.skipped = 0
        self.in_a_row = 0

    def allow(self, loss: float, grad_norm: float, *, epoch: int, step: int) -> bool:
        """True when step ``step`` (1-based, of epoch ``epoch``, 1-based) may be applied; False to skip it.

        Raises :class:`NonFiniteError` when the step is not finite and the
        policy is ``"stop"``, or after too many skips in a row.
        """
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.in_a_row = 0
            return True
        what = f"the loss is {_shown(loss)} and the gradient norm {_shown(grad_norm)}"
        where = f"epoch {epoch}, step {step}"
        if self.on_nan == "stop":
            raise NonFiniteError(
                f"training diverged at {where}: {what}; nothing of this epoch was committed. "
                f"{_CALMER}, or set `on_nan` to skip-step to skip such steps")
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row >= self.max_skips:
            raise NonFiniteError(
                f"training diverged at {where}: {what}, the {self.in_a_row}th non-finite step in a row that "
                f"`on_nan` skip-step skipped; nothing of this epoch was committed. {_CALMER}")
        return False


def non_finite_message(source: str, names: Sequence[str]) -> str:
    """One line: ``source`` holds NaN or infinite values in the tensors ``names``."""
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{source} holds NaN or infinite values in {len(names)} tensor(s) ({shown})"


def non_finite_names(tensors: Mapping[str, Any]) -> list[str]:
    """The names of the floating-point torch tensors of ``tensors`` (any float dtype: float32, bfloat16,
    float16...) that hold a NaN or an infinity; read through the tensors' own methods, so this module
    imports no torch."""
    return [name for name, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]


def refuse_non_finite(names: Sequence[str], *, epoch: int, step: int) -> None:
    """Raise :class:`NonFiniteError` when the trained weights ``names`` are not finite (nothing is committed)."""
    if names:
        raise NonFiniteError(
            f"training diverged by epoch {epoch}, step {step}: "
            f"{non_finite_message('the model', list(names))}; nothing of this epoch was committed. "
            f"{_CALMER}; `on_nan` skip-step cannot undo weights that are already non-finite")


def refuse_non_finite_metrics(metrics: Mapping[str, object], *, epoch: int, step: int) -> None:
    """Raise :class:`NonFiniteError` when a figure of ``metrics`` (validation loss...) is NaN or infinite."""
    bad = {k: v for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)}
    if bad:
        shown = ", ".join(f"{k} {_shown(v)}" for k, v in sorted(bad.items()))
        raise NonFiniteError(
            f"training diverged by epoch {epoch}, step {step}: the model's outputs are not finite ({shown}); "
            f"nothing of this epoch was committed. {_CALMER}")
