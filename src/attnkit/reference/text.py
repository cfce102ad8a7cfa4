"""A whitespace tokenizer and a vocabulary built on training text (NumPy only).

Ids: 0 is padding, 1 is the unknown token; the rest are the training words
seen at least ``min_frequency`` times, most frequent first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["Vocabulary", "pad_batch"]

PAD, UNK = "<pad>", "<unk>"


class Vocabulary:
    """Word <-> id mapping from whitespace-split training text."""

    def __init__(self, words: Sequence[str]) -> None:
        self.itos = [PAD, UNK, *[w for w in words if w not in (PAD, UNK)]]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def build(cls, texts: Iterable[str], min_frequency: int = 1, max_size: int | None = None) -> Vocabulary:
        counts = Counter(w for t in texts for w in t.split())
        words = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_frequency]
        return cls(words[:max_size] if max_size is not None else words)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        ids = [self.stoi.get(w, 1) for w in text.split()]
        return ids[:max_len] if max_len is not None else ids


def pad_batch(sequences: Sequence[Sequence[int]], max_len: int | None = None) -> np.ndarray:
    """Right-pad id lists with 0 to the longest (at least one column).

    Shape:
        returns ``(B, T)`` int64.
    """
    t = max([len(s) for s in sequences] + [1])
    t = t if max_len is None else min(t, max_len)
    out = np.zeros((len(sequences), t), dtype=np.int64)
    for i, s in enumerate(sequences):
        s = s[:t]
        out[i, : len(s)] = s
    return out
