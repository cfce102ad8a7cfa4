"""``attnkit serve``: dynamic batching against the same server answering one request at a time.

Usage (``pip install '.[serve,bench]'``: FastAPI and uvicorn for the servers, httpx for the clients)::

    python benchmarks/serve.py [--run RUN] [--clients 16] [--requests 800] [--words 8 12]
    python benchmarks/serve.py --route translate [--run RUN] [--requests 400]

Without ``--run`` a small document classifier (d_model 128, 2 layers, 4 heads) is trained on the
synthetic keyword corpus into a temporary folder. Two servers of that run are started one after the
other on free ports: one with dynamic batching (``--max-batch 64 --batch-wait-ms 0``, the defaults)
and one with ``--max-batch 1`` (each request runs alone, one at a time). ``--clients`` concurrent
clients send ``--requests`` single-text ``/v1/predict`` requests to each, over the loopback. Prints
both throughputs, their ratio (target >= 3 at 16 clients), the latency p50/p99 of each, and whether
every answer of both servers equals the answer to the same text sent alone.

``--route translate`` does the same with ``/v1/translate`` (beam 4) on a translation run (without ``--run``,
a small Transformer, d_model 64, trained for 20 seconds on a generated word-for-word corpus, which it
then translates), target >= 1.5,
and also checks each one-at-a-time answer against ``attnkit translate`` with the same beam.

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


WORDS_DE = "ein der hund mann frau kind haus baum läuft spielt sieht rot blau groß klein im park".split()
WORDS_EN = "a the dog man woman child house tree runs plays sees red blue big small in park".split()


def toy_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    import random

    rng = random.Random(seed)
    idx = [[rng.randrange(len(WORDS_DE)) for _ in range(rng.randint(4, 12))] for _ in range(n)]
    return [" ".join(WORDS_DE[i] for i in x) for x in idx], [" ".join(WORDS_EN[i] for i in x) for x in idx]


def train_translation(folder: Path) -> Path:
    src, tgt = toy_pairs(3000, 1)
    (folder / "train.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "train.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    run = folder / "de-en"
    subprocess.run([sys.executable, "-m", "attnkit", "train", "--task", "translate", "--src", str(folder / "train.de"),
                    "--tgt", str(folder / "train.en"), "--out", str(run), "--vocab-size", "80", "--d-model", "64",
                    "--num-heads", "4", "--d-ff", "128", "--encoder-layers", "2", "--decoder-layers", "2",
                    "--epochs", "12", "--warmup-steps", "30", "--max-tokens", "2000", "--lr", "3e-3",
                    "--dropout", "0", "--quiet"],
                   check=True, env=_env(), stdout=subprocess.DEVNULL)
    return run


ROUTES = {"predict": "predictions", "translate": "translations"}  # route -> the answers' key


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


async def load(url: str, texts: list[str], clients: int, route: str = "predict"
               ) -> tuple[float, list[float], dict[str, Any]]:
    """Send one request per text from ``clients`` concurrent clients; (seconds, latencies, answers)."""
    queue = list(enumerate(texts))
    latencies: list[float] = []
    answers: dict[int, Any] = {}

    async def client() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            while queue:
                i, text = queue.pop()
                t0 = time.perf_counter()
                reply = await http.post(f"{url}/v1/{route}", json={"texts": [text]})
                latencies.append(time.perf_counter() - t0)
                reply.raise_for_status()
                answers[i] = reply.json()[ROUTES[route]][0]

    start_time = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - start_time, latencies, {texts[i]: a for i, a in answers.items()}


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a classification (or with --route translate, translation) run "
                                                  "(default: train a small one)")
    parser.add_argument("--route", choices=sorted(ROUTES), default="predict")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--words", type=int, nargs=2, default=(8, 12), metavar=("MIN", "MAX"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each server")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both servers, alternating")
    parser.add_argument("--batch-wait-ms", type=float, help="the batched server's --batch-wait-ms (default: its own)")
    opts = parser.parse_args()
    from attnkit.data.synthetic import keyword_corpus

    route = opts.route
    if route == "translate":
        texts = toy_pairs(opts.requests, 11)[0]
    else:
        texts = [ex.text for ex in keyword_corpus(opts.requests, seed=11, length=tuple(opts.words))]
    cli_same = None
    with tempfile.TemporaryDirectory() as tmp:
        trainer = train_translation if route == "translate" else lambda folder: train(folder, tuple(opts.words))
        run = opts.run or trainer(Path(tmp))
        results: dict[str, tuple[float, list[float], dict[str, Any], dict[str, Any]]] = {}
        waiting = ("--batch-wait-ms", str(opts.batch_wait_ms)) if opts.batch_wait_ms is not None else ()
        modes = [("batched", waiting), ("one at a time", ("--max-batch", "1"))]
        for round_ in range(opts.rounds):  # alternating, the faster round of each kept: a shared machine drifts
            for name, flags in modes if round_ % 2 == 0 else modes[::-1]:
                proc, url = start(run, opts.threads, *flags)
                try:
                    httpx.post(f"{url}/v1/{route}", json={"texts": texts[:4]}, timeout=60)  # warm up
                    alone = {t: httpx.post(f"{url}/v1/{route}", json={"texts": [t]},
                                           timeout=60).json()[ROUTES[route]][0] for t in texts[:50]}
                    seconds, latencies, answers = asyncio.run(load(url, texts, opts.clients, route))
                    if name not in results or seconds < results[name][0]:
                        results[name] = (seconds, latencies, answers, alone)
                finally:
                    proc.terminate()
                    proc.wait()
        if route == "translate":  # the one-at-a-time server against attnkit translate, the same beam
            (Path(tmp) / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
            printed = subprocess.run([sys.executable, "-m", "attnkit", "translate", str(run), "--file",
                                      str(Path(tmp) / "texts.txt")], check=True, env=_env(), capture_output=True,
                                     text=True).stdout.splitlines()
            cli_same = all(results["one at a time"][2][t] == line for t, line in zip(texts, printed, strict=True))
    words = "4-12 words" if route == "translate" else f"{opts.words[0]}-{opts.words[1]} words"
    print(f"attnkit serve, {opts.requests} single-text /v1/{route} requests from {opts.clients} concurrent clients "
          f"({words} a text, {opts.threads} torch thread(s) a server)")
    for name, (seconds, latencies, _, _) in results.items():
        p50, p99 = 1000 * percentile(latencies, 50), 1000 * percentile(latencies, 99)
        print(f"  {name:>14}: {opts.requests / seconds:8.1f} requests/s   "
              f"latency p50 {p50:7.1f} ms   p99 {p99:7.1f} ms")
    ratio = (opts.requests / results["batched"][0]) / (opts.requests / results["one at a time"][0])
    print(f"  batching ratio: {ratio:.2f}x (target >= {1.5 if route == 'translate' else 3})")
    if cli_same is not None:
        print(f"  one at a time = attnkit translate (the same beam) for every text: {cli_same}")
    batched, single = results["batched"][2], results["one at a time"][2]
    same = batched == single and all(batched[t] == a for t, a in results["batched"][3].items())
    same = same and all(single[t] == a for t, a in results["one at a time"][3].items())
    print(f"  answers identical (batched = one at a time = each text sent alone): {same}")
    if not same and route == "predict":
        gap = max(abs(batched[t]["probabilities"][k] - v) for t, a in single.items()
                  for k, v in a["probabilities"].items())
        print(f"  largest difference of a probability: {gap:.1e} (the last bits of float32; see docs/serve.md)")


if __name__ == "__main__":
    main()
