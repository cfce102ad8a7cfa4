"""Softmax cross-entropy with its gradient.

``L = -1/N sum_n log softmax(z_n)[y_n]`` and ``dL/dz = (softmax(z) - onehot(y)) / N``.

Shape legend: N examples, C classes.
"""

from __future__ import annotations

import numpy as np

from attnkit.reference.module import Module

__all__ = ["log_softmax", "SoftmaxCrossEntropy"]


def log_softmax(z: np.ndarray) -> np.ndarray:
    """``z - logsumexp(z)`` over the last axis, computed with the row max subtracted."""
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class SoftmaxCrossEntropy(Module):
    """Mean cross-entropy of integer labels under ``softmax(logits)``.

    Shape:
        logits ``(N, C)``, labels ``(N,)`` ints in ``[0, C)``; returns a float.
    """

    def forward(self, logits: np.ndarray, labels: np.ndarray) -> float:
        if logits.ndim != 2:
            raise ValueError(f"logits must be 2-D (N, C), got shape {logits.shape}")
        labels = np.asarray(labels)
        if labels.shape != logits.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be integers of shape ({logits.shape[0]},), "
                             f"got {labels.dtype} {labels.shape}")
        if labels.size and (labels.min() < 0 or labels.max() >= logits.shape[1]):
            raise ValueError(f"labels must lie in [0, {logits.shape[1]}), got [{labels.min()}, {labels.max()}]")
        logp = log_softmax(logits)
        self._probs = np.exp(logp)
        self._labels = labels
        return float(-logp[np.arange(labels.size), labels].mean())

    def backward(self, grad: float = 1.0) -> np.ndarray:
        g = self._probs.copy()
        g[np.arange(self._labels.size), self._labels] -= 1.0
        return g * (grad / self._labels.size)
