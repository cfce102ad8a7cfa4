"""What the server tests share: a tiny trained run with a data file, and ``attnkit serve`` as a real
process on a free port (the tests talk to it over HTTP with httpx)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

from tests.support.cli import TINY, write_keyword_csv

# One encoder layer, so that the attention view has layer x head maps besides the pooling weights.
SERVE_TINY = [*TINY, "--model-opt", "num_layers=1"]


def train_tiny_run(folder: Path) -> tuple[Path, Path]:
    """A tiny keyword-corpus run at ``folder / "run"`` and its labelled CSV; returns (run, data)."""
    from click.testing import CliRunner

    from attnkit.cli import cli

    data = write_keyword_csv(folder / "data.csv", 120)
    run = folder / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(data), *SERVE_TINY, "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run, data


def env() -> dict[str, str]:
    import attnkit

    return {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1]), "ATTNKIT_THREADS": "1"}


class ServerProcess:
    """``attnkit serve ARGS --port 0`` in a subprocess; :attr:`url` once it listens."""

    def __init__(self, *args: str, timeout: float = 90.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "attnkit", "serve", *args, "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        assert self.proc.stderr is not None and self.proc.stdout is not None
        threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr), daemon=True).start()
        deadline = time.monotonic() + timeout
        self.url = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.stdout.append(line)
            found = re.search(r"on (http://\S+) ", line)
            if found:
                self.url = found.group(1)
                break
        assert self.url, f"attnkit serve did not start: {''.join(self.stdout)} {''.join(self.stderr)}"
        threading.Thread(target=self._drain, args=(self.proc.stdout, self.stdout), daemon=True).start()

    @staticmethod
    def _drain(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def peak_rss_kib(self) -> int:
        """The server's peak resident memory so far (Linux ``/proc``: ``VmHWM``)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then the exit status (killed past ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"attnkit serve did not stop within {timeout} s of SIGTERM") from None


def post_json(server: ServerProcess, path: str, body: object, timeout: float = 60) -> httpx.Response:
    """POST ``body`` as JSON (ASCII, so a lone surrogate travels as its escape) to the server."""
    import json

    import httpx

    return httpx.post(server.url + path, content=json.dumps(body), headers={"content-type": "application/json"},
                      timeout=timeout)


def serving(*args: str) -> Iterator[ServerProcess]:
    """A fixture body: ``attnkit serve ARGS`` while the tests use it, stopped with status 0 after."""
    proc = ServerProcess(*args)
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr)
