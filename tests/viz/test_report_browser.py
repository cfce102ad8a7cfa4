"""The HTML report in a real browser: headless Chromium opens it from file://
(no server), driven through the DevTools protocol (tests/support/browser.py).

Checked: the heads are drawn (SVG edges, tokens, thumbnail canvases), the page
logs no error and no console error, it makes no request besides its own file,
hover and click work, the XSS payloads render as text and nothing executes,
and a 512-token, 6-layer, 12-head report renders quickly. A screenshot of each
page is saved under the test's tmp dir (and under $ATTNKIT_ARTIFACTS if set).
Skips, naming the missing binary, where Chromium is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from attnkit.viz.report import write_report
from tests.support.browser import CHROMIUM, Browser  # the browser fixture: tests/conftest.py

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")

XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']




def _weights(rng: np.random.Generator, shape: tuple[int, ...], sharp: float = 4.0) -> np.ndarray:
    w = rng.random(shape) ** sharp
    return w / w.sum(axis=-1, keepdims=True)


def _clean(browser: Browser, page: Path) -> None:
    problems = browser.problems(page)
    assert problems == {"exceptions": [], "console": [], "dialogs": [], "requests": []}, problems
    assert browser.js("window.__alerts.length") == 0


def test_report_draws_heads_offline_without_errors(browser: Browser, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tokens = [["[CLS]", "the", "film", "is", "a", "gem", "[SEP]"], ["[CLS]", "dull", "[SEP]"]]
    attn = _weights(rng, (2, 3, 4, 7, 7))
    page = write_report(tmp_path / "report.html", tokens, attn, title="Sentiment",
                        predictions=[{"label": "positive", "probability": 0.97}, "negative"])
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", html, re.I)
    drawn = np.rint(attn * 255) > 0  # weights under 1/510 quantise to 0 and draw no line
    check = browser.open(page)
    assert check["errors"] == []
    assert check["lines"] == drawn[0, 0, 0].sum() and check["lines"] > 30
    assert check["tokens"] == 14 and check["thumbnails"] == 12
    assert browser.js("document.querySelectorAll('#svg-wrap svg path').length") > 0
    assert browser.js("document.getElementById('prediction').textContent") == "prediction: positive (p = 0.970)"
    # the canvases carry pixels, not just size
    assert browser.js("""(function(){var c=document.querySelector('#grid canvas');
        var d=c.getContext('2d').getImageData(0,0,c.width,c.height).data, s=0;
        for (var i=0;i<d.length;i+=4) s+=d[i]+d[i+1]+d[i+2]; return s;})()""") > 0
    # hover query "film": its 7 edges are highlighted; then pin a key by clicking it
    browser.js("document.querySelector('text.tok[data-side=q][data-i=\"2\"]')"
               ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))")
    assert browser.js("document.querySelectorAll('g.focus line').length") == drawn[0, 0, 0, 2].sum()
    assert browser.js("document.getElementById('info').textContent").startswith("Query “film” attends to:")
    browser.js("document.querySelector('text.tok[data-side=k][data-i=\"5\"]')"
               ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert browser.js("document.querySelectorAll('g.focus line').length") == drawn[0, 0, 0, :, 5].sum()
    assert "pinned" in browser.js("document.getElementById('info').textContent")
    # model view: clicking layer 2, head 3 opens it in the head view
    browser.js("document.querySelector('#grid canvas[data-layer=\"2\"][data-head=\"3\"]').click()")
    assert browser.js("[document.getElementById('layer').value, document.getElementById('head').value]") == ["2", "3"]
    # the second example of the batch: 3 tokens, cut from the padded 7
    browser.js("var s=document.getElementById('example'); s.value='1'; s.dispatchEvent(new Event('change'))")
    assert browser.js("window.attnkitSelfCheck.tokens") == 6
    assert browser.js("window.attnkitSelfCheck.lines") == drawn[1, 2, 3, :3, :3].sum()
    browser.screenshot(tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 10_000
    _clean(browser, page)


def test_report_renders_hostile_tokens_as_text(browser: Browser, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tokens = ["[CLS]", XSS[0], XSS[1], "<!--", "</script>", "@JS@", "[SEP]"]
    page = write_report(tmp_path / "xss.html", tokens, _weights(rng, (2, 2, 7, 7)),
                        title=XSS[0] + XSS[1], predictions={"label": XSS[1], "probability": 0.5})
    html = page.read_text(encoding="utf-8")
    body = html.split('id="attnkit-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in body and ">" not in body  # no markup can close or comment out the data
    check = browser.open(page)
    assert check["errors"] == []
    texts = browser.js("Array.prototype.map.call(document.querySelectorAll('text.tok[data-side=q]'),"
                       " function(t){return t.firstChild.nodeValue;})")
    assert texts == tokens
    assert browser.js("document.getElementById('title').textContent") == XSS[0] + XSS[1]
    assert browser.js("document.title") == XSS[0] + XSS[1]
    assert XSS[1] in browser.js("document.getElementById('prediction').textContent")
    assert browser.js("document.querySelectorAll('img').length") == 0
    assert browser.js("document.scripts.length") == 2  # the data block and the page's own script
    browser.screenshot(tmp_path / "xss.png")
    _clean(browser, page)


def test_long_report_renders_fast(browser: Browser, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n_layers, n_heads, t = 6, 12, 512
    attn = _weights(rng, (n_layers, n_heads, t, t), sharp=8.0).astype(np.float32)
    page = write_report(tmp_path / "long.html", [f"w{i}" for i in range(t)], attn, top_k=8)
    assert page.stat().st_size <= 5_000_000
    check = browser.open(page, timeout=20)
    top8 = -np.sort(-attn[0, 0], axis=-1)[:, :8]
    assert check["lines"] == (np.rint(top8 * 255) > 0).sum()
    assert check["thumbnails"] == n_layers * n_heads
    print(f"512-token report: {page.stat().st_size / 1e6:.2f} MB, render {check['renderMs']} ms, "
          f"{check['sinceNavigationMs']} ms since navigation")
    assert check["renderMs"] <= 3000  # about 1 s on an unloaded core; slack for a shared machine
    browser.js("document.querySelector('#grid canvas[data-layer=\"5\"][data-head=\"11\"]').click()")
    assert browser.js("window.attnkitSelfCheck.switchMs") <= 2000
    browser.screenshot(tmp_path / "long.png")
    _clean(browser, page)


def test_cross_attention_report_shows_source_and_target(browser: Browser, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    source, target = ["ein", "Hund", "läuft", "</s>"], ["a", "dog", "runs", "<eos>", "<pad>"]
    attn = _weights(rng, (2, 2, 5, 4))  # (L, H, Tt, Ts)
    page = write_report(tmp_path / "cross.html", target[:4], attn, source_tokens=source)
    check = browser.open(page)
    assert check["tokens"] == 8 and check["errors"] == []
    keys = browser.js("Array.prototype.map.call(document.querySelectorAll('text.tok[data-side=k]'),"
                      " function(t){return t.firstChild.nodeValue;})")
    assert keys == source
    _clean(browser, page)


def test_neuron_view_draws_hovers_and_keeps_hostile_tokens_as_text(browser: Browser, tmp_path: Path) -> None:
    from attnkit.viz.neuron import neuron_data
    from attnkit.viz.notebook import ReportView
    from attnkit.viz.report import report_data

    rng = np.random.default_rng(4)
    tokens = ["[CLS]", XSS[0], XSS[1], "<!--", "@JS@", "[SEP]"]
    n_layers, heads, t, dh = 2, 3, len(tokens), 8
    q = rng.standard_normal((n_layers, heads, t, dh)).astype(np.float32)
    k = rng.standard_normal((n_layers, heads, t, dh)).astype(np.float32)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    data = report_data(tokens, w, title="neuron " + XSS[0])
    data["neuron"] = neuron_data(tokens, q, k, w, layer_names=["enc.0 " + XSS[1], "enc.1"])
    page = ReportView(data).save(tmp_path / "neuron.html")
    check = browser.open(page)
    assert check["errors"] == []
    assert browser.js("window.attnkitSelfCheck.neuronDrawn") is True
    assert browser.js("window.attnkitSelfCheck.neuronRows") == t
    assert browser.js("window.attnkitSelfCheck.neuronCells") == dh * (1 + 2 * t)  # q, then k and q*k per key
    labels = browser.js("Array.prototype.map.call(document.querySelectorAll('#neuron-table .tokl:not(.hd)'),"
                        " function(e){return e.firstChild.nodeValue;})")
    assert labels == tokens
    layer_text = browser.js("document.getElementById('n-layer').options[0].textContent")
    assert layer_text == "enc.0 " + XSS[1]
    # the scores column is q . k / sqrt(Dh) of layer 0, head 0, query 0
    shown = browser.js("Array.prototype.map.call(document.querySelectorAll('#neuron-table .num'),"
                       " function(e){return +e.textContent;})")
    assert np.allclose(shown, scores[0, 0, 0], atol=1e-3)
    # hover the product cell of key 2, dimension 5
    browser.js("document.querySelector('#neuron-table .nc[data-kind=\"q\\u00d7k\"][data-key=\"2\"][data-dim=\"5\"]')"
               ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))")
    info = browser.js("document.getElementById('neuron-info').textContent")
    assert info.startswith("key “" + tokens[2] + "”") and f"{q[0, 0, 0, 5] * k[0, 0, 2, 5]:.4f}" in info
    # another head and query: the weights bar follows the recorded softmax
    browser.js("var s=document.getElementById('n-head'); s.value='2'; s.dispatchEvent(new Event('change'));"
               "var r=document.getElementById('n-query'); r.value='3'; r.dispatchEvent(new Event('change'))")
    widths = browser.js("Array.prototype.map.call(document.querySelectorAll('#neuron-table .bar'),"
                        " function(e){return parseFloat(e.style.width);})")
    assert np.allclose(widths, 100 * w[0, 2, 3], atol=0.06)
    assert browser.js("document.querySelectorAll('img').length") == 0
    browser.screenshot(tmp_path / "neuron.png")
    _clean(browser, page)
