"""Static attention figures: token heatmaps, head grids, the layers × heads
overview, the positional-encoding matrix and a masked (causal) pattern.

Every function takes weights as a NumPy array or a torch tensor, returns the
matplotlib :class:`~matplotlib.figure.Figure` and, given ``path``, saves it
(PNG, SVG or PDF by extension). Figures are built without pyplot on the Agg
canvas: nothing is shown, nothing global is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnkit._lazy import require_extra

require_extra("plotting with attnkit.viz", "matplotlib")

from matplotlib import colormaps  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attnkit.viz._arrays import as_array, check_ndim, check_tokens, stack_layers  # noqa: E402
from attnkit.viz._figure import PathLike, label_axis, new_figure, save, shade_limits  # noqa: E402

__all__ = [
    "plot_attention",
    "plot_heads",
    "plot_layers_heads",
    "plot_positional_encoding",
    "plot_masked_attention",
]


def _text_colour(rgba: Any) -> str:
    """Black or white, whichever reads better on a cell of colour ``rgba`` (any colormap)."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _matrix(weights: Any, name: str = "weights") -> np.ndarray:
    w = as_array(weights, name)
    while w.ndim > 2 and w.shape[0] == 1:  # drop leading batch/head axes of size 1
        w = w[0]
    check_ndim(w, (2,), name, "(Tq, Tk)")
    return w


def plot_attention(
    weights: Any,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    title: str = "Attention weights",
    xlabel: str = "key",
    ylabel: str = "query",
    cmap: str = "viridis",
    annotate: bool | None = None,
    path: PathLike | None = None,
) -> Figure:
    """Token × token heatmap: row ``q`` shows how query ``q`` spreads its attention.

    Args:
        weights: attention weights of one head.
        tokens: the query tokens (and key tokens too, unless ``key_tokens`` is given).
        key_tokens: the key tokens, for cross-attention.
        annotate: write each weight in its cell (default: only up to 12 tokens).

    Shape:
        weights: ``(Tq, Tk)`` (leading axes of size 1 are dropped).
    """
    w = _matrix(weights)
    tq, tk = w.shape
    q_labels = check_tokens(tokens, tq, "tokens")
    k_labels = check_tokens(key_tokens if key_tokens is not None else tokens, tk, "key_tokens")
    side = min(14.0, 2.5 + 0.28 * max(tq, tk))
    fig = new_figure(side + 1.2, side)
    ax = fig.add_subplot()
    vmin, vmax = shade_limits(w)
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    label_axis(ax, "x", k_labels, rotation=45)
    label_axis(ax, "y", q_labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if annotate is None:
        annotate = max(tq, tk) <= 12
    if annotate:
        for i in range(tq):
            for j in range(tk):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color=_text_colour(im.cmap(im.norm(w[i, j]))))
    fig.colorbar(im, ax=ax, label="attention weight")
    return save(fig, path)


