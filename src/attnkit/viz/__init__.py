"""Seeing attention: static figures, an offline interactive HTML report, and
measures (entropy, rollout, focus).

Everything here consumes arrays — NumPy arrays, nested lists or torch tensors
(converted with ``np.asarray(t.detach().cpu())``; torch is never imported by
this package) — so it serves attnkit's torch layers, the NumPy twin and
pretrained BERT alike. Figures use matplotlib's Agg canvas and are never shown.

Names are imported on first use: ``attnkit.viz.measures`` needs NumPy only and
does not load matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnkit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "most_attended": "attnkit.viz.measures",
    "attention_entropy": "attnkit.viz.measures",
    "attention_rollout": "attnkit.viz.measures",
    "attention_focus": "attnkit.viz.measures",
    "plot_attention": "attnkit.viz.plots",
    "plot_heads": "attnkit.viz.plots",
    "plot_layers_heads": "attnkit.viz.plots",
    "plot_positional_encoding": "attnkit.viz.plots",
    "plot_masked_attention": "attnkit.viz.plots",
    "plot_classification": "attnkit.viz.explain",
    "plot_alignment": "attnkit.viz.explain",
    "plot_image_attention": "attnkit.viz.explain",
    "plot_caption_attention": "attnkit.viz.explain",
    "upsample": "attnkit.viz.explain",
    "write_report": "attnkit.viz.report",
    "report_data": "attnkit.viz.report",
}

__all__ = [
    "attention_entropy",
    "attention_focus",
    "attention_rollout",
    "most_attended",
    "plot_alignment",
    "plot_attention",
    "plot_caption_attention",
    "plot_classification",
    "plot_heads",
    "plot_image_attention",
    "plot_layers_heads",
    "plot_masked_attention",
    "plot_positional_encoding",
    "report_data",
    "upsample",
    "write_report",
]

if TYPE_CHECKING:
    from attnkit.viz.explain import (
        plot_alignment,
        plot_caption_attention,
        plot_classification,
        plot_image_attention,
        upsample,
    )
    from attnkit.viz.measures import (
        attention_entropy,
        attention_focus,
        attention_rollout,
        most_attended,
    )
    from attnkit.viz.plots import (
        plot_attention,
        plot_heads,
        plot_layers_heads,
        plot_masked_attention,
        plot_positional_encoding,
    )
    from attnkit.viz.report import report_data, write_report


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
