"""Optimizers and gradient clipping for the NumPy twin, updating parameters in place.

* SGD with momentum (Polyak; torch's form ``b = mu b + g``, ``p -= lr b``),
  optional Nesterov and L2 weight decay added to the gradient.
* Adam (Kingma & Ba, 2015) with bias-corrected moments, and AdamW
  (Loshchilov & Hutter, 2019), whose weight decay shrinks the parameter
  directly (``p -= lr wd p``) instead of entering the moments.

Each optimizer holds the dicts returned by ``Module.parameters()`` and
``Module.gradients()``; the arrays are shared, so a step changes the model.
"""

from __future__ import annotations

import math

import numpy as np

from attnkit.reference.module import load_arrays

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm"]

Params = dict[str, np.ndarray]


def clip_grad_norm(grads: Params, max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping (as ``torch.nn.utils.clip_grad_norm_``).
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be positive, got {max_norm!r}")
    total = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
    if total > max_norm:
        factor = max_norm / (total + 1e-6)
        for g in grads.values():
            g *= factor
    return total


class Optimizer:
    """Base: checks that parameters and gradients line up, holds the learning rate."""

    def __init__(self, params: Params, grads: Params, lr: float) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if params.keys() != grads.keys():
            raise ValueError("params and grads must have the same names")
        for name, p in params.items():
            if grads[name].shape != p.shape:
                raise ValueError(f"gradient {name!r} has shape {grads[name].shape}, parameter {p.shape}")
        self.params, self.grads, self.lr = params, grads, float(lr)

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> Params:
        """The arrays a resume restores (:meth:`load_state_dict`)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no resumable state")

    def load_state_dict(self, state: Params) -> None:
        """Restore :meth:`state_dict`; arrays of other names, shapes or dtypes are a ValueError."""
        load_arrays(self.state_dict(), state, "the optimizer's state")


class SGD(Optimizer):
    """``b = mu b + (g + wd p)``; ``p -= lr b`` (or ``lr (g + mu b)`` with Nesterov)."""

    def __init__(self, params: Params, grads: Params, lr: float, *, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, grads, lr)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.buffers: Params = {}

    def step(self) -> None:
        for name, p in self.params.items():
            g = self.grads[name] + self.weight_decay * p if self.weight_decay else self.grads[name]
            if self.momentum:
                buf = self.buffers.get(name)
                buf = g.copy() if buf is None else buf * self.momentum + g
                self.buffers[name] = buf
                g = g + self.momentum * buf if self.nesterov else buf
            p -= (self.lr * g).astype(p.dtype, copy=False)


class Adam(Optimizer):
    """``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``,
    ``p -= lr * m_hat / (sqrt(v_hat) + eps)``; L2 ``weight_decay`` enters ``g``."""

    decoupled = False

    def __init__(self, params: Params, grads: Params, lr: float = 1e-3, *,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, grads, lr)
        self.b1, self.b2 = betas
        self.eps, self.weight_decay = eps, weight_decay
        self.t = 0
        self.m: Params = {n: np.zeros_like(p) for n, p in params.items()}
        self.v: Params = {n: np.zeros_like(p) for n, p in params.items()}

    def step(self) -> None:
        self.t += 1
        c1, c2 = 1.0 - self.b1**self.t, 1.0 - self.b2**self.t
        for name, p in self.params.items():
            g = self.grads[name]
            if self.weight_decay and self.decoupled:
                p *= 1.0 - self.lr * self.weight_decay
            elif self.weight_decay:
                g = g + self.weight_decay * p
            m, v = self.m[name], self.v[name]
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * g * g
            p -= (self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(p.dtype, copy=False)

    def state_dict(self) -> Params:
        """The step count ``t`` (0-d) and the moments ``m.NAME``, ``v.NAME``."""
        return {"t": np.asarray(self.t, dtype=np.int64), **{f"m.{n}": a for n, a in self.m.items()},
                **{f"v.{n}": a for n, a in self.v.items()}}

    def load_state_dict(self, state: Params) -> None:
        super().load_state_dict(state)
        self.t = int(state["t"])


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p -= lr wd p`` before the Adam step."""

    decoupled = True

    def __init__(self, params: Params, grads: Params, lr: float = 1e-3, *,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
        super().__init__(params, grads, lr, betas=betas, eps=eps, weight_decay=weight_decay)
