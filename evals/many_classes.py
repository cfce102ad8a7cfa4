"""The default recipe on many classes and long documents, beside the TF-IDF baseline: accuracy, time, memory.

Each corpus is written as gzipped ``label<TAB>text`` train and test files, then
two separate processes run on them, each under ``/usr/bin/time -v`` (the
whole-process peak, ``Maximum resident set size``):

* the default: ``attnkit train --data TRAIN --test TEST`` and nothing else that
  changes the recipe (``--quiet``, ``--out``; ``--max-memory``, ``--token-budget`` only when given
  here), with the time each step took: reading the files, the tokenizer and the
  encoded documents, the n-gram half's fit (its peak resident memory too) and
  the network's training, weighing the halves on the validation part, the
  test score and the report (explanations and their faithfulness);
* the baseline: :func:`attnkit.train.tasks.classify.baseline.baseline_scores` on the same
  files (fit on the training file, as ``--baseline`` fits it on the training and
  validation parts), keeping the most frequent n-grams that fit the room left under the
  default memory limit beside what the process holds
  (:func:`attnkit.train.tasks.classify.baseline.baseline_features`: about 290,000 for 50
  classes, 730,000 for 20); all of them would need 12 GB and more.

Corpora (``--corpora``):

* ``topicsC`` (any C, e.g. ``topics2``, ``topics20``, ``topics100``):
  :func:`attnkit.data.synthetic.topic_corpus` with ``--docs`` documents of
  ``--words`` words (default 300-3,000), C classes, 3,000 common words and 40
  topic words a class, a fifth of each document's topic words borrowed from the
  neighbouring class; ``--test`` more documents, generated with another seed.
* ``issue42``: the corpus of issue 42 (5,000 documents of 300-1,500 words, 50
  classes; 1,000 more to test on), which stopped with ``Unable to allocate 33.5 GiB``.
* ``mixed32``: long documents of real text from ``../shared/data`` in 32
  classes, topics x sources: each joins 4 AG News articles of one topic, 4 IMDB
  reviews of one polarity, 4 MR sentences of one polarity and one SMS message,
  ham or spam; the label is the four together (4 x 2 x 2 x 2). Test documents
  are drawn from texts no training document holds (IMDB's test half, the other
  part of the rest).

    nice -n 10 .venv/bin/python evals/many_classes.py --corpora issue42 topics20 --docs 10000
    nice -n 10 .venv/bin/python evals/many_classes.py --corpora topics2 topics20 topics100 --docs 10000
    nice -n 10 .venv/bin/python evals/many_classes.py --corpora mixed32 --docs 6000

Prints one line per corpus: accuracy and macro-F1 of both, their times and
peaks, and where the default's time went.

Last run (10,000 training documents of 300-3,000 words, 2,000 to test; a
shared 2-core machine; the recipe's token budget of 40 million tokens, the
n-gram fit a block of 20 classes at a time above 20 classes):

* topics2: default 93.85% (macro-F1 93.85) in 239 s, peak 1,541 MiB; baseline
  87.20% (87.20) in 42 s, peak 1,475 MiB.
* topics20: default 95.25% (macro-F1 95.25) in 284 s, peak 1,740 MiB;
  baseline 83.85% (83.84) in 75 s, peak 5,150 MiB: x3.8 the baseline's time.
  The default's time: reading 2 s, encoding 29 s, n-gram fit 65 s, network
  123 s (2 epochs of 16 million tokens), weighing and scoring 8 s, report 54 s.
* topics100: default 88.25% (88.38) in 200 s, peak 2,041 MiB; baseline 41.95%
  (42.21) in 110 s, peak 5,082 MiB.
* issue42: default 91.50% (91.45) in 60 s, peak 1,484 MiB; baseline 59.00%
  (59.34) in 31 s, peak 4,119 MiB.
* mixed32 (``--docs 6000``): default 32.80% (31.43) in 468 s, peak 2,069 MiB;
  baseline 32.20% (29.90) in 154 s, peak 4,837 MiB.

Without the token budget (``--token-budget 0``, passed on to ``attnkit
train``), 10 epochs: topics20 97.00% in 1,601 s (x18 the baseline's time),
topics100 91.95% in 1,101 s, topics2 93.60% in 618 s.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_imdb, load_set  # noqa: E402

from attnkit.data.readers import Example  # noqa: E402
from attnkit.data.synthetic import topic_corpus  # noqa: E402

_DEFAULT = r"""
import atexit, json, sys, time
from attnkit._memory import peak_rss_mib
from attnkit.models.ngram_half import NgramHalf
from attnkit.train.tasks.classify import pipeline, plan, reports
from attnkit.train.loop import trainer
from attnkit.cli import cli

spent = {}
start = time.perf_counter()

def timed(owner, name, phase):
    step = getattr(owner, name)
    def wrapped(*args, **kw):
        begun = time.perf_counter()
        try:
            return step(*args, **kw)
        finally:
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - begun
            if phase == "ngram_fit":
                spent["ngram_fit_peak_mib"] = peak_rss_mib()
    setattr(owner, name, wrapped)

