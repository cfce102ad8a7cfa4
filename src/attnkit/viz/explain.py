"""Figures that explain a prediction: a classification shaded by attention, the
cross-attention alignment of a translation, and 2-D attention over an image
(one panel per word of a caption, as in Xu et al., 2015, "Show, Attend and Tell").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnkit._lazy import require_extra

require_extra("plotting with attnkit.viz", "matplotlib")

from matplotlib import colormaps  # noqa: E402
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attnkit.viz._arrays import as_array, check_ndim, check_tokens  # noqa: E402
from attnkit.viz._figure import PathLike, label_axis, new_figure, save, shade_limits  # noqa: E402
from attnkit.viz.plots import plot_attention  # noqa: E402

__all__ = [
    "plot_classification",
    "plot_alignment",
    "upsample",
    "plot_image_attention",
    "plot_caption_attention",
]


def plot_classification(
    tokens: Sequence[str],
    scores: Any,
    *,
    label: str,
    probability: float,
    title: str = "Why the model predicted this",
    cmap: str = "Reds",
    path: PathLike | None = None,
) -> Figure:
    """The input text with each token shaded by its attention, and a bar per token.

    ``scores`` is typically the attention of the pooling query (or of ``[CLS]``)
    over the tokens, or a row of :func:`~attnkit.viz.measures.attention_rollout`.

    Shape:
        tokens: ``T`` strings; scores: ``(T,)``.
    """
    s = as_array(scores, "scores").reshape(-1)
    toks = check_tokens(tokens, s.shape[0], "tokens")
    if not 0.0 <= float(probability) <= 1.0:
        raise ValueError(f"probability: expected a value in [0, 1], got {probability!r}")
    vmin, vmax = shade_limits(s)
    norm = Normalize(vmin, vmax)
    colours = colormaps[cmap]
    per_line = 12
    lines = -(-len(toks) // per_line)
    fig = new_figure(10.0, 1.2 + 0.45 * lines + 2.6)
    text_ax, bar_ax = fig.subplots(2, 1, height_ratios=[0.45 * lines + 0.6, 2.4])
    text_ax.set_axis_off()
    text_ax.set_xlim(0, per_line)
    text_ax.set_ylim(lines, -0.4)
    for i, (tok, val) in enumerate(zip(toks, s, strict=True)):
        rgba = colours(norm(val) * 0.85)
        dark = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.55
        text_ax.text(i % per_line + 0.5, i // per_line + 0.2, tok, ha="center", va="center",
                     fontsize=10, color="white" if dark else "black",
                     bbox={"facecolor": rgba, "edgecolor": "none", "pad": 2.0})
    text_ax.set_title(f"{title}\npredicted: {label}  (p = {float(probability):.2f})")
    x = np.arange(len(toks))
    bar_ax.bar(x, s, color=[colours(norm(v) * 0.85) for v in s])
    label_axis(bar_ax, "x", toks, rotation=45)
    bar_ax.set_xlim(-0.6, len(toks) - 0.4)
    bar_ax.set_xlabel("token")
    bar_ax.set_ylabel("attention")
    fig.colorbar(ScalarMappable(norm=norm, cmap=colours), ax=[text_ax, bar_ax],
                 label="attention weight", shrink=0.8)
    return save(fig, path)


def plot_alignment(
    weights: Any,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    *,
    title: str = "Cross-attention alignment",
    source_label: str = "source",
    target_label: str = "target",
    path: PathLike | None = None,
) -> Figure:
    """Translation alignment: each generated target token (row) against the source
    tokens (columns) it attended to (Bahdanau et al., 2015, Fig. 3).

    Shape:
        weights: ``(Tt, Ts)`` — target (query) by source (key).
    """
    return plot_attention(weights, target_tokens, key_tokens=source_tokens, title=title,
                          xlabel=f"{source_label} tokens", ylabel=f"{target_label} tokens",
                          cmap="Greys", path=path)


def upsample(attention: Any, size: tuple[int, int]) -> np.ndarray:
    """Bilinear upsampling of a coarse 2-D attention map to an image's size.

    Pixel centres are aligned (``align_corners=False`` in torch's terms), so a
    constant map stays constant and the map's mass stays where it was.

    Shape:
        attention: ``(h, w)``; returns ``(H, W)`` for ``size = (H, W)``.
    """
    a = as_array(attention, "attention")
    check_ndim(a, (2,), "attention", "(h, w)")
    out_h, out_w = int(size[0]), int(size[1])
    if out_h < 1 or out_w < 1:
        raise ValueError(f"size: expected two positive ints, got {size!r}")

    def coords(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, pos - lo

    y0, y1, fy = coords(a.shape[0], out_h)
    x0, x1, fx = coords(a.shape[1], out_w)
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx  # (H, W)
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return top * (1 - fy)[:, None] + bottom * fy[:, None]


def _image(image: Any) -> np.ndarray:
    img = as_array(image, "image")
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if not (img.ndim == 2 or (img.ndim == 3 and img.shape[-1] in (3, 4))):
        raise ValueError(f"image: expected shape (H, W) or (H, W, 3), got {tuple(img.shape)}")
    lo, hi = float(img.min()), float(img.max())
    return (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)


def _map(attention: Any, n_cells: int | None = None) -> np.ndarray:
    a = as_array(attention, "attention")
    if a.ndim == 1:  # a flat grid of h*w cells: assume it is square
        side = int(round(np.sqrt(a.shape[0])))
        if side * side != a.shape[0]:
            raise ValueError(f"attention: a flat map must have a square length, got {a.shape[0]}")
        a = a.reshape(side, side)
    check_ndim(a, (2,), "attention", "(h, w)")
    return a


def _overlay(ax: Any, img: np.ndarray, amap: np.ndarray, norm: Normalize, alpha: float) -> Any:
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
    big = upsample(amap, img.shape[:2])
    return ax.imshow(big, cmap="jet", norm=norm, alpha=alpha, interpolation="nearest")


def plot_image_attention(
    image: Any,
    attention: Any,
    *,
    title: str = "Attention over the image",
    alpha: float = 0.5,
    path: PathLike | None = None,
) -> Figure:
    """The image with a coarse attention map upsampled (bilinear) and laid over it.

    Shape:
        image: ``(H, W)`` or ``(H, W, 3)``; attention: ``(h, w)`` (or flat ``(h*w,)``).
    """
    img = _image(image)
    amap = _map(attention)
    fig = new_figure(5.5, 4.5)
    ax = fig.add_subplot()
    im = _overlay(ax, img, amap, Normalize(*shade_limits(amap)), alpha)
    ax.set_title(f"{title}\n(map {amap.shape[0]}×{amap.shape[1]} → image {img.shape[0]}×{img.shape[1]})")
    ax.set_xlabel("x (pixels)")
    ax.set_ylabel("y (pixels)")
    fig.colorbar(im, ax=ax, label="attention weight")
    return save(fig, path)


def plot_caption_attention(
    image: Any,
    attentions: Any,
    words: Sequence[str],
    *,
    cols: int = 4,
    title: str = "Attention for each word of the caption",
    alpha: float = 0.55,
    path: PathLike | None = None,
) -> Figure:
    """One panel per caption word: where the model looked when it produced that word.

    Shape:
        image: ``(H, W)`` or ``(H, W, 3)``; attentions: ``(N, h, w)`` or ``(N, h*w)``
        for ``N`` words.
    """
    img = _image(image)
    a = as_array(attentions, "attentions")
    check_ndim(a, (2, 3), "attentions", "(N, h, w) or (N, h*w)")
    labels = check_tokens(words, a.shape[0], "words")
    maps = [_map(m) for m in a]
    if not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols: expected a positive int, got {cols!r}")
    cols = min(cols, len(maps))
    rows = -(-len(maps) // cols)
    fig = new_figure(2.6 * cols + 1.0, 2.6 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False)
    norm = Normalize(*shade_limits(np.stack(maps)))
    im = None
    for i, ax in enumerate(axes.flat):
        if i >= len(maps):
            ax.set_axis_off()
            continue
        im = _overlay(ax, img, maps[i], norm, alpha)
        ax.set_title(labels[i], fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title)
    fig.supxlabel("x (pixels)")
    fig.supylabel("y (pixels)")
    assert im is not None
    fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
    return save(fig, path)
