"""A corpus of long documents built from IMDB, for measuring the default recipe's memory.

Each document is ``--per-document`` reviews of one polarity joined (about
3,000 words with the default 13; IMDB's reviews average 234), drawn from the
train half for the training file and from the test half for the test file, so
no review is in both; each review is used in several documents. The label is
the reviews' polarity. The files are gzipped TSV (``label<TAB>text``), as
``attnkit train`` reads them:

    .venv/bin/python evals/long_corpus.py --out /tmp/imdb-long --train 20000 --test 2000
    /usr/bin/time -v .venv/bin/python -m attnkit train --data /tmp/imdb-long/train.tsv.gz \\
        --test /tmp/imdb-long/test.tsv.gz --epochs 1 --quiet --out runs/imdb-long

Documents this long are what :func:`attnkit.train.tasks.classify.memory.estimate_classifier`
must count: every token is read (in chunks of ``--max-len``) by both halves.
With ``--fit-only`` the script reads the corpus already in ``--out`` and runs
``attnkit train`` on it (any further arguments after ``--`` are passed on)
only up to the end of the n-gram half's fit, where the peak of such a run
lies, and prints the fit's time and the peak resident memory before and after:

    /usr/bin/time -v .venv/bin/python evals/long_corpus.py --out /tmp/imdb-long --fit-only
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_imdb  # noqa: E402
from long_documents import long_articles  # noqa: E402

from attnkit.data.readers import Example  # noqa: E402
from attnkit.train.memory_budget import peak_rss_mib  # noqa: E402


def long_reviews(reviews: list[Example], documents: int, per_document: int, seed: int) -> list[Example]:
    """``documents`` documents of ``per_document`` same-polarity reviews (each review in as many as needed)."""
    uses = max(1, math.ceil(documents * per_document / len(reviews)))
    return long_articles(reviews, per_document, uses, seed)[:documents]


def write_tsv(path: Path, examples: list[Example]) -> None:
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["label", "text"])
        writer.writerows([e.label, e.text] for e in examples)


class FitDone(BaseException):
    """Raised once the n-gram half is fitted, to end a ``--fit-only`` run there (past the CLI's error handling)."""


PHASES = ("frequent_bigrams", "ngram_counts", "naive_bayes_ratios", "fit_nb_regression")
"""The steps of :meth:`attnkit.models.ngram_half.NgramHalf.init_from_training_data`, timed by ``--fit-only``."""


def _phase(name: str, step: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        out = step(*args, **kw)
        print(f"  {name}: {time.perf_counter() - start:.1f} s, peak RSS {peak_rss_mib():.0f} MiB", flush=True)
        return out
    return timed


def fit_only(out: Path, extra: list[str]) -> int:
    """``attnkit train`` on the corpus in ``out`` up to the end of the n-gram half's fit; prints what it took."""
    from attnkit.cli import cli
    from attnkit.models import ngram_half
    from attnkit.models.ngram_half import NgramHalf

    for name in PHASES:  # each step of the fit says what it took (the peak only grows)
        setattr(ngram_half, name, _phase(name, getattr(ngram_half, name)))
    fit = NgramHalf.init_from_training_data

    def timed(self: NgramHalf, documents, labels, **kw) -> None:  # type: ignore[no-untyped-def]
        tokens = int(getattr(documents, "offsets", [0])[-1])
        print(f"fit: {len(documents)} documents, {tokens} tokens, {self._ngram_rows} bigram rows; peak RSS "
              f"{peak_rss_mib():.0f} MiB before it", flush=True)
        start = time.perf_counter()
        fit(self, documents, labels, **kw)
        print(f"fit: {time.perf_counter() - start:.1f} s, peak RSS {peak_rss_mib():.0f} MiB", flush=True)
        raise FitDone

    NgramHalf.init_from_training_data = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as run:  # nothing is written there before the first epoch ends
        args = ["train", "--data", str(out / "train.tsv.gz"), "--test", str(out / "test.tsv.gz"), "--device",
                "cpu", "--epochs", "1", "--quiet", "--out", str(Path(run) / "run"), *extra]
        try:
            cli.main(args, standalone_mode=False)
        except FitDone:
            return 0
    print("the run ended without fitting an n-gram half", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for train.tsv.gz and test.tsv.gz")
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding imdb/")
    parser.add_argument("--train", type=int, default=20000, help="training documents")
    parser.add_argument("--test", type=int, default=2000, help="test documents")
    parser.add_argument("--per-document", type=int, default=13, help="reviews joined into one document")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit-only", action="store_true",
                        help="read the corpus in --out and run `attnkit train` on it up to the end of the n-gram "
                             "half's fit (arguments after -- go to train)")
    args, extra = parser.parse_known_args(argv)
    if args.fit_only:
        return fit_only(args.out, [a for a in extra if a != "--"])
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    train, test = load_imdb(args.data_root)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, reviews, count, seed in (("train", train, args.train, args.seed), ("test", test, args.test,
                                                                                 args.seed + 1)):
        docs = long_reviews(reviews, count, args.per_document, seed)
        write_tsv(args.out / f"{name}.tsv.gz", docs)
        words = sum(len(e.text.split()) for e in docs) / len(docs)
        print(f"{name}: {len(docs)} documents, {words:.0f} words each on average", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
