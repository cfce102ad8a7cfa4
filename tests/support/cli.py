"""What the command-line tests share: tiny model settings and a labelled CSV of the keyword corpus."""

from __future__ import annotations

import csv
from pathlib import Path

import click

from attnkit.data.synthetic import keyword_corpus

# A document model small enough that `attnkit train` takes about a second.
TINY = ["--model", "document", "--model-opt", "layer.d_model=16", "--model-opt", "layer.num_heads=2",
        "--model-opt", "num_layers=0", "--model-opt", "layer.dropout=0.0", "--epochs", "3", "--batch-size", "16",
        "--lr", "0.01", "--device", "cpu", "--quiet"]


def write_keyword_csv(path: Path, n: int) -> Path:
    """``n`` keyword-corpus documents as a ``text,label`` CSV at ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for ex in keyword_corpus(n, seed=3, length=(8, 12)):
            writer.writerow([ex.text, ex.label])
    return path


def _train_command(task: str) -> click.Command:
    from attnkit.cli import train_tasks

    return train_tasks()[task]


train_translate = _train_command("translate")
"""``attnkit train --task translate``, the command generated from the task's settings."""
train_caption = _train_command("caption")
"""``attnkit train --task caption``."""
