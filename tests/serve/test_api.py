"""The JSON API of ``attnkit serve``, over real HTTP to a server process on a free port.

One tiny run is trained per module and one server serves it; the answers are checked against
``attnkit predict --json``, the run's faithfulness record and the capture of its attention, and the
limits against requests that break each of them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import ServerProcess, env, post_json, serving, train_tiny_run

HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "abc\u202edlrow\u202c olleh",
           "superb \u200b brilliant 🎬", ""]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return train_tiny_run(tmp_path_factory.mktemp("serve-api"))


@pytest.fixture(scope="module")
def server(trained: tuple[Path, Path]) -> Iterator[ServerProcess]:
    run, data = trained
    yield from serving(str(run), "--data", str(data), "--max-texts", "8", "--max-chars", "500")




def test_predict_gives_predict_json_s_numbers_to_the_last_digit(server: ServerProcess,
                                                                 trained: tuple[Path, Path]) -> None:
    run, data = trained
    texts = [line.split(",")[0] for line in data.read_text().splitlines()[1:9]] + HOSTILE[:4]
    cli = subprocess.run([sys.executable, "-m", "attnkit", "predict", str(run), *texts, "--json"],
                         capture_output=True, text=True, env=env(), check=True)
    expected = [json.loads(line) for line in cli.stdout.splitlines()]
    got = []
    for start in range(0, len(texts), 3):  # the same texts in other groups: the numbers do not move
        reply = post_json(server, "/v1/predict", {"texts": texts[start : start + 3]})
        assert reply.status_code == 200, reply.text
        got += reply.json()["predictions"]
    assert got == expected
    assert [p["text"] for p in got] == texts  # hostile text comes back as the same text


def test_explain_defaults_to_the_run_s_most_faithful_method_with_its_figures(server: ServerProcess,
                                                                           trained: tuple[Path, Path]) -> None:
    record = json.loads((trained[0] / "faithfulness.json").read_text())
    text = "superb brilliant dreadful film"
    reply = post_json(server, "/v1/explain", {"text": text})
    assert reply.status_code == 200, reply.text
    got = reply.json()
    assert got["method"] == got["default_method"] == record["shown_first"]
    assert got["tokens"] == ["superb", "brilliant", "dreadful", "film"] and len(got["scores"]) == 4
    figures = record["test"]["methods"][record["shown_first"]]
    assert got["faithfulness"]["part"] == "test"
    assert got["faithfulness"]["comprehensiveness"] == figures["comprehensiveness"]
    assert got["faithfulness"]["sufficiency"] == figures["sufficiency"]
    assert got["faithfulness"]["random"] == record["test"]["random"]
    assert got["probabilities"] == post_json(server, "/v1/predict", {"texts": [text]}).json()["predictions"][0][
        "probabilities"]
    exact = post_json(server, "/v1/explain", {"text": text, "method": "contributions"}).json()
    assert exact["method"] == "contributions"
    assert abs(sum(exact["scores"]) + exact["bias"] - exact["logit"]) < 1e-4  # exact: they add up to the logit
    assert exact["faithfulness"]["part"] in ("test", "validation")
    wrong = post_json(server, "/v1/explain", {"text": text, "method": "shap"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "method" and "contributions" in wrong.json()["error"]


def test_attention_returns_each_captured_map_per_head(server: ServerProcess) -> None:
    got = post_json(server, "/v1/attention", {"text": "superb film"}).json()
    assert got["tokens"] == ["superb", "film"]
    shapes = {m["name"]: (m["role"], m["shape"]) for m in got["maps"]}
    layers = [name for name in shapes if name != "pooling"]
    assert layers and all(shapes[n] == ("encoder self", [2, 2, 2]) or shapes[n][1] == [2, 2, 2] for n in layers)
    for m in got["maps"]:
        for head in m["weights"]:
            for row in head:
                assert abs(sum(row) - 1) < 1e-3  # each query's weights sum to one


def test_models_health_and_schema(server: ServerProcess) -> None:
    models = httpx.get(server.url + "/v1/models").json()["models"]
    assert [m["name"] for m in models] == ["run"] and models[0]["labels"] == ["negative", "positive"]
    methods = {m["method"]: m for m in models[0]["methods"]}
    assert models[0]["default_method"] in methods and methods["attention"]["title"] == "raw attention"
    assert httpx.get(server.url + "/healthz").json()["status"] == "ok"
    schema = httpx.get(server.url + "/openapi.json").json()
    assert {"/v1/predict", "/v1/explain", "/v1/attention", "/v1/models", "/healthz"} <= set(schema["paths"])
    data = httpx.get(server.url + "/v1/data").json()
    assert data["n"] == 120 and len(data["metrics"]["confusion_matrix"]) == 2
    assert sum(map(sum, data["metrics"]["confusion_matrix"])) == 120


@pytest.mark.parametrize(("body", "status", "field", "words"), [
    ({"texts": ["a"] * 9}, 422, "texts", "limit of 8 (--max-texts)"),
    ({"texts": ["ok", "x" * 501]}, 422, "texts.1", "limit of 500 (--max-chars)"),
    ({"text": "x" * 501}, 422, "text", "limit of 500"),
    ({}, 422, "texts", "Field required"),
    ({"texts": "one text"}, 422, "texts", "list"),
    ({"texts": ["a"], "extra": 1}, 422, "extra", "Extra inputs"),
    ({"texts": ["\ud800"]}, 422, "texts.0", "lone surrogate"),
    ({"texts": ["a"], "model": "../../etc"}, 422, "model", "no model named"),
])
def test_bad_requests_are_refused_by_field_and_limit(server: ServerProcess, body: dict[str, Any], status: int,
                                                     field: str, words: str) -> None:
    path = "/v1/explain" if "text" in body else "/v1/predict"
    reply = post_json(server, path, body)
    assert reply.status_code == status and reply.headers["content-type"] == "application/json"
    assert reply.json()["field"] == field and words in reply.json()["error"], reply.json()


def test_body_limit_host_check_json_errors_and_no_cookies(server: ServerProcess) -> None:
    big = httpx.post(server.url + "/v1/predict", content=json.dumps({"texts": ["x" * 1_100_000]}),
                     headers={"content-type": "application/json"})
    assert big.status_code == 413 and "1,048,576 bytes (--max-body)" in big.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        yield b'{"texts": ["'
        for _ in range(12):
            yield b"x" * 100_000
        yield b'"]}'

    streamed = httpx.post(server.url + "/v1/predict", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    rebound = httpx.get(server.url + "/v1/models", headers={"Host": "attacker.example:8000"})
    assert rebound.status_code == 421 and "Host header" in rebound.json()["error"]
    broken = httpx.post(server.url + "/v1/predict", content=b"{\"texts\": [",
                        headers={"content-type": "application/json"})
    assert broken.status_code == 422 and broken.json()["error"] == "body: the body is not valid JSON"
    missing = httpx.get(server.url + "/v1/nothing")
    assert missing.status_code == 404 and missing.json()["error"]
    page = httpx.get(server.url + "/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for reply in (big, rebound, broken, missing, page, httpx.get(server.url + "/v1/models")):
        assert "set-cookie" not in reply.headers
        assert "Traceback" not in reply.text


def test_a_second_server_on_a_taken_port_names_it(server: ServerProcess, trained: tuple[Path, Path]) -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "serve", str(trained[0]), "--port", str(server.port)],
                          capture_output=True, text=True, env=env(), timeout=60)
    assert proc.returncode == 1
    assert f"port {server.port} on 127.0.0.1 is taken" in proc.stderr and "Traceback" not in proc.stderr


def test_answers_on_a_kept_alive_connection_leave_at_once(server: ServerProcess) -> None:
    """TCP_NODELAY on the listening socket: without it each answer on a kept-alive connection waited for
    the client's delayed ACK, about 40 ms."""
    with httpx.Client(timeout=30) as client:
        client.get(server.url + "/healthz")
        times = []
        for _ in range(10):
            start = time.perf_counter()
            client.get(server.url + "/healthz")
            times.append(time.perf_counter() - start)
    assert sorted(times)[5] < 0.025, times


