"""Basic layers of the NumPy twin: Linear, Embedding, LayerNorm, Dropout, activations,
the feed-forward block, sinusoidal positions and a softmax layer.

Parameter names and initialisations follow torch (``weight`` is ``(out, in)``
for :class:`Linear`), so weights copy across one to one.

Shape legend: B batch, T length, D model width, F feed-forward width.
"""

from __future__ import annotations

import math

import numpy as np

from attnkit.reference.functional import safe_softmax, softmax_backward
from attnkit.reference.module import Module, check_dropout, check_positive

__all__ = [
    "Linear",
    "Embedding",
    "LayerNorm",
    "Dropout",
    "ReLU",
    "FEED_FORWARD_ACTIVATIONS",
    "GELU",
    "FeedForward",
    "Softmax",
    "sinusoidal_positions",
    "SinusoidalPositionalEncoding",
]

Array = np.ndarray


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng()


class Linear(Module):
    """``y = x W^T + b`` over the last axis.

    Backward: ``dx = dy W``, ``dW = dy^T x``, ``db = sum dy`` (summed over all leading axes).

    Shape:
        x ``(..., in_features)``; returns ``(..., out_features)``.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True,
                 rng: np.random.Generator | None = None, dtype: type = np.float32) -> None:
        super().__init__()
        self.in_features = check_positive("in_features", in_features)
        self.out_features = check_positive("out_features", out_features)
        bound = 1.0 / math.sqrt(in_features)  # torch's default (kaiming uniform, a=sqrt(5))
        gen = _rng(rng)
        self.add_param("weight", gen.uniform(-bound, bound, (out_features, in_features)).astype(dtype))
        if bias:
            self.add_param("bias", gen.uniform(-bound, bound, (out_features,)).astype(dtype))
        self._x: Array | None = None

    def forward(self, x: Array) -> Array:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must be (..., {self.in_features}), got shape {x.shape}")
        self._x = x
        y = x @ self.params["weight"].T
        return y + self.params["bias"] if "bias" in self.params else y

    def backward(self, grad: Array) -> Array:
        assert self._x is not None, "backward called before forward"
        x2 = self._x.reshape(-1, self.in_features)  # (N, in)
        g2 = grad.reshape(-1, self.out_features)  # (N, out)
        self.grads["weight"] += g2.T @ x2
        if "bias" in self.params:
            self.grads["bias"] += g2.sum(axis=0)
        return grad @ self.params["weight"]


class Embedding(Module):
    """Table lookup ``y = W[ids]``; the gradient scatters back with ``np.add.at``.

    ``padding_idx`` rows get no gradient (as in torch).

    Shape:
        ids ``(B, T)`` ints; returns ``(B, T, D)``.
    """

    def __init__(self, num_embeddings: int, dim: int, *, padding_idx: int | None = None,
                 rng: np.random.Generator | None = None, dtype: type = np.float32) -> None:
        super().__init__()
        self.num_embeddings = check_positive("num_embeddings", num_embeddings)
        self.dim = check_positive("dim", dim)
        self.padding_idx = padding_idx
        w: np.ndarray = _rng(rng).standard_normal((num_embeddings, dim)).astype(dtype)
        if padding_idx is not None:
            w[padding_idx] = 0.0
        self.add_param("weight", w)
        self._ids: Array | None = None

    def forward(self, ids: Array) -> Array:
        if not isinstance(ids, np.ndarray) or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"ids must be an integer numpy.ndarray, got {getattr(ids, 'dtype', type(ids))}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise ValueError(f"ids must lie in [0, {self.num_embeddings}), got range [{ids.min()}, {ids.max()}]")
        self._ids = ids
        return self.params["weight"][ids]

    def backward(self, grad: Array) -> None:
        assert self._ids is not None, "backward called before forward"
        np.add.at(self.grads["weight"], self._ids.reshape(-1), grad.reshape(-1, self.dim))
        if self.padding_idx is not None:
            self.grads["weight"][self.padding_idx] = 0.0
        return None


class LayerNorm(Module):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (Ba et al., 2016).

    Backward with ``xhat`` the normalised input and ``g = dy * weight``::

        dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps)

    Shape:
        x ``(..., D)``; returns ``(..., D)``.
    """

    def __init__(self, dim: int, eps: float = 1e-5, dtype: type = np.float32) -> None:
        super().__init__()
        self.dim = check_positive("dim", dim)
        self.eps = eps
        self.add_param("weight", np.ones(dim, dtype=dtype))
        self.add_param("bias", np.zeros(dim, dtype=dtype))
        self._cache: tuple[Array, Array] | None = None

    def forward(self, x: Array) -> Array:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x must be (..., {self.dim}), got shape {x.shape}")
        mu = x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + self.eps)
        xhat = (x - mu) * inv
        self._cache = (xhat, inv)
        return xhat * self.params["weight"] + self.params["bias"]

    def backward(self, grad: Array) -> Array:
        assert self._cache is not None, "backward called before forward"
        xhat, inv = self._cache
        lead = tuple(range(grad.ndim - 1))
        self.grads["weight"] += (grad * xhat).sum(axis=lead)
        self.grads["bias"] += grad.sum(axis=lead)
        g = grad * self.params["weight"]
        return (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) * inv


