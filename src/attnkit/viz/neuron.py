"""The data of the report's neuron view (as in bertviz's neuron view, drawn offline).

For one layer, one head and one query token the view shows the query vector
``q``, every key vector ``k_j``, their elementwise product ``q * k_j`` (whose
sum is the logit before scaling), the scaled score ``q · k_j / sqrt(Dh)`` and
the attention weight the model gave key ``j`` (the recorded softmax, masks
included). The vectors travel in the page as little-endian float32; the view
itself is drawn by the report's script (:mod:`attnkit.viz._neuron_assets`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnkit.viz._arrays import as_array, check_tokens

__all__ = ["neuron_data", "MAX_NEURON_VALUES"]

MAX_NEURON_VALUES = 4_000_000
"""At most this many numbers (q, k and weights together) go into one page."""


def _f32(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def neuron_data(tokens: Sequence[str], queries: Any, keys: Any, weights: Any,
                layer_names: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None) -> dict[str, Any]:
    """Pack query and key vectors and weights for the neuron view.

    Shape:
        tokens ``Tq`` strings; queries ``(L, H, Tq, Dh)``; keys ``(L, Hkv, Tk, Dh)``
        (grouped key heads are shared across their query heads); weights ``(L, H, Tq, Tk)``.
    """
    q = as_array(queries, "queries", dtype=np.float32)
    k = as_array(keys, "keys", dtype=np.float32)
    w = as_array(weights, "weights", dtype=np.float32)
    if q.ndim != 4 or k.ndim != 4 or w.ndim != 4:
        raise ValueError(f"neuron view: expected queries (L, H, Tq, Dh), keys (L, Hkv, Tk, Dh) and weights "
                         f"(L, H, Tq, Tk), got {q.shape}, {k.shape}, {w.shape}")
    n_layers, heads, tq, dh = q.shape
    if k.shape[0] != n_layers or heads % k.shape[1] or k.shape[3] != dh:
        raise ValueError(f"neuron view: keys {k.shape} do not fit queries {q.shape}")
    if k.shape[1] != heads:
        k = np.repeat(k, heads // k.shape[1], axis=1)  # (L, H, Tk, Dh)
    tk = k.shape[2]
    if w.shape != (n_layers, heads, tq, tk):
        raise ValueError(f"neuron view: weights {w.shape} do not match ({n_layers}, {heads}, {tq}, {tk})")
    if q.size + k.size + w.size > MAX_NEURON_VALUES:
        raise ValueError(f"neuron view: {q.size + k.size + w.size} numbers exceed {MAX_NEURON_VALUES}; "
                         "choose fewer layers (names=) or a shorter input")
    queries_text = check_tokens(list(tokens)[:tq], tq, "tokens")
    keys_text = check_tokens(list(key_tokens) if key_tokens is not None else queries_text, tk, "key_tokens")
    names = [str(n) for n in layer_names] if layer_names is not None else [str(i) for i in range(n_layers)]
    if len(names) != n_layers:
        raise ValueError(f"layer_names: expected {n_layers} names, got {len(names)}")
    return {"queries": queries_text, "keys": keys_text, "layers": names, "L": n_layers, "H": heads,
            "Tq": tq, "Tk": tk, "Dh": dh, "q": _f32(q), "k": _f32(k), "w": _f32(w)}
