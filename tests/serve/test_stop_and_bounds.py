"""``attnkit serve`` at its edges, over real sockets on the loopback: a stop under load and while loading,
idle and slow connections, the body, text and count limits at their exact values and one past, bodies
that are no JSON, requests without a Host header, and the size of an attention answer."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import ServerProcess, env, train_tiny_run

MAX_BODY = 20_000


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_run(tmp_path_factory.mktemp("serve-bounds"))[0]


@pytest.fixture(scope="module")
def server(run: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(str(run), "--max-body", str(MAX_BODY), "--max-chars", "2000", "--max-texts", "8",
                         "--read-timeout", "2")
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr)
        assert "Traceback" not in "".join(proc.stderr)


def _raw(server: ServerProcess, data: bytes, wait: float = 10.0) -> tuple[bytes, float]:
    """Send ``data`` on a fresh connection; everything the server sends until it closes, and how long that took."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as sock:
        sock.sendall(data)
        start, out = time.monotonic(), b""
        while chunk := sock.recv(65536):
            out += chunk
        return out, time.monotonic() - start


def _status_and_json(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _padded(size: int, texts: list[str]) -> bytes:
    """A JSON body of exactly ``size`` bytes (spaces before its closing brace)."""
    body = json.dumps({"texts": texts}).encode()
    assert len(body) <= size
    return body[:-1] + b" " * (size - len(body)) + b"}"


def _post(server: ServerProcess, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def test_each_limit_holds_at_its_value_and_refuses_one_past_it(server: ServerProcess) -> None:
    url = server.url + "/v1/predict"
    for size, status in ((MAX_BODY, 200), (MAX_BODY + 1, 413)):
        reply = httpx.post(url, content=_padded(size, ["superb film"]), headers={"content-type": "application/json"})
        assert reply.status_code == status, (size, reply.text)
    assert "20,000 bytes (--max-body)" in reply.json()["error"] and reply.json()["field"] == "body"
    assert _post(server, "/v1/predict", {"texts": ["superb"] * 8}).status_code == 200
    assert _post(server, "/v1/predict", {"texts": ["superb"] * 9}).json()["field"] == "texts"
    assert _post(server, "/v1/predict", {"texts": ["x" * 2000]}).status_code == 200
    assert _post(server, "/v1/explain", {"text": "x" * 2000}).status_code == 200
    long = _post(server, "/v1/explain", {"text": "x" * 2001})
    assert long.status_code == 422 and long.json()["field"] == "text"


@pytest.mark.parametrize("size", [MAX_BODY + 1, 12_000_000])
def test_a_body_past_the_limit_answers_413_to_urllib(server: ServerProcess, size: int) -> None:
    """urllib sends the whole body before it reads: the server reads the rest of a refused body, so the 413
    reaches it instead of a reset connection."""
    request = urllib.request.Request(server.url + "/v1/predict", data=_padded(size, ["x"]),
                                     headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["error"].endswith("larger than the limit of 20,000 bytes (--max-body)")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)  # and http.client too
    connection.request("POST", "/v1/predict", body=_padded(size, ["x"]), headers={"content-type": "application/json"})
    assert connection.getresponse().status == 413
    connection.close()


@pytest.mark.parametrize(("body", "content_type", "status", "words"), [
    (b'{"texts": ["\xff superb"]}', "application/json", 422, "body: not UTF-8 (byte 0xff at byte 12)"),
    (b"[" * 5000 + b"]" * 5000, "application/json", 422, "body: JSON nested too deeply"),
    (b'{"texts": ["superb"]}', "text/plain", 415,
     "body: Content-Type 'text/plain'; the API takes JSON sent as 'Content-Type: application/json'"),
    (b'{"texts": ["superb"]}', None, 415, "body: no Content-Type; the API takes JSON"),
    (b'{"texts": ["superb"]}', "application/json; charset=utf-8", 200, ""),
    (b'{"texts": [""]}', "application/json", 422, "texts.0: empty; give a text to classify"),
    (b'{"texts": [" \\n "]}', "application/json", 422, "texts.0: only white space; give a text to classify"),
])
def test_a_body_that_is_no_json_text_is_named(server: ServerProcess, body: bytes, content_type: str | None,
                                              status: int, words: str) -> None:
    headers = {"content-type": content_type} if content_type else {}
    reply = httpx.post(server.url + "/v1/predict", content=body, headers=headers)
    assert reply.status_code == status and reply.headers["content-type"] == "application/json", reply.text
    if status != 200:
        assert reply.json()["error"].startswith(words) and reply.json()["field"] in ("body", "texts.0")


@pytest.mark.parametrize("path", ["/v1/explain", "/v1/attention"])
def test_an_empty_text_is_refused_by_name(server: ServerProcess, path: str) -> None:
    reply = _post(server, path, {"text": ""})
    assert reply.status_code == 422 and reply.json() == {"error": "text: empty; give a text to classify",
                                                         "status": 422, "field": "text"}


@pytest.mark.parametrize("request_head", [b"GET /healthz HTTP/1.1\r\n\r\n", b"GET /healthz HTTP/1.1\r\nHost: \r\n\r\n",
                                          b"GET /healthz HTTP/1.0\r\n\r\n"])
def test_no_or_an_empty_host_header_is_421(server: ServerProcess, request_head: bytes) -> None:
    reply, _ = _raw(server, request_head)
    status, body = _status_and_json(reply)
    assert status == 421 and body["error"] == "no Host header (only requests to its own address are answered)", reply


def test_idle_and_slow_connections_are_closed_after_the_read_timeout(server: ServerProcess) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(300)]
    try:
        start = time.monotonic()
        closed = sum(sock.recv(1) == b"" for sock in idle)  # each waits for the server to close it
        assert closed == 300 and time.monotonic() - start < 6
    finally:
        for sock in idle:
            sock.close()
    partial_head, took = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    assert _status_and_json(partial_head)[0] == 408 and 1.5 < took < 6
    partial_body, took = _raw(server, b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: "
                                      b"application/json\r\ncontent-length: 50\r\n\r\n{\"te")
    status, body = _status_and_json(partial_body)
    assert status == 408 and body["error"].endswith("read time limit of 2 s (--read-timeout)") and took < 6
    assert httpx.get(server.url + "/healthz").json()["status"] == "ok"


def test_attention_weights_have_4_decimals_and_the_answer_its_stated_size(server: ServerProcess) -> None:
    text = " ".join(["superb", "dreadful", "film", "brilliant"] * 64)  # 256 tokens
    reply = _post(server, "/v1/attention", {"text": text})
    got = reply.json()
    assert len(got["tokens"]) == 256
    weights = [x for m in got["maps"] for head in m["weights"] for row in head for x in row]
    assert all(round(x, 4) == x and len(repr(x)) <= 6 for x in weights)
    assert len(reply.content) <= 7 * len(weights) + 10_000  # docs/serve.md: about 7 bytes a weight


def _in_flight(url: str, body: dict[str, Any], count: int) -> tuple[list[threading.Thread], list[httpx.Response]]:
    client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=count))
    replies: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: replies.append(client.post(url, json=body))) for _ in range(count)]
    for t in threads:
        t.start()
    return threads, replies


