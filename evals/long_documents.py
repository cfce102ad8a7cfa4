"""Long documents: the default recipe reading past ``--max-len`` in chunks, against cutting at ``--max-len``.

On each set, one seeded split, the same for every row, in one process:

* ``cut``: the default recipe with ``--model-opt chunk_len=0``: every document
  cut at ``--max-len`` tokens (what the recipe did before it read chunks; the
  n-gram half then sees only those tokens too);
* ``chunked``: the default recipe as ``attnkit train`` runs it: a document
  longer than ``--max-len`` read in overlapping chunks of ``--max-len`` tokens
  (a quarter shared, at most 8), the chunk vectors pooled by attention;
* the baseline (TF-IDF 1-2-grams + logistic regression on the whole text),
  fit on train + validation.

Each row prints accuracy, macro-F1, the minutes it took, how many test
documents were chunked, and the process's peak resident memory after it (the
rows run in the order given, so a row that needs more memory than the ones
before it shows its own peak).

Sets: ``imdb`` (a seeded sample of ``--train`` reviews of the train half and
``--test`` of the test half; 10% of the sample held out for validation) and
``agnews-long`` (4 topics; the 7,600 articles are split 80/20 first, then each
document is ``--articles`` articles of one topic drawn from its own part, each
article used in 3 documents: long multi-class documents with no article in
both parts).

    /usr/bin/time -v .venv/bin/python evals/long_documents.py --sets imdb --max-len 128
    .venv/bin/python evals/long_documents.py --sets agnews-long --max-len 64 --rows cut chunked
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_imdb, load_set  # noqa: E402

from attnkit.data.readers import Example  # noqa: E402
from attnkit.data.sources import split_examples  # noqa: E402
from attnkit.train.config import TrainConfig  # noqa: E402
from attnkit.train.memory_budget import peak_rss_mib  # noqa: E402
from attnkit.train.runs.checkpoint import atomic_write_json  # noqa: E402
from attnkit.train.tasks.classify.baseline import baseline_scores  # noqa: E402
from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier  # noqa: E402
from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, data_defaults, train_defaults  # noqa: E402

SETS = ("imdb", "agnews-long")
ROWS: dict[str, dict[str, Any]] = {"cut": {"chunk_len": 0}, "chunked": {}}


def long_articles(articles: list[Example], per_document: int, uses: int, seed: int) -> list[Example]:
    """Documents of ``per_document`` same-topic articles, each article in ``uses`` documents (seeded)."""
    rng = random.Random(seed)
    out = []
    for label in sorted({e.label for e in articles}):
        texts = [e.text for e in articles if e.label == label]
        pool = [t for _ in range(uses) for t in rng.sample(texts, len(texts))]
        out += [Example(" ".join(pool[i:i + per_document]), label)
                for i in range(0, len(pool) - per_document + 1, per_document)]
    rng.shuffle(out)
    return out


def load_parts(name: str, args: argparse.Namespace) -> tuple[list[Example], list[Example], list[Example]]:
    """Train, validation and test parts of set ``name``."""
    rng = random.Random(args.seed)
    if name == "imdb":
        train, test = load_imdb(args.data_root)
        train, test = rng.sample(train, args.train), rng.sample(test, args.test)
        tr, va, _ = split_examples(train, val=0.1, test=0.0, seed=args.seed)
        return tr, va, test
    train, _, test = split_examples(load_set("agnews", args.data_root), val=0.0, test=0.2, seed=args.seed)
    tr, va, _ = split_examples(long_articles(train, args.articles, 3, args.seed), val=0.1, test=0.0,
                               seed=args.seed)
    return tr, va, long_articles(test, args.articles, 3, args.seed + 1)


def run_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    tr, va, te = load_parts(name, args)
    words = sum(len(e.text.split()) for e in te) / len(te)
    print(f"{name}: {len(tr)} train, {len(va)} validation, {len(te)} test; {words:.0f} words per test document; "
          f"--max-len {args.max_len}", flush=True)
    row: dict[str, Any] = {"set": name, "train": len(tr), "val": len(va), "test": len(te), "max_len": args.max_len}
    data = DataSettings(**{**data_defaults(DEFAULT_MODEL), "max_len": args.max_len})
    for label in args.rows:
        config = TrainConfig.from_dict({"device": "cpu", **train_defaults(DEFAULT_MODEL), "seed": args.seed,
                                        **({"epochs": args.epochs} if args.epochs else {})})
        start = time.perf_counter()
        result = fit_classifier(tr, va, te, model_name=DEFAULT_MODEL, model_options=ROWS[label],
                                train_config=config, data=data, quiet=True)
        assert result.test is not None
        row[label] = {"accuracy": result.test["accuracy"], "macro_f1": result.test["macro_f1"],
                      "minutes": (time.perf_counter() - start) / 60, "epochs": len(result.history),
                      "chunked_test_documents": result.test.get("chunked_documents", 0),
                      "peak_memory_mib": round(peak_rss_mib(), 1)}
        print(f"  {label:<10} accuracy {result.test['accuracy'] * 100:6.2f}  macro-F1 "
              f"{result.test['macro_f1'] * 100:6.2f}  ({row[label]['minutes']:.2f} min, {len(result.history)} "
              f"epochs; {row[label]['chunked_test_documents']} test documents chunked; peak "
              f"{row[label]['peak_memory_mib']:.0f} MiB)", flush=True)
    base = baseline_scores([*tr, *va], te)
    row["baseline"] = {"accuracy": base["accuracy"], "macro_f1": base["macro_f1"]}
    print(f"  {'baseline':<10} accuracy {base['accuracy'] * 100:6.2f}  macro-F1 {base['macro_f1'] * 100:6.2f}",
          flush=True)
    if "cut" in row and "chunked" in row:
        print(f"  chunked minus cut: accuracy {(row['chunked']['accuracy'] - row['cut']['accuracy']) * 100:+.2f} "
              f"points, time x{row['chunked']['minutes'] / row['cut']['minutes']:.2f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", choices=SETS, default=list(SETS))
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding imdb/ and agnews/")
    parser.add_argument("--max-len", type=int, default=128, help="tokens per chunk, and where 'cut' cuts")
    parser.add_argument("--train", type=int, default=5000, help="IMDB reviews sampled from the train half")
    parser.add_argument("--test", type=int, default=5000, help="IMDB reviews sampled from the test half")
    parser.add_argument("--articles", type=int, default=8, help="AG News articles per long document")
    parser.add_argument("--rows", nargs="*", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="at most this many epochs (default: the recipe's)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [run_set(name, args) for name in args.sets]
    print(f"peak resident memory {peak_rss_mib():.0f} MiB", flush=True)
    if args.json:
        atomic_write_json(args.json, {"seed": args.seed, "rows": rows})
    else:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
