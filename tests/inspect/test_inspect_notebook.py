"""A capture shows its report inline in Jupyter: a notebook executed headlessly with nbclient.

The cell's rich output must be the report page inside a sandboxed iframe, with
its Content-Security-Policy and no address to fetch anything from.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

SRC = Path(__file__).resolve().parents[2] / "src"

CELLS = [
    "import torch\nfrom torch import nn\nfrom attnkit.inspect import capture\ntorch.manual_seed(0)",
    "enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2).eval()\n"
    "with torch.no_grad(), capture(enc) as cap:\n    enc(torch.randn(1, 5, 16))",
    "cap",
    "cap.view(tokens=['<b>a</b>', 'b', 'c', 'd', 'e'], title='inline')",
]


def test_notebook_displays_the_report_inline_offline(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{SRC}{os.pathsep}{env_path}" if env_path else str(SRC)
    try:
        client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
        if not env_path:
            del os.environ["PYTHONPATH"]
    for index in (2, 3):
        outputs = nb.cells[index].outputs
        assert [o.output_type for o in outputs] == ["execute_result"], outputs
        shown = outputs[0].data["text/html"]
        assert shown.startswith('<iframe sandbox="allow-scripts"')
        page = html.unescape(re.search(r'srcdoc="([^"]*)"', shown).group(1))  # type: ignore[union-attr]
        assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page
        csp = html.unescape(re.search(r'Content-Security-Policy" content="([^"]*)"', page).group(1))  # type: ignore[union-attr]
        assert "default-src 'none'" in csp and "connect-src 'none'" in csp
        assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", page, re.I)
        assert '"L":2,"H":2,"Tq":5,"Tk":5' in page  # the two captured layers of two heads
    inline = html.unescape(nb.cells[3].outputs[0].data["text/html"])
    assert "\\u003cb\\u003ea\\u003c/b\\u003e" in inline  # the token is data, never markup
