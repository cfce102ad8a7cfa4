"""The time limit, the bounded queue and a graceful stop, each against a running ``attnkit serve``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve import ServerProcess, train_tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_run(tmp_path_factory.mktemp("serve-limits"))[0]


@pytest.fixture(scope="module")
def slow_batches(run: Path) -> Iterator[ServerProcess]:
    """A server whose batches wait 600 ms for company, and which admits one request at a time."""
    proc = ServerProcess(str(run), "--queue", "1", "--batch-wait-ms", "600")
    try:
        yield proc
    finally:
        proc.stop()


def _in_thread(url: str, body: dict[str, object]) -> tuple[threading.Thread, list[httpx.Response]]:
    out: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: out.append(httpx.post(url, json=body, timeout=30)))
    thread.start()
    return thread, out


def test_a_full_queue_answers_503_with_retry_after(slow_batches: ServerProcess) -> None:
    first, replies = _in_thread(slow_batches.url + "/v1/predict", {"texts": ["superb film"]})
    time.sleep(0.25)  # the first request waits in its batch
    busy = httpx.post(slow_batches.url + "/v1/predict", json={"texts": ["dreadful"]}, timeout=30)
    first.join()
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert "(--queue)" in busy.json()["error"]
    assert replies[0].status_code == 200 and replies[0].json()["predictions"][0]["text"] == "superb film"


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(slow_batches: ServerProcess) -> None:
    first, replies = _in_thread(slow_batches.url + "/v1/predict", {"texts": ["superb film"]})
    time.sleep(0.25)
    start = time.monotonic()
    assert slow_batches.stop() == 0, "".join(slow_batches.stderr)
    first.join()
    assert time.monotonic() - start < 5
    assert replies[0].status_code == 200 and replies[0].json()["predictions"][0]["label"] in ("negative", "positive")
    assert "Traceback" not in "".join(slow_batches.stderr)


def test_a_request_past_the_time_limit_answers_504(run: Path) -> None:
    proc = ServerProcess(str(run), "--timeout", "0.001", "--batch-wait-ms", "50")
    try:
        late = httpx.post(proc.url + "/v1/predict", json={"texts": ["superb film"]}, timeout=30)
        assert late.status_code == 504 and "time limit of 0.001 s (--timeout)" in late.json()["error"]
        assert httpx.get(proc.url + "/healthz").json()["waiting"] == 0  # the late request left the queue
    finally:
        assert proc.stop() == 0
