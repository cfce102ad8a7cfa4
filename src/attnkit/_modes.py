"""A module in eval mode for a block of code, and its modes put back after.

:func:`eval_mode` is the one way attnkit runs a model for prediction,
attribution or probing without changing the mode it was handed in::

    with eval_mode(model):
        logits = model(ids, lengths)

Every submodule's own ``training`` flag is recorded before and restored after,
also when the block raises, so a model whose parts were in different modes (a
frozen encoder kept in eval inside a model being trained) comes back exactly
as it was, not flattened to the top module's mode.

This module imports nothing from attnkit and neither torch nor NumPy: it works
on anything with ``training``, ``eval()`` and ``named_modules()``, so the torch
models and the NumPy twin's :class:`attnkit.reference.module.Module` share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

__all__ = ["eval_mode"]


class Switchable(Protocol):
    """What :func:`eval_mode` needs: a torch ``nn.Module`` or the NumPy twin's ``Module``."""

    training: bool

    def eval(self) -> Any: ...

    def named_modules(self) -> Iterator[tuple[str, Any]]: ...


M = TypeVar("M", bound=Switchable)


@contextmanager
def eval_mode(module: M) -> Iterator[M]:
    """``module`` (and every submodule) in eval mode inside the ``with`` block; each one's mode is put back after,
    whether the block returns or raises. Yields ``module``."""
    modes = [(m, bool(m.training)) for _, m in module.named_modules()]
    try:
        module.eval()
        yield module
    finally:
        for m, mode in modes:
            m.training = mode