def test_another_host_warns_and_a_folder_that_is_no_run_is_named(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "attnkit", "serve", str(tmp_path), "--host", "0.0.0.0", "--port",
                           "0"], capture_output=True, text=True, env=env(), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--host 0.0.0.0 makes the API reachable from other machines" in proc.stderr
    assert "no authentication" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"Error: {tmp_path} is not an attnkit run directory (no current.json)"


def same_answer(batched: dict[str, Any], alone: dict[str, Any]) -> bool:
    """The same text, label and tokens, and every probability equal within float32 rounding: the CPU's matrix
    kernels may change the last bit of a number with the row a text takes in its batch (docs/serve.md)."""
    probabilities = batched["probabilities"]
    return ({k: v for k, v in batched.items() if k not in ("probability", "probabilities")}
            == {k: v for k, v in alone.items() if k not in ("probability", "probabilities")}
            and probabilities.keys() == alone["probabilities"].keys()
            and all(abs(probabilities[k] - alone["probabilities"][k]) <= 1e-6 for k in probabilities)
            and abs(batched["probability"] - alone["probability"]) <= 1e-6)


def test_load_16_clients_every_answer_equal_to_the_single_request_answer(server: ServerProcess) -> None:
    texts = [f"superb {'brilliant ' * (i % 5)}dreadful film number {i % 7}" for i in range(24)]
    with httpx.Client(timeout=30) as client:
        alone = {t: client.post(server.url + "/v1/predict", json={"texts": [t]}).json()["predictions"][0]
                 for t in texts}
        explained = {t: client.post(server.url + "/v1/explain", json={"text": t}).json() for t in texts[:4]}
    rss: list[int] = []
    local = threading.local()

    def one(i: int) -> bool:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=30)
        client = local.client
        if i == 100:
            rss.append(server.peak_rss_kib())
        if i % 10 == 0:
            t = texts[i % 4]
            return bool(client.post(server.url + "/v1/explain", json={"text": t}).json() == explained[t])
        t = texts[i % len(texts)]
        reply = client.post(server.url + "/v1/predict", json={"texts": [t]})
        return reply.status_code == 200 and same_answer(reply.json()["predictions"][0], alone[t])

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(2000)))
    assert results.count(True) == 2000, f"{results.count(False)} of 2000 answers wrong or lost"
    assert server.peak_rss_kib() <= 1.2 * rss[0]  # memory stays flat: the peak after 2000 vs after 100


