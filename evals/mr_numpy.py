"""Train the NumPy Transformer classifier from scratch on MR movie reviews.

Data: ``--data``, else ``$ATTNKIT_DATA/mr``, else ``../shared/data/mr`` next to the
repository (rt-polarity.pos / .neg, Latin-1, one review per line, split on "\\n"
only). A fixed seeded 10% of the 10,662 reviews is the
test set; 10% of the rest is the validation set for early stopping. The
vocabulary is built on the training split only (whitespace tokens).

Prints the learning curve (train loss, validation accuracy per epoch) and the
final test accuracy, the wall time and the machine load.

    nice -n 10 .venv/bin/python evals/mr_numpy.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Small matrices: one BLAS thread is faster, and far faster on a loaded machine
# (OpenBLAS threads spin while they wait for a core).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from attnkit.data.locations import DataNotFoundError, data_path  # noqa: E402
from attnkit.layer_config import TransformerLayerConfig  # noqa: E402
from attnkit.reference.analysis import accuracy, attention_stats, most_attended_tokens  # noqa: E402
from attnkit.reference.models import ClassifierConfig, TransformerClassifier  # noqa: E402
from attnkit.reference.optim import AdamW  # noqa: E402
from attnkit.reference.text import Vocabulary, pad_batch  # noqa: E402
from attnkit.reference.trainer import Trainer, predict  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def read_mr(folder: Path) -> tuple[list[str], np.ndarray]:
    texts: list[str] = []
    labels: list[int] = []
    for name, label in (("rt-polarity.neg", 0), ("rt-polarity.pos", 1)):
        raw = (folder / name).read_bytes().decode("latin-1")
        lines = [line.strip() for line in raw.split("\n") if line.strip()]
        texts += lines
        labels += [label] * len(lines)
    return texts, np.asarray(labels, dtype=np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="folder with rt-polarity.pos/.neg "
                             "(default: $ATTNKIT_DATA/mr, else ../shared/data/mr next to the repository)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=1)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--min-frequency", type=int, default=2)
    parser.add_argument("--patience", type=int, default=3)
    args = parser.parse_args()
    try:
        data = data_path("mr", args.data, base=REPO)
    except DataNotFoundError as err:
        sys.exit(str(err))

    start = time.perf_counter()
    load_before = os.getloadavg()
    texts, labels = read_mr(data)
    order = np.random.default_rng(1234).permutation(len(texts))  # the fixed test split
    n_test = len(texts) // 10
    test_idx, rest = order[:n_test], order[n_test:]
    n_val = len(rest) // 10
    val_idx, train_idx = rest[:n_val], rest[n_val:]
    vocab = Vocabulary.build([texts[i] for i in train_idx], min_frequency=args.min_frequency)
    encode = [vocab.encode(t, max_len=64) or [1] for t in texts]
    print(f"MR: {len(texts)} reviews, train {len(train_idx)}, val {len(val_idx)}, test {len(test_idx)}; "
          f"vocabulary {len(vocab)} (min frequency {args.min_frequency})")

    config = ClassifierConfig(
        vocab_size=len(vocab), num_classes=2,
        layer=TransformerLayerConfig(args.d_model, args.num_heads, 2 * args.d_model, dropout=args.dropout),
        num_layers=args.num_layers, pooling="mean", seed=args.seed,
    )
    model = TransformerClassifier(config)
    print(f"model: {model.num_parameters():,} parameters, {config}")
    opt = AdamW(model.parameters(), model.gradients(), lr=args.lr, weight_decay=args.weight_decay)
    trainer = Trainer(model, opt, batch_size=args.batch_size, clip_norm=1.0,
                      patience=args.patience, seed=args.seed)
    history = trainer.fit(
        [encode[i] for i in train_idx], labels[train_idx], epochs=args.epochs,
        val_x=[encode[i] for i in val_idx], val_y=labels[val_idx], log=print,
    )
    test_x = [encode[i] for i in test_idx]
    acc = accuracy(predict(model, test_x), labels[test_idx])
    elapsed = time.perf_counter() - start
    print(f"best epoch {history.best_epoch + 1} (val acc {max(history.val_accuracy):.4f}); "
          f"stopped early: {history.stopped_early}")
    ids = pad_batch(test_x[:512])
    model.eval()
    model.forward(ids)
    mask = ids != 0
    w = model.attention_weights()
    print("attention stats (test, last layer):",
          {k: round(v, 4) for k, v in attention_stats(w, mask).items()})
    top = most_attended_tokens(w, ids, vocab.itos, k=10, mask=mask, min_frequency=5)
    print("most attended tokens:", ", ".join(f"{t} {s:.3f}" for t, s, _ in top))
    load_after = os.getloadavg()
    print(f"TEST ACCURACY {acc:.4f}  ({len(test_idx)} reviews)  wall {elapsed:.0f}s  "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2 cores)")


if __name__ == "__main__":
    main()
