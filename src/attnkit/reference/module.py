"""The layer protocol of the NumPy twin: explicit forward and backward.

Every layer is a :class:`Module`. ``forward(x)`` computes the output and
caches what the backward pass needs; ``backward(grad)`` takes the gradient of
the loss with respect to the output, returns the gradient with respect to the
input(s) and *adds* the parameter gradients into ``grads`` (call
:meth:`Module.zero_grad` between steps, as in torch).

Parameters live in ``params`` (own arrays) and child modules in attributes;
:meth:`Module.parameters` walks the tree and returns torch-style dotted names
(``encoder.layers.0.self_attn.q_proj.weight``), so weights move between the
twin and torch through one safetensors file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["Module", "ModuleList", "check_array", "check_positive", "check_dropout", "load_arrays"]


def check_positive(name: str, value: object) -> int:
    """Validate a positive int argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def check_dropout(value: object) -> float:
    """Validate a dropout probability in ``[0, 1)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {value!r}")
    return float(value)


def check_array(name: str, x: object, ndim: int, legend: str, width: int | None = None) -> np.ndarray:
    """Validate a floating array of ``ndim`` dims (and last dim ``width``); name it in errors."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must be a floating array, got dtype {x.dtype}")
    if x.ndim != ndim or (width is not None and x.shape[-1] != width):
        raise ValueError(f"{name} must be {ndim}-D {legend}, got shape {x.shape}")
    return x


def load_arrays(into: dict[str, np.ndarray], arrays: dict[str, np.ndarray], what: str) -> None:
    """Copy ``arrays`` into the arrays of ``into`` in place; other names, shapes or dtypes are a ValueError
    naming ``what``, and nothing is copied."""
    wrong = sorted(set(into) ^ set(arrays)) or [k for k, v in into.items()
                                                 if (arrays[k].shape, arrays[k].dtype) != (v.shape, v.dtype)]
    if wrong:
        raise ValueError(f"{what} does not fit: {', '.join(wrong[:4])}")
    for k, v in into.items():
        v[...] = arrays[k]


class Module:
    """Base class: parameters, gradients, children, train/eval mode.

    Subclasses register arrays with :meth:`add_param` and assign child modules
    as attributes; both are found by :meth:`parameters` in definition order.
    """

    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    _children: dict[str, Module]
    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "params", {})
        object.__setattr__(self, "grads", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def add_param(self, name: str, value: np.ndarray) -> np.ndarray:
        """Register a parameter array (and a zero gradient of its shape)."""
        self.params[name] = value
        self.grads[name] = np.zeros_like(value)
        return value

    def children(self) -> Iterator[tuple[str, Module]]:
        yield from self._children.items()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}{name}.")

    def parameters(self) -> dict[str, np.ndarray]:
        """All parameters by dotted name (the arrays themselves, not copies)."""
        return {f"{p}{n}": a for p, m in self.named_modules() for n, a in m.params.items()}

    def gradients(self) -> dict[str, np.ndarray]:
        """All parameter gradients by dotted name, aligned with :meth:`parameters`."""
        return {f"{p}{n}": a for p, m in self.named_modules() for n, a in m.grads.items()}

    def zero_grad(self) -> None:
        for _, m in self.named_modules():
            for g in m.grads.values():
                g.fill(0.0)

    def train(self, mode: bool = True) -> Module:
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def astype(self, dtype: type | np.dtype) -> Module:
        """Cast every parameter (and gradient) in place to ``dtype``; returns self."""
        for _, m in self.named_modules():
            for n in list(m.params):
                m.params[n] = m.params[n].astype(dtype)
                m.grads[n] = np.zeros_like(m.params[n])
        return self

    def num_parameters(self) -> int:
        return sum(a.size for a in self.parameters().values())


class ModuleList(Module):
    """A numbered list of modules; children are named ``0``, ``1``, ..."""

    def __init__(self, modules: list[Module]) -> None:
        super().__init__()
        self._items = list(modules)
        for i, m in enumerate(self._items):
            self._children[str(i)] = m

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> Module:
        return self._items[index]
