"""Attention of a batch of texts as one object (:class:`AttentionView`) and how it is written: the offline
HTML report or a figure of the first text (:func:`write_views`); :func:`is_attnkit_report` tells a report
attnkit wrote (which may be replaced) from any other file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["AttentionView", "write_views", "is_attnkit_report", "REPORT_MARKER"]


@dataclass
class AttentionView:
    """Attention of one text, ready for :mod:`attnkit.viz`.

    Shape:
        layers ``(L, H, T, T)`` self-attention maps (``L`` may be 0);
        pooling ``(T,)`` pooling weights, or ``None``.

    ``total_tokens`` counts the text's tokens before it was cut to the
    model's maximum length (``len(tokens)`` when nothing was cut). A
    cross-attention view has ``source``, the key tokens (``layers`` is then
    ``(L, H, Tq, Tk)``); ``name`` labels the view in the report.
    """

    tokens: list[str]
    layers: Any
    pooling: Any
    label: str | None = None
    probability: float | None = None
    total_tokens: int | None = None
    source: list[str] | None = None
    name: str | None = None


REPORT_MARKER = b'<meta name="generator" content="attnkit">'


def is_attnkit_report(path: Path) -> bool:
    """Whether ``path`` is an HTML report attnkit wrote (its page names attnkit as generator in its head),
    which ``visualize`` may replace without ``--overwrite``; any other file is never replaced silently."""
    if path.suffix != ".html" or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.lstrip().lower().startswith(b"<!doctype html>") and REPORT_MARKER in head


def write_views(views: list[AttentionView], out: Path, title: str) -> Path:
    """Write ``views`` as an HTML report (``.html``) or a figure of the first text."""
    from attnkit.viz.report import write_report  # the report needs no matplotlib

    if out.suffix == ".html":
        import numpy as np

        predictions = [
            {"label": v.label, "probability": v.probability} if v.label is not None else None
            for v in views
        ]
        t = max(len(v.tokens) for v in views)
        if any(v.name is not None for v in views) and all(v.layers.shape[0] > 0 for v in views):
            return _write_named_views(views, out, title)
        if all(v.layers.shape[0] > 0 for v in views):
            stacked = np.zeros((len(views), *views[0].layers.shape[:2], t, t), np.float32)  # (B, L, H, T, T)
            for b, v in enumerate(views):
                n = len(v.tokens)
                stacked[b, :, :, :n, :n] = v.layers
            return write_report(out, [v.tokens for v in views], stacked, title=title,
                                predictions=predictions)
        # Pooling-only models: one query (the document) attending over its tokens.
        pooled = np.zeros((len(views), 1, 1, 1, t), np.float32)  # (B, L=1, H=1, Tq=1, Tk)
        for b, v in enumerate(views):
            pooled[b, 0, 0, 0, : len(v.tokens)] = v.pooling
        return write_report(out, [["[document]"] for _ in views], pooled, title=title,
                            source_tokens=[v.tokens for v in views], predictions=predictions)
    from attnkit.viz.explain import plot_classification
    from attnkit.viz.plots import plot_layers_heads

    first = views[0]
    if first.pooling is not None:
        fig = plot_classification(first.tokens, first.pooling, label=first.label or "",
                                  probability=first.probability or 0.0, title=title, path=out)
    else:
        fig = plot_layers_heads(first.layers, title=title, path=out)
    del fig
    return out


def _write_named_views(views: list[AttentionView], out: Path, title: str) -> Path:
    """Views of several shapes (an encoder-decoder's roles) as one report, one named example each."""
    from attnkit.viz.report import ExampleMaps, write_report

    return write_report(out, [v.tokens for v in views], ExampleMaps([v.layers for v in views]), title=title,
                        source_tokens=[v.source for v in views], example_names=[v.name or "" for v in views])
