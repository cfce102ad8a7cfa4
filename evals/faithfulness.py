"""Is attention explanation? Faithfulness of every attribution method on MR, SMS and AG News.

Trains the default recipe (``attnkit.train.tasks.classify.recipe.DEFAULT_MODEL`` with its
defaults, as ``attnkit train --data FILE`` does: 80/10/10 stratified split,
seed 0) on each set, or with ``--recipe accurate`` fine-tunes all-MiniLM-L6-v2
(the ``pretrained`` extra; ``--epochs``, default 1, ``--lr``, ``--max-len``),
then scores every attribution method that applies to the model
(:mod:`attnkit.attribution.methods`) on up to ``--documents`` test
documents: comprehensiveness and sufficiency as AOPC over the top 1, 5, 10,
20 and 50% of tokens (DeYoung et al., 2020, ERASER), beside a random-order
control, in the same run. Prints the table, the time the faithfulness took,
whether the method a report shows first passes the bar (comprehensiveness at
least 3x the random order's and at least raw attention's, sufficiency at most
raw attention's), and on MR the five words that moved the decision most per
class (exact contributions: the mean push per document a word is in, among words in at least 1% of the
class's documents; and the total push, which favours frequent words) beside raw attention's.

Measured (seed 0; MR 1,000 test sentences, AG News its 760 test articles;
comprehensiveness / sufficiency, AOPC):

======================= ============== ============== ==============
method                  MR             SMS            AG News
======================= ============== ============== ==============
exact contributions     0.328 / -0.166 0.092 / -0.008 0.413 / -0.101
integrated gradients    0.302 / -0.146 0.089 / -0.007 0.381 / -0.078
gradient x input        0.253 / -0.120 0.085 / -0.007 0.348 / -0.070
attention x value norm  0.162 / -0.016 0.053 /  0.009 0.285 / -0.008
raw attention           0.155 /  0.003 0.054 /  0.014 0.283 / -0.007
random order (control)  0.028 /  0.171 0.007 /  0.070 0.031 /  0.319
======================= ============== ============== ==============

Faithfulness of the five methods: 35 s for the 1,000 MR sentences, 123 s for
AG News, 154 s for SMS's 558 test messages (load 10), on a shared 2-core CPU (training took 11-17 minutes a set there).
MR's words that moved the decision most: neg mediocre, dull, unfunny, fails,
seagal; pos culture, delightful, powerful, beautiful, solid.

    nice -n 10 .venv/bin/python evals/faithfulness.py                       # MR and AG News, 1,000 each
    nice -n 10 .venv/bin/python evals/faithfulness.py --sets mr --documents 200 --json faith.json

Sets are read as ``evals/default_recipe.py`` reads them (``--data-root``, else
``$ATTNKIT_DATA``, else ``../shared/data`` beside the repository).
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

from attnkit.attribution.faithfulness import decisive_words, faithfulness, format_table, token_label
from attnkit.data.locations import DataNotFoundError
from attnkit.data.sources import split_examples
from attnkit.train.config import TrainConfig
from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier
from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, data_defaults, train_defaults


def _bar(result: dict[str, Any]) -> str:
    first = result["shown_first"]
    m, r = result["methods"][first], result["random"]
    a = result["methods"].get("attention", m)
    checks = {"comprehensiveness >= 3x random": m["comprehensiveness"] >= 3 * r["comprehensiveness"],
              "comprehensiveness >= raw attention's": m["comprehensiveness"] >= a["comprehensiveness"],
              "sufficiency <= raw attention's": m["sufficiency"] <= a["sufficiency"]}
    return f"shown first: {first}; " + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items())


def _fit(examples: list[Any], args: argparse.Namespace) -> tuple[Any, str]:
    """The default recipe, or with ``--recipe accurate`` all-MiniLM-L6-v2 fine-tuned (``--epochs``, ``--max-len``)."""
    if args.recipe == "fast":
        config = TrainConfig.from_dict({**train_defaults(DEFAULT_MODEL), "seed": 0, "device": "cpu"})
        train, val, test = split_examples(examples, val=0.1, test=0.1, seed=config.seed)
        return fit_classifier(train, val, test, model_name=DEFAULT_MODEL, train_config=config,
                              data=DataSettings(**data_defaults(DEFAULT_MODEL)), quiet=True), DEFAULT_MODEL
    from attnkit.train.tasks.classify.finetune import FINETUNE_DEFAULTS, finetune_bert
    from attnkit.train.tasks.classify.recipe import pretrained_folder

    config = TrainConfig.from_dict({**FINETUNE_DEFAULTS, "epochs": args.epochs, "lr": args.lr, "seed": 0,
                                    "device": "cpu"})
    train, val, test = split_examples(examples, val=0.1, test=0.1, seed=config.seed)
    if args.train_size is not None and args.train_size < len(train):  # a seeded sample: a shorter fine-tuning
        train = random.Random(0).sample(list(train), args.train_size)
    return finetune_bert(train, val, test, init_from=pretrained_folder(), train_config=config,
                         max_len=args.max_len, quiet=True), "all-MiniLM-L6-v2 fine-tuned"


def run_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from default_recipe import load_set  # evals/, beside this script

    examples = load_set(name, args.data_root)
    start = time.perf_counter()
    fit, model_name = _fit(examples, args)
    trained = time.perf_counter() - start
    assert fit.test is not None and fit.test_data is not None
    docs = [list(map(int, d)) for d in fit.test_data.ids][: args.documents]
    print(f"{name}: {len(examples)} examples, {model_name} trained in {trained / 60:.1f} min, "
          f"test accuracy {fit.test['accuracy']:.4f}", flush=True)
    start = time.perf_counter()
    result = faithfulness(fit.model, docs)
    seconds = time.perf_counter() - start
    for line in format_table(result):
        print("  " + line)
    print(f"  {_bar(result)}\n  faithfulness of {len(result['methods'])} methods on {len(docs)} documents: "
          f"{seconds:.0f} s", flush=True)
    out: dict[str, Any] = {"set": name, "accuracy": fit.test["accuracy"], "faithfulness": result,
                           "seconds": seconds}
    if name == "mr":
        labels = list(fit.label_vocab.labels)
        best = "contributions" if "contributions" in result["methods"] else result["shown_first"]
        for method, aggregate in ((best, "mean"), (best, "sum"), ("attention", "mean")):
            rows = decisive_words(fit.model, docs, method=method, top=args.top, aggregate=aggregate)
            words = {labels[c]: [token_label(fit.tokenizer, t) for t, _ in r] for c, r in enumerate(rows)}
            out[f"words_{method}_{aggregate}"] = words
            for label, shown in words.items():
                print(f"  {method:>13} ({aggregate:>4}) {label}: {', '.join(shown)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", choices=("mr", "sms", "agnews"), default=["mr", "agnews"])
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding mr/, sms/, agnews/")
    parser.add_argument("--documents", type=int, default=1000, help="test documents scored per set")
    parser.add_argument("--top", type=int, default=5, help="words per class on MR")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--recipe", choices=("fast", "accurate"), default="fast",
                        help="fast: the default recipe; accurate: fine-tune all-MiniLM-L6-v2 (the pretrained extra)")
    parser.add_argument("--epochs", type=int, default=1, help="--recipe accurate: fine-tuning epochs")
    parser.add_argument("--lr", type=float, default=1e-4, help="--recipe accurate: peak learning rate")
    parser.add_argument("--max-len", type=int, default=64, help="--recipe accurate: WordPiece tokens kept")
    parser.add_argument("--train-size", type=int, default=None,
                        help="--recipe accurate: fine-tune on a seeded sample of this many training documents")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    try:
        for name in args.sets:
            results.append(run_set(name, args))
    except DataNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
