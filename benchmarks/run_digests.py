"""What verifying a run's bytes costs ``attnkit predict``: the same run with and without its record.

Usage::

    python benchmarks/run_digests.py [--run RUN] [--repeats 5] [--d-model 1024] [--layers 6]

Without ``--run`` a document classifier of about 100 MB of weights (d_model 1024, 6 layers) is trained
for one epoch on the synthetic keyword corpus into a temporary folder. A copy of the run has its record
removed from the manifest, as a run committed before the record had (read as it is, with a notice).
``attnkit predict RUN TEXT`` then runs as a whole process on each, alternately, ``--repeats`` times
(after one run of each that warms the page cache), under ``/usr/bin/time -v``. Prints the verified bytes,
the median start-up of each, their ratio (target: at most 1.15) and each process's peak resident memory;
then the time the verification itself takes in a process of its own (best of 3, the files hashed from the
page cache), as a
share of the unverified start-up: the same figure, without the noise of two whole processes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def train(folder: Path, d_model: int, layers: int) -> Path:
    from attnkit.data.synthetic import keyword_corpus

    data = folder / "data.csv"
    with open(data, "w", encoding="utf-8") as fh:
        fh.write("text,label\n")
        for ex in keyword_corpus(200, seed=3, length=(8, 12)):
            fh.write(f"{ex.text},{ex.label}\n")
    run = folder / "run"
    subprocess.run([sys.executable, "-m", "attnkit", "train", "--data", str(data), "--model", "document",
                    "--model-opt", f"layer.d_model={d_model}", "--model-opt", "layer.num_heads=8", "--model-opt",
                    f"num_layers={layers}", "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(run)],
                   check=True, env=_env(), stdout=subprocess.DEVNULL)
    return run


def unrecorded_copy(run: Path, target: Path) -> Path:
    """``run`` copied, its manifest without the record: read unverified."""
    shutil.copytree(run, target)
    manifest = json.loads((target / "current.json").read_text())
    del manifest["files"]
    (target / "current.json").unlink()
    (target / "current.json").write_text(json.dumps(manifest))
    return target


def predict(run: Path) -> tuple[float, int]:
    """Seconds and peak resident kB of one ``attnkit predict`` process."""
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "attnkit", "predict", str(run),
                           "a quietly moving film"], env=_env(), capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return seconds, int(peak.group(1)) if peak else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a trained run (default: train one of about 100 MB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from attnkit.train.runs.rundir import RESUME_ONLY, committed_dir, read_manifest

    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or train(Path(tmp), args.d_model, args.layers)
        plain = unrecorded_copy(run, Path(tmp) / "unrecorded")
        files = (read_manifest(run) or {})["files"]
        verified = sum(e["size"] for n, e in files.items() if not n.startswith(RESUME_ONLY))
        weights = (committed_dir(run) / "model.safetensors").stat().st_size
        print(f"run: {run}; model.safetensors {weights / 1e6:.1f} MB; predict verifies {verified / 1e6:.1f} MB "
              f"({len(files)} files recorded, the train state is verified by resuming only)")
        predict(run), predict(plain)  # warm the page cache and the imports
        times: dict[str, list[float]] = {"verified": [], "unverified": []}
        peaks: dict[str, list[int]] = {"verified": [], "unverified": []}
        for _ in range(args.repeats):
            for name, folder in (("verified", run), ("unverified", plain)):
                seconds, peak = predict(folder)
                times[name].append(seconds)
                peaks[name].append(peak)
        med = {name: statistics.median(values) for name, values in times.items()}
        for name in ("unverified", "verified"):
            print(f"{name:>10}: predict start-up median {med[name]:.3f} s over {args.repeats} "
                  f"(min {min(times[name]):.3f}, max {max(times[name]):.3f}); peak RSS {max(peaks[name]) / 1e3:.0f} MB")
        ratio = med["verified"] / med["unverified"]
        print(f"ratio verified / unverified: {ratio:.3f} (target <= 1.15: {'met' if ratio <= 1.15 else 'MISSED'})")
        hashing = min(float(subprocess.run(
            [sys.executable, "-c", "import sys, time; from attnkit.train.runs.rundir import committed_dir; "
             "t = time.perf_counter(); committed_dir(sys.argv[1]); print(time.perf_counter() - t)", str(run)],
            env=_env(), capture_output=True, text=True, check=True).stdout) for _ in range(3))
        checked = verified
        print(f"verification alone: {checked / 1e6:.1f} MB in {hashing:.3f} s ({checked / hashing / 1e9:.2f} GB/s), "
              f"{hashing / med['unverified']:.1%} of the unverified start-up")
        print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
