"""The HTML report as an object: saved to a file, or shown inline in Jupyter.

Jupyter calls ``_repr_html_`` and puts what it returns into the notebook. The
report page goes in whole, as the ``srcdoc`` of a sandboxed ``<iframe>``
(scripts allowed, nothing else: no same-origin access, no forms, no
navigation), so its Content-Security-Policy still holds, it cannot touch the
notebook and it loads nothing from the network.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attnkit.viz.report import Section, render_html, write_page

__all__ = ["ReportView"]


class ReportView:
    """One report (data from :func:`~attnkit.viz.report.report_data`), ready to save or display."""

    def __init__(self, data: Mapping[str, Any], summary: Sequence[Section] = (), height: int = 720) -> None:
        self.data = data
        self.summary = summary
        self.height = height

    @property
    def html(self) -> str:
        """The whole self-contained page."""
        return render_html(self.data, self.summary)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the page to ``path`` (``.html``) and return it."""
        return write_page(path, self.html)

    def _repr_html_(self) -> str:
        return (f'<iframe sandbox="allow-scripts" title="{html.escape(str(self.data["title"]), quote=True)}" '
                f'style="width:100%;height:{int(self.height)}px;border:1px solid #ddd" '
                f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>')
