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
    .venv/bin/python evals/presets.py --sets mr --also "before=accurate --pack 0"   # one more column
    .venv/bin/python evals/presets.py --sets mr --max-folds 1 --seed 1   # other folds, another batch order

``--also NAME=PRESET FLAGS`` adds a column that runs PRESET with more flags (a preset's settings
before a change, measured beside it in the same run); its time share against accurate is printed too.
``--source NAME=DIR`` runs column NAME with the attnkit of another checkout (``DIR/src`` first on the
path): the code before a change, beside it in the same run:

    git worktree add /tmp/before HEAD~3
    .venv/bin/python evals/presets.py --sets mr --also "before=accurate" --source before=/tmp/before

Sets as in ``evals/default_recipe.py`` (``--data-root``, else ``$ATTNKIT_DATA``, else ``../shared/data``),
and ``mixed``: a long-document, many-class corpus built from them (:func:`mixed_corpus`: 10 classes, each a
set and one of its labels, such as ``agnews:3`` or ``imdb:pos``; 3,000 documents of 8 of that class's texts,
about 500 words on average);
``--file NAME=PATH`` adds a ``label<TAB>text`` set (such as one ``evals/long_corpus.py`` builds). The
``balanced`` and ``accurate`` presets need the ``pretrained`` extra. Measured figures: docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
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


def _timed(command: list[str], source: Path | None = None) -> tuple[str, float, float]:
    """``command``'s standard output, wall seconds and peak resident memory (GB), through /usr/bin/time -v
    (``source``: a checkout whose ``src`` the command imports attnkit from)."""
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source / "src")}
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, env=env)
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


def mixed_corpus(root: Path | None, per_class: int = 300, per_document: int = 8, seed: int = 0) -> list[Any]:
    """``per_class`` documents for each (set, label) of MR, SMS, AG News and IMDB's train half, each
    ``per_document`` texts of that class joined; the label says both (``"sms:spam"``)."""
    import random

    from attnkit.data.readers import Example

    pools: dict[str, list[str]] = {}
    for name in ("mr", "sms", "agnews"):
        for ex in load_set(name, root):
            pools.setdefault(f"{name}:{ex.label}", []).append(ex.text)
    for ex in load_imdb(root)[0]:
        pools.setdefault(f"imdb:{ex.label}", []).append(ex.text)
    rng = random.Random(seed)
    return [Example(" ".join(rng.sample(texts, per_document)), label)
            for label, texts in sorted(pools.items()) for _ in range(per_class)]


def run_set(name: str, files: dict[str, Path], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every preset and the baseline on set ``name``; ``files``: ``data`` (and ``test`` for a fixed split)."""
    data = ["--data", str(files["data"]), "--format", "label-tab-text", "--seed", str(args.seed)]
    row: dict[str, Any] = {}
    for preset, flags in [(p, [p]) for p in args.presets] + list(args.also.items()):
        flags, source = ["--preset", *flags], args.source.get(preset)
        if "test" in files:
            out = work / f"{name}-{preset}"
            _, seconds, peak = _timed([*ATTNKIT, "train", *data, "--test", str(files["test"]), *flags,
                                       "--out", str(out), "--quiet", "--overwrite"], source)
            test = read_run_config(out)["metrics"]["test"]
            acc, f1 = test["accuracy"], test.get("macro_f1", float("nan"))
        else:
            report = work / f"{name}-{preset}.json"
            _, seconds, peak = _timed([*ATTNKIT, "cv", *data, "--folds", str(args.folds), "--max-folds",
                                       str(args.max_folds), *flags, "--json", str(report), "--quiet"], source)
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
    for also in args.also:
        if "accurate" in row:
            print(f"  {name:8s} {also} takes {row[also]['seconds'] / row['accurate']['seconds']:.2f}x accurate's "
                  f"time, accuracy {100 * (row[also]['accuracy'] - row['accurate']['accuracy']):+.2f} points")
    return row


def table(rows: dict[str, dict[str, Any]], also: list[str]) -> str:
    """The markdown table of every set's row."""
    columns = (*PRESETS, *also, "baseline")
    head = "| set | " + " | ".join(columns) + " | gain share | time share |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in rows.items():
        cells = [f"{row[p]['accuracy'] * 100:.2f}% (F1 {row[p]['macro_f1'] * 100:.2f}), {row[p]['seconds'] / 60:.1f} "
                 f"min, {row[p]['peak_gb']:.2f} GB" if p in row else "-" for p in columns]
        ratios = [f"{row[k]:.2f}" if k in row else "-" for k in ("gain_share", "time_share")]
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", default=["mr", "sms", "agnews", "imdb"])
    parser.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                        help="another set, a label<TAB>text file (cross-validated like the others)")
    parser.add_argument("--presets", nargs="+", choices=PRESETS, default=list(PRESETS))
    parser.add_argument("--also", action="append", default=[], metavar="NAME=PRESET FLAGS",
                        help="one more column: PRESET run with more flags")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                        help="run the --also column NAME with the attnkit of checkout DIR (the code before a change)")
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--max-folds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0,
                        help="the folds' (or IMDB's validation split's) and the training's seed, for every column")
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    args.also = {name: shlex.split(rest) for name, _, rest in (pair.partition("=") for pair in args.also)}
    args.source = {name: Path(folder) for name, _, folder in (pair.partition("=") for pair in args.source)}
    for name, folder in args.source.items():
        if name not in args.also or not (folder / "src" / "attnkit").is_dir():
            parser.error(f"--source {name}={folder}: needs an --also column {name} and a checkout with src/attnkit")
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="attnkit-presets-") as tmp:
        work = Path(tmp)
        sets: dict[str, dict[str, Path]] = {}
        for name in args.sets:
            if name == "mixed":
                sets[name] = {"data": _write(mixed_corpus(args.data_root), work / "mixed.tsv")}
            elif name == "imdb":
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
    print(table(rows, list(args.also)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
