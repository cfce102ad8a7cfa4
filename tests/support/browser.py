"""Headless Chromium driven through the DevTools protocol over a small WebSocket client (standard
library only): what the report's and the explorer's browser tests share.

:class:`Browser` opens a page (from file:// or from a server), evaluates JavaScript in it, takes
screenshots and lists what went wrong: exceptions, console errors, dialogs, and requests that left
the page's own file or origin. ``CHROMIUM`` is None where no Chromium is installed (the tests skip).
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
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                       "google-chrome", "chrome")) if p), None)

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
             '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1', f"--user-data-dir={self.profile}",
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

    def open(self, path: Path | str, timeout: float = 15.0,
             ready: str = "window.attnkitSelfCheck ? JSON.stringify(window.attnkitSelfCheck) : null"
             ) -> dict[str, Any]:
        """Load ``path`` (a file, from file://; or a URL) and wait until ``ready`` gives a JSON object
        with ``"ready": true``; return it. The default waits for the report's self-check."""
        self.events.clear()
        self.call("Page.navigate", url=path if isinstance(path, str) else path.resolve().as_uri())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.js(ready)
            if state and json.loads(state)["ready"]:
                return dict(json.loads(state))
            time.sleep(0.05)
        raise AssertionError(f"the page did not finish rendering; events: {self.events[-5:]}")

    def wait(self, expression: str, timeout: float = 15.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"waited {timeout} s for {expression}; events: {self.events[-5:]}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        target = os.environ.get("ATTNKIT_ARTIFACTS")
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(target) / path.name)

    def problems(self, page: Path | str) -> dict[str, list[str]]:
        """Errors, console errors, dialogs and requests other than the page itself (a file) or its origin
        (a URL such as ``http://127.0.0.1:8000``); a ``data:`` URL the page made itself leaves nothing."""
        self.js("1")  # flush events that arrived meanwhile
        own = page.resolve().as_uri() if isinstance(page, Path) else None
        origin = page.rstrip("/") + "/" if isinstance(page, str) else None
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
            elif m == "Network.requestWillBeSent" and not (p["request"]["url"] == own or (
                    origin is not None and (p["request"]["url"] + "/").startswith(origin))
                    or p["request"]["url"].startswith("data:")):
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