def test_sigterm_with_64_explanations_in_flight_answers_each_in_json_within_the_grace(run: Path) -> None:
    proc = ServerProcess(str(run), "--grace", "3", "--timeout", "120")
    text = " ".join(["superb brilliant dreadful film"] * 64)  # 256 tokens: an explanation takes a while
    threads, replies = _in_flight(proc.url + "/v1/explain", {"text": text}, 64)
    deadline, waiting = time.monotonic() + 60, 0
    while waiting < 60 and time.monotonic() < deadline:  # an explanation takes about 0.4 s: most still wait
        waiting = httpx.get(proc.url + "/healthz").json()["waiting"]
        time.sleep(0.02)
    assert waiting >= 60
    slow = socket.create_connection(("127.0.0.1", proc.port), timeout=10)  # a body still being sent
    slow.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"content-length: 50\r\n\r\n{\"te")
    time.sleep(0.2)
    start = time.monotonic()
    assert proc.stop() == 0
    took = time.monotonic() - start
    for t in threads:
        t.join(30)
    assert took < 3, took
    assert _status_and_json(slow.recv(65536))[0] == 408  # answered within the grace, not cut off
    slow.close()
    assert len(replies) == 64 and all(r.headers["content-type"] == "application/json" for r in replies)
    statuses = sorted(r.status_code for r in replies)
    assert set(statuses) == {200, 503}, statuses  # some answered in the grace, the rest told why
    assert all(r.json()["error"] == "the server is shutting down (SIGTERM or Ctrl-C) and did not answer this request "
               "in time; try again when it is back" for r in replies if r.status_code == 503)
    assert "Traceback" not in "".join(proc.stderr) and "Exception" not in "".join(proc.stderr)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sigterm_while_loading_exits_0_at_once_and_no_connection_waits(run: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "serve", str(run), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("loading ")
        with pytest.raises(ConnectionRefusedError):  # bound, not yet listening: refused at once, no hang
            socket.create_connection(("127.0.0.1", port), timeout=5)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - start < 2
        assert proc.stderr.read().strip() == "stopped while loading the models (SIGTERM)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("host", ["127.0.0.2", "localhost"])
def test_a_loopback_host_does_not_warn(tmp_path: Path, host: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "serve", str(tmp_path), "--host", host, "--port", "0"],
                          capture_output=True, text=True, env=env(), timeout=60)
    assert proc.returncode == 1 and "Warning" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("is not an attnkit run directory (no current.json)")


def test_a_bad_host_prints_only_its_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "serve", str(tmp_path), "--host", "256.1.1.1", "--port",
                           "0"], capture_output=True, text=True, env=env(), timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("Error: --host 256.1.1.1: cannot listen there")
