"""One gradient check for every hand-written backward: central differences in float64.

For each checked element ``x_i`` of each input array::

    numeric_i = (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)

and the check passes when the relative error of each array,
``||analytic - numeric|| / (||analytic|| + ||numeric|| + floor)``, is at most
``tol``. The small ``floor`` keeps an exactly-zero gradient (a key-projection
bias under softmax, whose shift cancels) from dividing round-off by zero.
Central differences have truncation error ``O(eps^2)``, so in float64 with
``eps = 1e-5`` a correct gradient lands between ``1e-11`` and ``1e-7`` and a
wrong one near ``1``: the gap is what makes the check able to fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from attnkit.reference.module import Module

__all__ = ["GradcheckError", "GradcheckResult", "gradcheck", "module_gradcheck"]


class GradcheckError(AssertionError):
    """An analytic gradient disagrees with central differences."""


@dataclass(frozen=True)
class GradcheckResult:
    """Relative error per checked array, and the worst of them."""

    errors: dict[str, float]

    @property
    def worst(self) -> float:
        return max(self.errors.values(), default=0.0)


def gradcheck(
    fn: Callable[[], float],
    inputs: Mapping[str, np.ndarray],
    grads: Mapping[str, np.ndarray],
    *,
    eps: float = 1e-5,
    tol: float = 1e-6,
    max_elements: int | None = 64,
    floor: float = 1e-3,
    seed: int = 0,
    raise_on_fail: bool = True,
) -> GradcheckResult:
    """Compare analytic gradients with central differences of a scalar function.

    Args:
        fn: computes the scalar loss from the current contents of ``inputs``
            (the arrays are perturbed in place and restored).
        inputs: float64 arrays by name (activations and parameters alike).
        grads: the analytic gradient of ``fn`` for each name in ``inputs``.
        eps: finite-difference step.
        tol: largest allowed relative error.
        max_elements: check at most this many randomly chosen elements per
            array (``None``: all), to keep the check fast on large arrays.
        floor: added to the denominator of the relative error.
        seed: seed for choosing the elements.
        raise_on_fail: raise :class:`GradcheckError` naming the worst array.

    Returns:
        the relative error of each array.
    """
    rng = np.random.default_rng(seed)
    errors: dict[str, float] = {}
    for name, x in inputs.items():
        if x.dtype != np.float64:
            raise TypeError(f"gradcheck needs float64 inputs; {name} is {x.dtype}")
        if name not in grads:
            raise ValueError(f"grads has no entry for input {name!r}")
        g = np.asarray(grads[name])
        if g.shape != x.shape:
            raise ValueError(f"grads[{name!r}] has shape {g.shape}, input has {x.shape}")
        flat = x.reshape(-1)  # a view: perturbing it perturbs x
        if not np.shares_memory(flat, x):
            raise ValueError(f"input {name!r} must be contiguous so it can be perturbed in place")
        idx = np.arange(flat.size)
        if max_elements is not None and flat.size > max_elements:
            idx = rng.choice(flat.size, size=max_elements, replace=False)
        numeric = np.empty(idx.size)
        for n, i in enumerate(idx):
            old = flat[i]
            flat[i] = old + eps
            up = float(fn())
            flat[i] = old - eps
            down = float(fn())
            flat[i] = old
            numeric[n] = (up - down) / (2 * eps)
        analytic = g.reshape(-1)[idx]
        scale = float(np.linalg.norm(analytic) + np.linalg.norm(numeric)) + floor
        errors[name] = float(np.linalg.norm(analytic - numeric)) / scale
    result = GradcheckResult(errors)
    if raise_on_fail and result.worst > tol:
        bad = max(errors, key=lambda k: errors[k])
        raise GradcheckError(f"gradient of {bad!r} is off: relative error {errors[bad]:.3g} > {tol:g}; all: {errors}")
    return result


def module_gradcheck(
    module: Module,
    inputs: Mapping[str, np.ndarray],
    forward: Callable[..., np.ndarray],
    *,
    seed: int = 0,
    **kwargs: object,
) -> GradcheckResult:
    """Gradient-check a module's ``backward`` for its inputs and every parameter.

    The loss is ``sum(forward(**inputs) * R)`` for a fixed random ``R``, so every
    output element matters. ``forward`` calls the module (it may pass masks or
    fix a dropout seed); ``module.backward(R)`` must return the input gradients
    in the order of ``inputs`` (one array, or a tuple).
    """
    module.astype(np.float64)
    out = forward(**inputs)
    upstream = np.random.default_rng(seed + 1).standard_normal(out.shape)
    module.zero_grad()
    got = module.backward(upstream)  # type: ignore[attr-defined]
    got_t = got if isinstance(got, tuple) else (got,)
    if len(got_t) != len(inputs):
        raise ValueError(f"backward returned {len(got_t)} gradients for {len(inputs)} inputs")
    grads = dict(zip(inputs, got_t, strict=True))
    params = module.parameters()
    grads.update({f"param:{k}": v.copy() for k, v in module.gradients().items()})
    arrays = {**inputs, **{f"param:{k}": v for k, v in params.items()}}

    def loss() -> float:
        return float(np.sum(forward(**inputs) * upstream))

    return gradcheck(loss, arrays, grads, seed=seed, **kwargs)  # type: ignore[arg-type]