timed(plan, "load_splits", "reading")
timed(pipeline, "train_tokenizer", "encoding")
timed(pipeline, "_datasets", "encoding")
timed(NgramHalf, "init_from_training_data", "ngram_fit")
timed(trainer.Trainer, "fit", "network")
timed(pipeline, "fit_decision", "weighing")
timed(trainer.Trainer, "evaluate", "scoring")
timed(reports, "write_reports", "report")

def report():
    spent["total"] = time.perf_counter() - start
    print("PHASES " + json.dumps(spent), file=sys.stderr, flush=True)

atexit.register(report)
sys.argv = ["attnkit", *sys.argv[1:]]
cli()
"""

_BASELINE = r"""
import json, sys, time
from attnkit.data.readers import read_examples
from attnkit.train.tasks.classify.baseline import baseline_scores
start = time.perf_counter()
train = read_examples(sys.argv[1])  # as attnkit train reads them: the header is a header
test = read_examples(sys.argv[2])
scores = baseline_scores(train, test)
print("BASELINE " + json.dumps({"accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"],
                                "seconds": time.perf_counter() - start}), flush=True)
"""


def write_tsv(path: Path, examples: list[Example]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["label", "text"])
        writer.writerows([e.label, e.text] for e in examples)
    return path


def topics(classes: int, docs: int, test: int, words: tuple[int, int], seed: int
           ) -> tuple[list[Example], list[Example]]:
    """:func:`topic_corpus` documents, the test ones generated with another seed (the same words and classes)."""
    def made(n: int, s: int) -> list[Example]:
        return [Example(e.text, e.label) for e in topic_corpus(n, num_classes=classes, seed=s, length=words)]
    return made(docs, seed), made(test, seed + 1000)


def _pools(data_root: Path | None) -> dict[str, list[list[str]]]:
    """The real texts, by source and class, each class's texts shuffled: AG News topics, IMDB (train half),
    MR polarity, SMS ham/spam; and ``imdb-test`` (IMDB's test half) for the test documents' reviews."""
    rng = random.Random(0)
    imdb_train, imdb_test = load_imdb(data_root)
    out: dict[str, list[list[str]]] = {}
    for name, examples in (("agnews", load_set("agnews", data_root)), ("imdb", imdb_train),
                           ("imdb-test", imdb_test), ("mr", load_set("mr", data_root)),
                           ("sms", load_set("sms", data_root))):
        labels = sorted({e.label for e in examples})
        out[name] = [[re.sub(r"<br\s*/?>", " ", e.text) for e in examples if e.label == label] for label in labels]
        for texts in out[name]:
            rng.shuffle(texts)
    return out


def mixed(docs: int, test: int, data_root: Path | None, seed: int) -> tuple[list[Example], list[Example]]:
    """Documents of 4 AG News articles, 4 IMDB reviews, 4 MR sentences and 1 SMS message, each part of one
    class of its source; 32 classes. AG News, MR and SMS texts are split in two disjoint halves (train,
    test); IMDB's come from its own halves. A text may recur within its half, in other documents."""
    pools = _pools(data_root)
    rng = random.Random(seed)
    parts = (("agnews", 4), ("imdb", 4), ("mr", 4), ("sms", 1))

    def made(n: int, half: int) -> list[Example]:
        out = []
        for _ in range(n):
            text, label = [], []
            for source, k in parts:
                name = "imdb-test" if source == "imdb" and half else source
                c = rng.randrange(len(pools[name]))
                texts = pools[name][c]
                if source != "imdb":
                    middle = len(texts) // 2
                    texts = texts[middle:] if half else texts[:middle]
                text += rng.sample(texts, k) if len(texts) >= k else rng.choices(texts, k=k)
                label.append(f"{source}{c}")
            rng.shuffle(text)
            out.append(Example(" ".join(text), "-".join(label)))
        return out
    return made(docs, 0), made(test, 1)


def corpus(name: str, args: argparse.Namespace) -> tuple[list[Example], list[Example]]:
    if name == "issue42":
        return topics(50, 5000, 1000, (300, 1500), args.seed)
    if name == "mixed32":
        return mixed(args.docs, args.test, args.data_root, args.seed)
    match = re.fullmatch(r"topics(\d+)", name)
    if match is None:
        raise SystemExit(f"unknown corpus {name!r}: topicsC (C classes), issue42 or mixed32")
    return topics(int(match.group(1)), args.docs, args.test, tuple(args.words), args.seed)


ADDRESS_LIMIT = 10 * 2**30
"""``RLIMIT_AS`` of each process (``--address-limit``): a run that would take the shared machine's memory
(the baseline's logistic regression holds classes x features float64 tables) fails instead. The default
plans within the smaller of its default budget and 80% of what this leaves."""


def timed_process(args: list[str], limit: int = ADDRESS_LIMIT) -> tuple[subprocess.CompletedProcess[str], float,
                                                                           float]:
    """``args`` under ``/usr/bin/time -v``: the process, its wall seconds and its peak RSS in MiB."""
    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    begun = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True, preexec_fn=bounded,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - begun
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return done, wall, int(peak.group(1)) / 1024 if peak else float("nan")


def run_default(train: Path, test: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    done, wall, peak = timed_process([sys.executable, "-c", _DEFAULT, "train", "--data", str(train), "--test",
                                      str(test), "--out", str(out), "--quiet", *extra])
    found: dict[str, Any] = {"seconds": wall, "peak_mib": peak}
    line = next((x for x in done.stderr.splitlines() if x.startswith("PHASES ")), None)
    found["phases"] = json.loads(line[7:]) if line else {}
    found["notes"] = [x for x in (done.stdout + done.stderr).splitlines()
                      if x.startswith(("memory:", "token budget:"))]
    if done.returncode != 0:
        found["failed"] = [x for x in done.stderr.splitlines() if x.strip() and not x.startswith(("PHASES", "\t"))
                           ][-1:]
        return found
    config = json.loads(sorted(out.glob("checkpoints/*/config.json"))[-1].read_text())  # the last commit
    found.update(accuracy=config["metrics"]["test"]["accuracy"], macro_f1=config["metrics"]["test"]["macro_f1"],
                 rows=config["model_config"].get("ngram_rows"), epochs=config["epochs_run"])
    return found


def run_baseline(train: Path, test: Path) -> dict[str, Any]:
    done, wall, peak = timed_process([sys.executable, "-c", _BASELINE, str(train), str(test)])
    line = next((x for x in done.stdout.splitlines() if x.startswith("BASELINE ")), None)
    if line is None:
        return {"failed": done.stderr.strip().splitlines()[-1:], "seconds": wall, "peak_mib": peak}
    return {**json.loads(line[9:]), "seconds": wall, "peak_mib": peak}


def _line(name: str, size: str, ours: dict[str, Any], base: dict[str, Any]) -> str:
    phases, nan = ours.get("phases", {}), float("nan")
    where = ", ".join(f"{k} {phases[k]:.0f} s" for k in ("reading", "encoding", "ngram_fit", "network",
                                                         "weighing", "scoring", "report") if k in phases)
    fit_peak = f"; peak after the n-gram fit {phases['ngram_fit_peak_mib']:.0f} MiB" if "ngram_fit_peak_mib" in \
        phases else ""
    if "failed" in ours:
        return f"{name} ({size}): default FAILED {ours['failed']} after {ours['seconds']:.0f} s, peak " \
               f"{ours['peak_mib']:.0f} MiB"
    return (f"{name} ({size}): default {ours['accuracy'] * 100:.2f}% (macro-F1 {ours['macro_f1'] * 100:.2f}) "
            f"in {ours['seconds']:.0f} s, peak {ours['peak_mib']:.0f} MiB, {ours['rows']} bigram rows, "
            f"{ours['epochs']} epochs | baseline {base.get('accuracy', nan) * 100:.2f}% "
            f"(macro-F1 {base.get('macro_f1', nan) * 100:.2f}) "
            f"in {base['seconds']:.0f} s, peak {base['peak_mib']:.0f} MiB | difference "
            f"{(ours['accuracy'] - base.get('accuracy', nan)) * 100:+.2f} points, time x"
            f"{ours['seconds'] / base['seconds']:.1f} | default's time: {where}{fit_peak}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["issue42", "topics2", "topics20", "topics100", "mixed32"])
    parser.add_argument("--docs", type=int, default=10_000, help="training documents (topicsC, mixed32)")
    parser.add_argument("--test", type=int, default=2_000, help="test documents (topicsC, mixed32)")
    parser.add_argument("--words", type=int, nargs=2, default=(300, 3000), help="topicsC: words a document")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding mr/, sms/, agnews/, imdb/")
    parser.add_argument("--no-baseline", action="store_true", help="the default alone")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args, extra = parser.parse_known_args(argv)
    rows = []
    for name in args.corpora:
        train, test = corpus(name, args)
        words = sum(len(e.text.split()) for e in train) / max(1, len(train))
        size = f"{len(train)} train / {len(test)} test, {len({e.label for e in train})} classes, {words:.0f} words"
        print(f"{name}: {size}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            train_file = write_tsv(Path(tmp) / "train.tsv.gz", train)
            test_file = write_tsv(Path(tmp) / "test.tsv.gz", test)
            del train, test
            ours = run_default(train_file, test_file, Path(tmp) / "run", extra)
            base = {"seconds": float("nan"), "peak_mib": float("nan")} if args.no_baseline else \
                run_baseline(train_file, test_file)
        rows.append({"corpus": name, "size": size, "default": ours, "baseline": base})
        print(_line(name, size, ours, base), flush=True)
        for note in ours.get("notes", []):
            print(f"  {note}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
