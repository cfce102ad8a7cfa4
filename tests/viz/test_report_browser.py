"""The HTML report in a real browser: headless Chromium opens it from file://
(no server), driven through the DevTools protocol over a small WebSocket
client written here (standard library only).

Checked: the heads are drawn (SVG edges, tokens, thumbnail canvases), the page
logs no error and no console error, it makes no request besides its own file,
hover and click work, the XSS payloads render as text and nothing executes,
and a 512-token, 6-layer, 12-head report renders quickly. A screenshot of each
page is saved under the test's tmp dir (and under $ATTNKIT_ARTIFACTS if set).
Skips, naming the missing binary, where Chromium is not installed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnkit.viz.report import write_report

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                       "google-chrome", "chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")

XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, client masking."""

    def __init__(self, url: str, timeout: float = 20.0) -> None:
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        assert m, url
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "DevTools closed the connection during the handshake"
            head += chunk
        assert b" 101 " in head.split(b"\r\n")[0], head

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "DevTools closed the connection"
            buf += chunk
        return bytes(buf)

    def send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> str:
        message = bytearray()
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F in (0x1, 0x0):
                message += payload
                if b0 & 0x80:
                    return message.decode()


class Browser:
    """Headless Chromium with one page, recording every event the tests look at."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="attnkit-chromium-")
        assert CHROMIUM is not None
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
             '--host-resolver-rules=MAP * ~NOTFOUND', f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.monotonic() + 20
        assert self.proc.stderr is not None
        while time.monotonic() < deadline and url is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        assert url, "Chromium did not start its DevTools endpoint"
        self.ws = WebSocket(url)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        # Record alert() calls too: a payload that ran would show up here (and as a dialog event).
        self.call("Page.addScriptToEvaluateOnNewDocument",
                  source="window.__alerts=[];window.alert=function(m){window.__alerts.push(String(m));};")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if method.split(".")[0] not in ("Target", "Browser") and hasattr(self, "session"):
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                assert "error" not in reply, (method, reply["error"])
                return dict(reply.get("result", {}))
            if "method" in reply:
                self.events.append(reply)

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def open(self, path: Path, timeout: float = 15.0) -> dict[str, Any]:
        """Load ``path`` from file:// and wait for the page's self-check; return it."""
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.js("window.attnkitSelfCheck ? JSON.stringify(window.attnkitSelfCheck) : null")
            if state and json.loads(state)["ready"]:
                return dict(json.loads(state))
            time.sleep(0.05)
        raise AssertionError(f"the report did not finish rendering; events: {self.events[-5:]}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        target = os.environ.get("ATTNKIT_ARTIFACTS")
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(target) / path.name)

    def problems(self, page: Path) -> dict[str, list[str]]:
        """Errors, console errors, dialogs and requests other than the page itself."""
        self.js("1")  # flush events that arrived meanwhile
        own = page.resolve().as_uri()
        out: dict[str, list[str]] = {"exceptions": [], "console": [], "dialogs": [], "requests": []}
        for ev in self.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                out["exceptions"].append(json.dumps(p["exceptionDetails"])[:300])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out["console"].append(json.dumps(p.get("args"))[:300])
            elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out["console"].append(p["entry"].get("text", "")[:300])
            elif m == "Page.javascriptDialogOpening":
                out["dialogs"].append(p.get("message", ""))
            elif m == "Network.requestWillBeSent" and p["request"]["url"] != own:
                out["requests"].append(p["request"]["url"])
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()


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
