"""Shared plumbing for the static figures: a pyplot-free Figure, saving, labels."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnkit._lazy import require_extra

require_extra("plotting with attnkit.viz", "matplotlib")

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["new_figure", "save", "label_axis", "FORMATS", "PathLike"]

FORMATS = (".png", ".svg", ".pdf")
PathLike = str | os.PathLike[str]
_MAX_TICKS = 64  # beyond this, label every n-th token so labels stay readable


def new_figure(width: float, height: float) -> Figure:
    """A Figure on the Agg canvas, independent of pyplot (nothing global, nothing shown)."""
    fig = Figure(figsize=(max(width, 2.0), max(height, 1.5)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: PathLike | None, dpi: int = 120) -> Figure:
    """Save ``fig`` to ``path`` (format from the extension: PNG, SVG or PDF), atomically.

    The image is written to a temporary file beside ``path`` and renamed, so a
    reader never sees half a file. Returns ``fig``.
    """
    if path is None:
        return fig
    target = Path(path)
    ext = target.suffix.lower()
    if ext not in FORMATS:
        raise ValueError(f"path: expected a file ending in one of {FORMATS}, got {str(path)!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=ext, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format=ext[1:], dpi=dpi)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return fig


def label_axis(ax: Axes, axis: str, labels: Sequence[str], rotation: float = 0.0) -> None:
    """Put token ``labels`` on the x or y axis of a heatmap, thinning them past 64 tokens."""
    n = len(labels)
    step = max(1, int(np.ceil(n / _MAX_TICKS)))
    pos = list(range(0, n, step))
    shown = [labels[i] for i in pos]
    size = 9 if n <= 24 else 7 if n <= 48 else 6
    if axis == "x":
        ax.set_xticks(pos, shown, rotation=rotation, fontsize=size,
                      ha="right" if rotation else "center", rotation_mode="anchor")
    else:
        ax.set_yticks(pos, shown, fontsize=size)


def shade_limits(values: Any) -> tuple[float, float]:
    """Colour limits for attention weights: 0 to the largest weight (at least a tiny epsilon)."""
    arr = np.asarray(values, dtype=np.float64)
    top = float(np.nanmax(arr)) if arr.size else 1.0
    return 0.0, max(top, 1e-12)
