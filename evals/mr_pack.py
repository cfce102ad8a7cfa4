"""Packed against bucketed training on MR movie reviews: tokens per second and test accuracy.

Trains the same Transformer ``DocumentClassifier`` (an encoder below the
pooling, so attention has a cost) twice on one seeded split, through the same
``Trainer`` and ``ClassificationTask`` as ``attnkit train``:

* **padded**: padded batches of ``--batch-size`` documents in random order (for context);
* **bucketed**: padded batches of ``--batch-size`` documents of similar length
  (the default, ``TrainConfig.bucket``);
* **packed**: batches of as many documents, drawn without length sorting and
  packed into rows of ``--pack`` tokens (``attnkit train --pack``), attention
  kept within each document.

Both take the same number of optimizer steps of the same number of documents;
the figures are the training throughput (document tokens per CPU
second of training, validation excluded: process time, so that other jobs on a shared machine do not skew
it; run with ``--threads 1`` for it to mean what it says) and the test accuracy, with their ratio and
difference, measured in this one run::

    .venv/bin/python evals/mr_pack.py --threads 1                        # seed 0, with the padded run
    .venv/bin/python evals/mr_pack.py --threads 1 --seeds 1 2 --no-padded   # two more seeds

Reads ``--data``, else ``$ATTNKIT_DATA/mr``, else ``../shared/data/mr`` next to the repository.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset
from attnkit.data.locations import DataNotFoundError, data_path
from attnkit.data.readers import read_examples
from attnkit.data.sources import split_examples
from attnkit.data.tokenization import train_tokenizer
from attnkit.models import build_model
from attnkit.train.config import TrainConfig
from attnkit.train.loop.task import ClassificationTask
from attnkit.train.loop.trainer import Trainer
from attnkit.train.tasks.classify.baseline import BASELINE_NAME, baseline_scores

REPO = Path(__file__).resolve().parents[1]

MODEL = {"layer": {"d_model": 128, "num_heads": 4, "d_ff": 256, "dropout": 0.3}, "num_layers": 2,
         "positional": "sinusoidal", "pooling": "attention"}
TRAIN = {"epochs": 5, "batch_size": 64, "lr": 1e-3, "weight_decay": 0.05, "patience": 0,
         "label_smoothing": 0.1, "device": "cpu"}


class TimedTask(ClassificationTask):
    """The classification task, clocking its validation so that it can be left out of the rate."""

    validate_seconds = 0.0

    def validate(self, model: nn.Module) -> dict[str, float] | None:
        start = time.process_time()
        try:
            return super().validate(model)
        finally:
            self.validate_seconds += time.process_time() - start


def run(name: str, data: tuple[Any, Any, Any], vocab: int, classes: int, config: TrainConfig,
        max_len: int) -> dict[str, Any]:
    train, val, test = data
    torch.manual_seed(config.seed)
    model = build_model("document", {**MODEL, "vocab_size": vocab, "num_classes": classes, "max_len": max_len})
    task = TimedTask(train, val, lengths=train.lengths if config.bucket else None, batch_size=config.batch_size,
                     seed=config.seed, label_smoothing=config.label_smoothing, pack=config.pack or None)
    trainer = Trainer(model, config, task=task, quiet=True)
    start = time.process_time()
    history = trainer.fit()
    seconds = time.process_time() - start - task.validate_seconds
    tokens = sum(train.lengths) * len(history)
    metrics = trainer.evaluate(test)
    row = {"run": name, "epochs": len(history), "train_seconds": round(seconds, 2),
           "tokens_per_second": round(tokens / seconds, 1), "test_accuracy": metrics["accuracy"],
           "best_val_accuracy": max(h["val_accuracy"] for h in history)}
    print(f"{name:>9}: {row['tokens_per_second']:>9.0f} tokens per CPU second over {row['epochs']} epochs "
          f"({row['train_seconds']:.1f} CPU s training), test accuracy {100 * row['test_accuracy']:.2f}%", flush=True)
    return row


def compare(parts: tuple[Any, Any, Any], vocab: int, classes: int, args: argparse.Namespace, seed: int,
            padded: bool) -> dict[str, Any]:
    """Bucketed and packed runs (and the padded one, for context) with one seed; their ratio and gap."""
    base = {**TRAIN, "epochs": args.epochs, "batch_size": args.batch_size, "seed": seed}
    print(f"seed {seed}:", flush=True)
    result: dict[str, Any] = {"seed": seed}
    if padded:
        result["padded"] = run("padded", parts, vocab, classes,
                               TrainConfig.from_dict({**base, "bucket": False}), args.max_len)
    result["bucketed"] = bucketed = run("bucketed", parts, vocab, classes, TrainConfig.from_dict(base), args.max_len)
    # Packing needs no length sorting: random batches of mixed lengths fill the rows tightly.
    result["packed"] = packed = run("packed", parts, vocab, classes,
                                    TrainConfig.from_dict({**base, "pack": args.pack, "bucket": False}), args.max_len)
    result["speedup"] = speed = packed["tokens_per_second"] / bucketed["tokens_per_second"]
    result["accuracy_difference_points"] = gap = 100 * (packed["test_accuracy"] - bucketed["test_accuracy"])
    print(f"packed / bucketed tokens per second: {speed:.2f}x (target >= 1.3x); "
          f"accuracy difference {gap:+.2f} points (target within 0.5)")
    if padded:
        over = packed["tokens_per_second"] / result["padded"]["tokens_per_second"]
        result["speedup_over_padded"] = over
        print(f"packed / padded (unsorted) tokens per second: {over:.2f}x; accuracy difference "
              f"{100 * (packed['test_accuracy'] - result['padded']['test_accuracy']):+.2f} points")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="folder with rt-polarity.pos/.neg")
    parser.add_argument("--pack", type=int, default=64, help="tokens per packed row (at least --max-len)")
    parser.add_argument("--max-len", type=int, default=64, help="truncate sentences to this many tokens")
    parser.add_argument("--epochs", type=int, default=TRAIN["epochs"])
    parser.add_argument("--batch-size", type=int, default=TRAIN["batch_size"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="one comparison per seed (weights, dropout, batch order; the split stays seed 0)")
    parser.add_argument("--no-padded", dest="padded", action="store_false",
                        help="skip the padded (unsorted) run kept for context")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    try:
        folder = data_path("mr", args.data, base=REPO)
    except DataNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    examples = read_examples(folder, format="polarity", encoding="latin-1")
    tr, va, te = split_examples(examples, val=0.1, test=0.1, seed=0)
    tokenizer = train_tokenizer([e.text for e in tr], kind="word", vocab_size=20000)
    labels = LabelVocab.from_examples(tr)
    parts = tuple(TextClassificationDataset(p, tokenizer, labels, args.max_len) for p in (tr, va, te))
    print(f"MR: {len(tr)} train / {len(va)} validation / {len(te)} test sentences, "
          f"{sum(parts[0].lengths)} training tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    base = baseline_scores([*tr, *va], te)["accuracy"]
    print(f"baseline ({BASELINE_NAME}) on the same split: {base * 100:.2f}%", flush=True)
    vocab, classes = tokenizer.get_vocab_size(), len(labels)
    results = [compare(parts, vocab, classes, args, seed, padded=args.padded and i == 0)
               for i, seed in enumerate(args.seeds)]
    if len(results) > 1:
        speed = sum(r["speedup"] for r in results) / len(results)
        gap = sum(r["accuracy_difference_points"] for r in results) / len(results)
        print(f"mean over seeds {args.seeds}: packed / bucketed {speed:.2f}x, accuracy difference {gap:+.2f} points")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