GENERATION = ("/v1/translate", "/v1/caption")  # run by tests/serve/test_generation.py, against its runs


def doc_examples(generation: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Each ``curl`` command of docs/serve.md with the JSON shown after it: those of the classification routes,
    or (``generation``) those of translation and captioning."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(bash|json)\n(.*?)```", page, re.S)
    out = []
    for (kind, body), (next_kind, shown) in zip(blocks, blocks[1:], strict=False):
        if kind == "bash" and body.lstrip().startswith("curl") and next_kind == "json":
            out.append((body.replace("\\\n", " ").strip(), json.loads(shown)))
    return [(c, shown) for c, shown in out if any(route in c for route in GENERATION) == generation]


def test_the_curl_examples_of_the_docs_run(server: ServerProcess) -> None:
    examples = doc_examples()
    assert len(examples) >= 6
    for command, shown in examples:
        proc = subprocess.run(["bash", "-c", command.replace("http://127.0.0.1:8000", server.url)],
                              capture_output=True, text=True, timeout=60, check=True)
        got = json.loads(proc.stdout)
        assert set(got) == set(shown), (command, got)
        if "error" in shown:
            assert (got["status"], got["field"], got["error"]) == (shown["status"], shown["field"], shown["error"])
        if "predictions" in shown:
            assert [p["text"] for p in got["predictions"]] == [p["text"] for p in shown["predictions"]]
            assert [set(p) for p in got["predictions"]] == [set(p) for p in shown["predictions"]]
        if "maps" in shown:
            assert set(got["maps"][0]) == set(shown["maps"][0])