class Dropout(Module):
    """Inverted dropout: in training keep each entry with probability ``1 - p`` and
    scale it by ``1 / (1 - p)``; identity in eval mode. ``rng`` makes it repeatable."""

    def __init__(self, p: float = 0.0, *, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        self.p = check_dropout(p)
        self.rng = _rng(rng)
        self._keep: Array | None = None

    def forward(self, x: Array) -> Array:
        if not self.training or self.p == 0.0:
            self._keep = None
            return x
        self._keep = (self.rng.random(x.shape) >= self.p).astype(x.dtype) / (1.0 - self.p)
        return x * self._keep

    def backward(self, grad: Array) -> Array:
        return grad if self._keep is None else grad * self._keep


class ReLU(Module):
    """``max(x, 0)``; gradient 1 where ``x > 0``."""

    def forward(self, x: Array) -> Array:
        self._pos = x > 0
        return np.where(self._pos, x, 0.0).astype(x.dtype, copy=False)

    def backward(self, grad: Array) -> Array:
        return np.where(self._pos, grad, 0.0).astype(grad.dtype, copy=False)


_erf = np.vectorize(math.erf, otypes=[np.float64])


class GELU(Module):
    """``x * Phi(x)`` with ``Phi`` the normal CDF (Hendrycks & Gimpel, 2016), as torch's
    ``nn.GELU()``; ``approximate="tanh"`` uses ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Backward: ``d/dx = Phi(x) + x phi(x)`` (exact form).
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Array) -> Array:
        self._x = x
        if self.approximate == "tanh":
            c = math.sqrt(2.0 / math.pi)
            self._t = np.tanh(c * (x + 0.044715 * x**3))
            return (0.5 * x * (1.0 + self._t)).astype(x.dtype, copy=False)
        self._cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
        return (x * self._cdf).astype(x.dtype, copy=False)

    def backward(self, grad: Array) -> Array:
        x = self._x
        if self.approximate == "tanh":
            c = math.sqrt(2.0 / math.pi)
            d = 0.5 * (1.0 + self._t) + 0.5 * x * (1.0 - self._t**2) * c * (1.0 + 3 * 0.044715 * x**2)
        else:
            d = self._cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return (grad * d).astype(grad.dtype, copy=False)


FEED_FORWARD_ACTIVATIONS: dict[str, type[ReLU | GELU]] = {"relu": ReLU, "gelu": GELU}
"""The activations of the twin's :class:`FeedForward` (a subset of :data:`attnkit.layer_config.ACTIVATION_NAMES`)."""


class FeedForward(Module):
    """Position-wise feed-forward ``linear2(dropout(act(linear1(x))))`` (Vaswani et al., 2017).

    ``activation`` is a name in :data:`FEED_FORWARD_ACTIVATIONS` (``"relu"`` or ``"gelu"``);
    names ``linear1``/``linear2`` match torch's ``nn.TransformerEncoderLayer``.

    Shape:
        x ``(..., D)``; returns ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu",
                 dropout: float = 0.0, rng: np.random.Generator | None = None,
                 dtype: type = np.float32) -> None:
        super().__init__()
        acts = FEED_FORWARD_ACTIVATIONS
        if activation not in acts:
            raise ValueError(f"activation must be one of {sorted(acts)}, got {activation!r}")
        gen = _rng(rng)
        self.linear1 = Linear(d_model, d_ff, rng=gen, dtype=dtype)
        self.activation = acts[activation]()
        self.dropout = Dropout(dropout, rng=gen)
        self.linear2 = Linear(d_ff, d_model, rng=gen, dtype=dtype)

    def forward(self, x: Array) -> Array:
        return self.linear2.forward(self.dropout.forward(self.activation.forward(self.linear1.forward(x))))

    def backward(self, grad: Array) -> Array:
        g = self.dropout.backward(self.linear2.backward(grad))
        return self.linear1.backward(self.activation.backward(g))


class Softmax(Module):
    """The stable, mask-aware softmax over the last axis as a layer.

    Shape:
        x ``(..., T)``; mask broadcastable; returns ``(..., T)``.
    """

    def forward(self, x: Array, mask: Array | None = None) -> Array:
        self._y = safe_softmax(x, mask).astype(x.dtype, copy=False)
        return self._y

    def backward(self, grad: Array) -> Array:
        return softmax_backward(self._y, grad)


def sinusoidal_positions(length: int, dim: int, dtype: type = np.float32) -> Array:
    """``PE[p, 2i] = sin(p / 10000^(2i/D))``, ``PE[p, 2i+1] = cos(p / 10000^(2i/D))``
    (Vaswani et al., 2017, section 3.5).

    Shape:
        returns ``(length, dim)``.
    """
    pos = np.arange(length, dtype=np.float64)[:, None]  # (T, 1)
    freq = np.exp(-math.log(10000.0) * np.arange(0, dim, 2, dtype=np.float64) / dim)  # (ceil(D/2),)
    pe = np.zeros((length, dim))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq[: dim // 2])
    return pe.astype(dtype)


class SinusoidalPositionalEncoding(Module):
    """Adds fixed sinusoidal positions: ``y = x + PE[:T]`` (no parameters).

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)``.
    """

    def __init__(self, dim: int, max_len: int = 4096) -> None:
        super().__init__()
        self.dim = check_positive("dim", dim)
        self.table = sinusoidal_positions(max_len, dim, np.float64)

    def forward(self, x: Array) -> Array:
        t = x.shape[1]
        if t > self.table.shape[0]:
            self.table = sinusoidal_positions(t, self.dim, np.float64)
        return x + self.table[:t].astype(x.dtype, copy=False)

    def backward(self, grad: Array) -> Array:
        return grad
