"""Turning whatever holds attention weights into checked NumPy arrays.

``attnkit.viz`` reads weights from attnkit layers (torch tensors), from the
NumPy twin (arrays) and from pretrained models (tuples of tensors, one per
layer). Everything passes through :func:`as_array`, which never imports torch:
a tensor is recognised by its ``detach`` method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["as_array", "is_layer_list", "stack_layers", "check_tokens", "check_ndim"]


def as_array(x: Any, name: str = "weights", dtype: Any = np.float64) -> np.ndarray:
    """Return ``x`` as a NumPy array of ``dtype`` (``None``: floats keep their precision,
    anything else becomes float64).

    Accepts NumPy arrays, nested lists and torch tensors (on any device, with or
    without grad: they are detached and moved to the CPU first).
    """
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":  # NumPy has no bfloat16
            x = x.float()
    try:
        arr = np.asarray(x, dtype=dtype)
        if dtype is None and not np.issubdtype(arr.dtype, np.floating):
            arr = arr.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{name}: expected an array, a torch tensor or nested lists of numbers, "
            f"got {type(x).__name__}"
        ) from err
    return arr


def is_layer_list(x: Any) -> bool:
    """True for a list/tuple of per-layer arrays or tensors (not for nested lists of numbers)."""
    return (isinstance(x, (list, tuple)) and len(x) > 0 and not np.isscalar(x[0])
            and not isinstance(x[0], (list, tuple)))


def stack_layers(x: Any, name: str = "attentions", dtype: Any = np.float64) -> np.ndarray:
    """Stack a list/tuple of per-layer weights into one array along a new axis 0.

    A list of ``(H, Tq, Tk)`` (or ``(B, H, Tq, Tk)``) arrays or tensors becomes
    ``(L, H, Tq, Tk)`` (or ``(L, B, H, Tq, Tk)``); an array is returned as is.
    """
    if is_layer_list(x):
        layers = [as_array(t, f"{name}[{i}]", dtype) for i, t in enumerate(x)]
        shapes = {a.shape for a in layers}
        if len(shapes) != 1:
            raise ValueError(f"{name}: every layer must have the same shape, got {sorted(shapes)}")
        return np.stack(layers, axis=0)
    return as_array(x, name, dtype)


def check_ndim(arr: np.ndarray, ndims: Sequence[int], name: str, legend: str) -> None:
    """Raise ValueError unless ``arr.ndim`` is one of ``ndims``."""
    if arr.ndim not in ndims:
        raise ValueError(f"{name}: expected shape {legend}, got {tuple(arr.shape)}")


def check_tokens(tokens: Any, length: int, name: str = "tokens") -> list[str]:
    """Return ``tokens`` as a list of ``length`` strings (None means positions ``0..length-1``)."""
    if tokens is None:
        return [str(i) for i in range(length)]
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name}: expected a sequence of strings, got {type(tokens).__name__}")
    if len(tokens) != length:
        raise ValueError(f"{name}: expected {length} tokens to match the weights, got {len(tokens)}")
    return [str(t) for t in tokens]
