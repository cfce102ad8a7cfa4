"""The three presets and the baseline, set by set: accuracy, macro-F1, time and whole-process peak memory.

Each preset (``fast``, ``balanced``, ``accurate``) runs as its own ``attnkit cv --preset P`` process, and
the TF-IDF baseline as ``attnkit baseline`` on the same folds, each under ``/usr/bin/time -v`` (its
"Maximum resident set size" is the peak printed). IMDB runs its fixed 25k/25k split with ``attnkit train
--test``. Per set the table then gives the two ratios of the ``balanced`` preset:

    gain share = (balanced - fast) / (accurate - fast)      accuracy points of accurate's gain over fast
    time share = balanced's time / accurate's time          wall-clock, whole process

    .venv/bin/python evals/presets.py --sets mr sms agnews imdb          # 10 folds: hours on 2 cores
    .venv/bin/python evals/presets.py --sets mr sms --max-folds 1        # one fold each: about 30 min
    .venv/bin/python evals/presets.py --sets mr --presets fast balanced  # accurate left out (no ratios)

Sets as in ``evals/default_recipe.py`` (``--data-root``, else ``$ATTNKIT_DATA``, else ``../shared/data``);
``--file NAME=PATH`` adds a ``label<TAB>text`` set (such as one ``evals/long_corpus.py`` builds). The
``balanced`` and ``accurate`` presets need the ``pretrained`` extra. Measured figures: docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnkit.train.runs.checkpoint import read_run_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_imdb, load_set  # noqa: E402

PRESETS = ("fast", "balanced", "accurate")
ATTNKIT = [sys.executable, "-m", "attnkit"]


def _write(examples: list[Any], path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for ex in examples:
            f.write(f"{ex.label}\t{' '.join(ex.text.split())}\n")
    return path


def _timed(command: list[str]) -> tuple[str, float, float]:
    """``command``'s standard output, wall seconds and peak resident memory (GB), through /usr/bin/time -v."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return done.stdout, seconds, int(peak.group(1)) / 1e6 if peak else float("nan")


def _baseline_line(output: str) -> tuple[float, float]:
    """Accuracy and macro-F1 of the baseline's last summary line (``attnkit baseline``)."""
    line = [x for x in output.splitlines() if "accuracy" in x][-1]
    acc = re.search(r"accuracy(?: over \d+ fold\(s\))?:? (\d\.\d+)", line)
    f1 = re.search(r"macro-F1 (\d\.\d+)", line)
    if acc is None:
        raise ValueError(f"no accuracy in the baseline's line {line!r}")
    return float(acc.group(1)), float(f1.group(1)) if f1 else float("nan")


def run_set(name: str, files: dict[str, Path], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every preset and the baseline on set ``name``; ``files``: ``data`` (and ``test`` for a fixed split)."""
    data = ["--data", str(files["data"]), "--format", "label-tab-text"]
    row: dict[str, Any] = {}
    for preset in args.presets:
        if "test" in files:
            out = work / f"{name}-{preset}"
            _, seconds, peak = _timed([*ATTNKIT, "train", *data, "--test", str(files["test"]), "--preset", preset,
                                       "--out", str(out), "--quiet", "--overwrite"])
            test = read_run_config(out)["metrics"]["test"]
            acc, f1 = test["accuracy"], test.get("macro_f1", float("nan"))
        else:
            report = work / f"{name}-{preset}.json"
            _, seconds, peak = _timed([*ATTNKIT, "cv", *data, "--folds", str(args.folds), "--max-folds",
                                       str(args.max_folds), "--preset", preset, "--json", str(report), "--quiet"])
            results = json.loads(report.read_text())["results"]
            acc = sum(r["accuracy"] for r in results) / len(results)
            f1 = sum(r.get("macro_f1", float("nan")) for r in results) / len(results)
        row[preset] = {"accuracy": acc, "macro_f1": f1, "seconds": seconds, "peak_gb": peak}
        print(f"  {name:8s} {preset:9s} accuracy {acc:.4f}  macro-F1 {f1:.4f}  {seconds / 60:6.1f} min  "
              f"peak {peak:.2f} GB", flush=True)
    split = ["--test", str(files["test"])] if "test" in files else ["--folds", str(args.folds), "--max-folds",
                                                                     str(args.max_folds)]
    output, seconds, peak = _timed([*ATTNKIT, "baseline", *data, *split])
    acc, f1 = _baseline_line(output)
    row["baseline"] = {"accuracy": acc, "macro_f1": f1, "seconds": seconds, "peak_gb": peak}
    print(f"  {name:8s} baseline  accuracy {acc:.4f}  macro-F1 {f1:.4f}  {seconds / 60:6.1f} min  "
          f"peak {peak:.2f} GB", flush=True)
    if {"fast", "balanced", "accurate"} <= row.keys():
        gain = row["accurate"]["accuracy"] - row["fast"]["accuracy"]
        row["gain_share"] = (row["balanced"]["accuracy"] - row["fast"]["accuracy"]) / gain if gain else float("nan")
        row["time_share"] = row["balanced"]["seconds"] / row["accurate"]["seconds"]
    return row


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The markdown table of every set's row."""
    head = "| set | " + " | ".join(p for p in (*PRESETS, "baseline")) + " | gain share | time share |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in rows.items():
        cells = [f"{row[p]['accuracy'] * 100:.2f}% (F1 {row[p]['macro_f1'] * 100:.2f}), {row[p]['seconds'] / 60:.1f} "
                 f"min, {row[p]['peak_gb']:.2f} GB" if p in row else "-" for p in (*PRESETS, "baseline")]
        ratios = [f"{row[k]:.2f}" if k in row else "-" for k in ("gain_share", "time_share")]
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", default=["mr", "sms", "agnews", "imdb"])
    parser.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                        help="another set, a label<TAB>text file (cross-validated like the others)")
    parser.add_argument("--presets", nargs="+", choices=PRESETS, default=list(PRESETS))
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--max-folds", type=int, default=10)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="attnkit-presets-") as tmp:
        work = Path(tmp)
        sets: dict[str, dict[str, Path]] = {}
        for name in args.sets:
            if name == "imdb":
                train, test = load_imdb(args.data_root)
                sets[name] = {"data": _write(train, work / "imdb-train.tsv"),
                              "test": _write(test, work / "imdb-test.tsv")}
            else:
                sets[name] = {"data": _write(load_set(name, args.data_root), work / f"{name}.tsv")}
        for pair in args.file:
            name, _, path = pair.partition("=")
            sets[name] = {"data": Path(path)}
        for name, files in sets.items():
            print(f"{name}:", flush=True)
            rows[name] = run_set(name, files, args, work)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
