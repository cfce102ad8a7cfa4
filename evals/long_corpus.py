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

Documents this long are what :func:`attnkit.train.memory_budget.estimate_classifier`
must count: every token is read (in chunks of ``--max-len``) by both halves.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_imdb  # noqa: E402
from long_documents import long_articles  # noqa: E402

from attnkit.data.readers import Example  # noqa: E402


def long_reviews(reviews: list[Example], documents: int, per_document: int, seed: int) -> list[Example]:
    """``documents`` documents of ``per_document`` same-polarity reviews (each review in as many as needed)."""
    uses = max(1, math.ceil(documents * per_document / len(reviews)))
    return long_articles(reviews, per_document, uses, seed)[:documents]


def write_tsv(path: Path, examples: list[Example]) -> None:
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["label", "text"])
        writer.writerows([e.label, e.text] for e in examples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for train.tsv.gz and test.tsv.gz")
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding imdb/")
    parser.add_argument("--train", type=int, default=20000, help="training documents")
    parser.add_argument("--test", type=int, default=2000, help="test documents")
    parser.add_argument("--per-document", type=int, default=13, help="reviews joined into one document")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
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