def plot_heads(
    weights: Any,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    cols: int = 4,
    title: str = "Attention heads",
    cmap: str = "viridis",
    path: PathLike | None = None,
) -> Figure:
    """One heatmap per head, on a shared colour scale.

    Shape:
        weights: ``(H, Tq, Tk)`` (a leading batch axis of size 1 is dropped).
    """
    w = as_array(weights)
    if w.ndim == 4 and w.shape[0] == 1:
        w = w[0]
    check_ndim(w, (3,), "weights", "(H, Tq, Tk)")
    h, tq, tk = w.shape
    if not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols: expected a positive int, got {cols!r}")
    q_labels = check_tokens(tokens, tq, "tokens")
    k_labels = check_tokens(key_tokens if key_tokens is not None else tokens, tk, "key_tokens")
    cols = min(cols, h)
    rows = -(-h // cols)
    cell = min(4.0, 1.2 + 0.14 * max(tq, tk))
    fig = new_figure(cell * cols + 1.2, cell * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False)
    vmin, vmax = shade_limits(w)
    im = None
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.set_axis_off()
            continue
        im = ax.imshow(w[i], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                       interpolation="nearest")
        ax.set_title(f"head {i}", fontsize=9)
        label_axis(ax, "x", k_labels, rotation=90)
        label_axis(ax, "y", q_labels)
        if i % cols == 0:
            ax.set_ylabel("query")
        if i // cols == rows - 1 or i + cols >= h:
            ax.set_xlabel("key")
    fig.suptitle(title)
    assert im is not None
    fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
    return save(fig, path)


def plot_layers_heads(
    attentions: Any,
    *,
    title: str = "Attention by layer and head",
    cmap: str = "viridis",
    path: PathLike | None = None,
) -> Figure:
    """Overview: a grid of small heatmaps, one row per layer and one column per head.

    Each cell is scaled to its own maximum (so diffuse and sharp heads are both
    visible); the colour bar reads as "fraction of the head's largest weight".

    Shape:
        attentions: ``(L, H, Tq, Tk)`` or a list of ``L`` arrays ``(H, Tq, Tk)``
        (a batch axis of size 1 after L is dropped).
    """
    a = stack_layers(attentions)
    if a.ndim == 5 and a.shape[1] == 1:
        a = a[:, 0]
    check_ndim(a, (4,), "attentions", "(L, H, Tq, Tk)")
    n_layers, n_heads = a.shape[:2]
    cell = 1.1 if max(n_layers, n_heads) > 8 else 1.5
    fig = new_figure(cell * n_heads + 1.4, cell * n_layers + 0.9)
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    peak = a.max(axis=(-2, -1), keepdims=True)
    scaled = np.divide(a, peak, out=np.zeros_like(a), where=peak > 0)
    im = None
    for li in range(n_layers):
        for hi in range(n_heads):
            ax = axes[li, hi]
            im = ax.imshow(scaled[li, hi], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto",
                           interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if li == 0:
                ax.set_title(f"head {hi}", fontsize=8)
            if hi == 0:
                ax.set_ylabel(f"layer {li}", fontsize=8)
    fig.supxlabel("heads (each cell: query rows × key columns)")
    fig.supylabel("layers")
    fig.suptitle(title)
    assert im is not None
    fig.colorbar(im, ax=axes, label="weight / head maximum", shrink=0.8)
    return save(fig, path)


def plot_positional_encoding(
    encoding: Any,
    *,
    title: str = "Sinusoidal positional encoding",
    path: PathLike | None = None,
) -> Figure:
    """The positional-encoding matrix, positions down and dimensions across.

    For the sinusoidal encoding (Vaswani et al., 2017),
    ``PE[t, 2i] = sin(t / 10000^(2i/D))`` and ``PE[t, 2i+1] = cos(...)``: the
    left columns oscillate fast, the right ones slowly.

    Shape:
        encoding: ``(T, D)``.
    """
    pe = as_array(encoding, "encoding")
    check_ndim(pe, (2,), "encoding", "(T, D)")
    t, d = pe.shape
    fig = new_figure(min(12.0, 3.0 + 0.05 * d), min(8.0, 2.5 + 0.05 * t))
    ax = fig.add_subplot()
    lim = max(float(np.abs(pe).max()), 1e-12)
    im = ax.imshow(pe, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax.set_xlabel("embedding dimension")
    ax.set_ylabel("position")
    ax.set_title(f"{title} (T={t}, D={d})")
    fig.colorbar(im, ax=ax, label="value")
    return save(fig, path)


def plot_masked_attention(
    weights: Any,
    mask: Any = None,
    tokens: Sequence[str] | None = None,
    *,
    title: str = "Causal attention",
    cmap: str = "viridis",
    path: PathLike | None = None,
) -> Figure:
    """Heatmap of a masked attention pattern, masked cells drawn in grey.

    Args:
        weights: attention weights of one head.
        mask: boolean, True where the query MAY attend (the attnkit rule);
            default: the bottom-right aligned causal mask.

    Shape:
        weights: ``(Tq, Tk)``; mask broadcastable to ``(Tq, Tk)``.
    """
    w = _matrix(weights)
    tq, tk = w.shape
    if mask is None:
        allowed = np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)
    else:
        m = as_array(mask, "mask", dtype=bool)
        while m.ndim > 2 and m.shape[0] == 1:
            m = m[0]
        try:
            allowed = np.broadcast_to(m, (tq, tk))
        except ValueError as err:
            raise ValueError(f"mask: expected a shape broadcastable to {(tq, tk)}, got {m.shape}") from err
    labels = check_tokens(tokens, tq, "tokens")
    k_labels = check_tokens(tokens if tq == tk else None, tk, "tokens")
    side = min(14.0, 2.5 + 0.28 * max(tq, tk))
    fig = new_figure(side + 1.2, side)
    ax = fig.add_subplot()
    shown = np.ma.masked_array(w, mask=~allowed)
    colours = colormaps[cmap].with_extremes(bad="#d0d0d0")
    vmin, vmax = shade_limits(np.where(allowed, w, 0.0))
    im = ax.imshow(shown, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    label_axis(ax, "x", k_labels, rotation=45)
    label_axis(ax, "y", labels)
    ax.set_xlabel("key (grey: masked)")
    ax.set_ylabel("query")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="attention weight")
    return save(fig, path)
