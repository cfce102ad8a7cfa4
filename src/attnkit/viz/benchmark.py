"""Benchmark of the HTML report: time to write it, file size, and the render time
measured inside headless Chromium (when installed).

    python -m attnkit.viz.benchmark [--tokens 512 --num-layers 6 --num-heads 12 --top-k 8]

The page records its own render time in its self-check element, which
``chromium --dump-dom`` prints; no network is reachable from the browser.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from attnkit.viz.report import write_report

__all__ = ["main", "render_in_chromium"]


def render_in_chromium(page: Path, timeout: float = 60.0) -> dict[str, object] | None:
    """Open ``page`` in headless Chromium and return the page's self-check, or None
    when no Chromium is installed."""
    binary = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if binary is None:
        return None
    with tempfile.TemporaryDirectory(prefix="attnkit-chromium-") as profile:
        out = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
             "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout, check=False)
    found = re.search(r'<pre id="attnkit-selfcheck" hidden="">(.*?)</pre>', out.stdout, re.S)
    return json.loads(found.group(1)) if found else {"error": out.stderr[-500:]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--num-layers", type=int, default=6)
    parser.add_argument("--num-heads", type=int, default=12)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="keep the report here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    shape = (args.num_layers, args.num_heads, args.tokens, args.tokens)
    attn = rng.random(shape, dtype=np.float32) ** 8  # peaked rows, like trained heads
    attn /= attn.sum(-1, keepdims=True)
    tokens = [f"w{i}" for i in range(args.tokens)]
    with tempfile.TemporaryDirectory() as tmp:
        page = args.out or Path(tmp) / "report.html"
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            write_report(page, tokens, attn, title="benchmark", top_k=args.top_k)
            times.append(time.perf_counter() - start)
        size = page.stat().st_size
        check = render_in_chromium(page)
    print(f"report {args.tokens} tokens x {args.num_layers} layers x {args.num_heads} heads, top-{args.top_k}:")
    print(f"  write: median {np.median(times):.3f} s (min {min(times):.3f} s over {args.repeat})")
    print(f"  size:  {size / 1e6:.2f} MB")
    if check is None:
        print("  render: Chromium not installed")
    else:
        print(f"  render in Chromium: {check.get('renderMs')} ms (script), "
              f"{check.get('sinceNavigationMs')} ms since navigation; "
              f"{check.get('lines')} edges, {check.get('thumbnails')} thumbnails; errors {check.get('errors')}")


if __name__ == "__main__":
    main()
