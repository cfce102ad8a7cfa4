"""``attnkit serve``: dynamic batching against the same server answering one request at a time.

Usage (``pip install '.[serve,bench]'``: FastAPI and uvicorn for the servers, httpx for the clients)::

    python benchmarks/serve.py [--run RUN] [--clients 16] [--requests 800] [--words 8 12]

Without ``--run`` a small document classifier (d_model 128, 2 layers, 4 heads) is trained on the
synthetic keyword corpus into a temporary folder. Two servers of that run are started one after the
other on free ports: one with dynamic batching (``--max-batch 64 --batch-wait-ms 0``, the defaults)
and one with ``--max-batch 1`` (each request runs alone, one at a time). ``--clients`` concurrent
clients send ``--requests`` single-text ``/v1/predict`` requests to each, over the loopback. Prints
both throughputs, their ratio (target >= 3 at 16 clients), the latency p50/p99 of each, and whether
every answer of both servers equals the answer to the same text sent alone.

Texts of the same number of tokens share a batch (see :func:`attnkit.train.tasks.classify.inference.predict_texts`),
so the gain grows with how many concurrent texts have the same length: ``--words`` sets the range of
words per text. Where a larger model's last bits still move with a text's row in the batch, the
largest difference is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def train(folder: Path, words: tuple[int, int]) -> Path:
    from attnkit.data.synthetic import keyword_corpus

    data = folder / "data.csv"
    with open(data, "w", encoding="utf-8") as fh:
        fh.write("text,label\n")
        for ex in keyword_corpus(400, seed=3, length=words):
            fh.write(f"{ex.text},{ex.label}\n")
    run = folder / "run"
    subprocess.run([sys.executable, "-m", "attnkit", "train", "--data", str(data), "--model", "document",
                    "--model-opt", "layer.d_model=128", "--model-opt", "layer.num_heads=4", "--model-opt",
                    "num_layers=2", "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(run)],
                   check=True, env=_env(), stdout=subprocess.DEVNULL)
    return run


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def start(run: Path, threads: int, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "--threads", str(threads), "serve", str(run),
                             "--port", "0", *flags], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"on (http://\S+) ", line)
        if found:
            return proc, found.group(1)
    raise SystemExit("attnkit serve did not start")


async def load(url: str, texts: list[str], clients: int) -> tuple[float, list[float], dict[str, Any]]:
    """Send one request per text from ``clients`` concurrent clients; (seconds, latencies, answers)."""
    queue = list(enumerate(texts))
    latencies: list[float] = []
    answers: dict[int, Any] = {}

    async def client() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            while queue:
                i, text = queue.pop()
                t0 = time.perf_counter()
                reply = await http.post(url + "/v1/predict", json={"texts": [text]})
                latencies.append(time.perf_counter() - t0)
                reply.raise_for_status()
                answers[i] = reply.json()["predictions"][0]

    start_time = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - start_time, latencies, {texts[i]: a for i, a in answers.items()}


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a classification run (default: train a small one)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--words", type=int, nargs=2, default=(8, 12), metavar=("MIN", "MAX"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each server")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both servers, alternating")
    parser.add_argument("--batch-wait-ms", type=float, help="the batched server's --batch-wait-ms (default: its own)")
    opts = parser.parse_args()
    from attnkit.data.synthetic import keyword_corpus

    texts = [ex.text for ex in keyword_corpus(opts.requests, seed=11, length=tuple(opts.words))]
    with tempfile.TemporaryDirectory() as tmp:
        run = opts.run or train(Path(tmp), tuple(opts.words))
        results: dict[str, tuple[float, list[float], dict[str, Any], dict[str, Any]]] = {}
        waiting = ("--batch-wait-ms", str(opts.batch_wait_ms)) if opts.batch_wait_ms is not None else ()
        modes = [("batched", waiting), ("one at a time", ("--max-batch", "1"))]
        for round_ in range(opts.rounds):  # alternating, the faster round of each kept: a shared machine drifts
            for name, flags in modes if round_ % 2 == 0 else modes[::-1]:
                proc, url = start(run, opts.threads, *flags)
                try:
                    httpx.post(url + "/v1/predict", json={"texts": texts[:4]}, timeout=60)  # warm up
                    alone = {t: httpx.post(url + "/v1/predict", json={"texts": [t]}).json()["predictions"][0]
                             for t in texts[:50]}
                    seconds, latencies, answers = asyncio.run(load(url, texts, opts.clients))
                    if name not in results or seconds < results[name][0]:
                        results[name] = (seconds, latencies, answers, alone)
                finally:
                    proc.terminate()
                    proc.wait()
    print(f"attnkit serve, {opts.requests} single-text /v1/predict requests from {opts.clients} concurrent clients "
          f"({opts.words[0]}-{opts.words[1]} words a text, {opts.threads} torch thread(s) a server)")
    for name, (seconds, latencies, _, _) in results.items():
        p50, p99 = 1000 * percentile(latencies, 50), 1000 * percentile(latencies, 99)
        print(f"  {name:>14}: {opts.requests / seconds:8.1f} requests/s   "
              f"latency p50 {p50:7.1f} ms   p99 {p99:7.1f} ms")
    ratio = (opts.requests / results["batched"][0]) / (opts.requests / results["one at a time"][0])
    print(f"  batching ratio: {ratio:.2f}x (target >= 3)")
    batched, single = results["batched"][2], results["one at a time"][2]
    same = batched == single and all(batched[t] == a for t, a in results["batched"][3].items())
    same = same and all(single[t] == a for t, a in results["one at a time"][3].items())
    print(f"  answers identical (batched = one at a time = each text sent alone): {same}")
    if not same:
        gap = max(abs(batched[t]["probabilities"][k] - v) for t, a in single.items()
                  for k, v in a["probabilities"].items())
        print(f"  largest difference of a probability: {gap:.1e} (the last bits of float32; see docs/serve.md)")


if __name__ == "__main__":
    main()
