"""Labels, a torch ``Dataset`` of encoded documents, padding collation and length bucketing.

A batch is a dict::

    ids     (B, T) long, padded with [PAD] = 0 to the longest document in the batch
    lengths (B,)   long, real tokens per document (>= 1)
    labels  (B,)   long, class ids from :class:`LabelVocab`

Models build their key-padding mask from ``lengths`` (position ``t`` is real
when ``t < lengths[b]``), so the pad id never has to be special inside a model.

Token ids are kept as one flat int32 array with offsets (:class:`TokenIds`), about
4 bytes a token: a Python list of ints costs 30-40, which for tens of thousands of
long documents is gigabytes. Texts are encoded a slice at a time (at most
:data:`ENCODE_CHUNK` texts and, past the first, :data:`ENCODE_CHARS`
characters), so the tokenizer's own per-token records (about a hundred bytes
a token) never exist for more than a slice.

Padding costs compute: a batch of one 10-token and one 400-token document runs
800 positions to hold 410 tokens. :func:`bucket_batches` groups documents of
similar length, which keeps the padded fraction small without giving up
shuffling.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnkit.data.readers import Example
from attnkit.data.tokenization import PAD_ID, UNK_ID, encode_batch

__all__ = ["LabelVocab", "TokenIds", "ENCODE_CHUNK", "ENCODE_CHARS", "TextClassificationDataset", "collate",
           "bucket_batches", "padding_fraction"]


class LabelVocab:
    """A fixed, ordered mapping between label strings and class ids ``0..C-1``.

    ``LabelVocab(["neg", "pos"])`` keeps the given order; :meth:`from_examples`
    sorts the labels it finds, so the same data always gives the same ids.
    """

    def __init__(self, labels: Sequence[str]) -> None:
        labels = list(labels)
        if not labels:
            raise ValueError("labels must name at least one class, got an empty list")
        if not all(isinstance(label, str) for label in labels):
            raise TypeError(f"labels must be strings, got {labels!r}")
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels must be distinct, got {labels!r}")
        self.labels: tuple[str, ...] = tuple(labels)
        self._ids = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def from_examples(cls, examples: Iterable[Example]) -> LabelVocab:
        """The sorted set of labels found in ``examples``."""
        return cls(sorted({e.label for e in examples}))

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelVocab) and other.labels == self.labels

    def __hash__(self) -> int:
        return hash(self.labels)

    def __repr__(self) -> str:
        return f"LabelVocab({list(self.labels)!r})"

    def encode(self, label: str) -> int:
        """The id of ``label``; an unknown label raises ValueError listing the known ones."""
        try:
            return self._ids[label]
        except KeyError:
            raise ValueError(f"label {label!r} is not one of {list(self.labels)}") from None

    def decode(self, index: int) -> str:
        """The label string of class id ``index``."""
        if not 0 <= int(index) < len(self.labels):
            raise ValueError(f"index must be in [0, {len(self.labels)}), got {index}")
        return self.labels[int(index)]

    def to_dict(self) -> dict[str, Any]:
        """``{"labels": [...]}``, the JSON form."""
        return {"labels": list(self.labels)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabelVocab:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, dict) or set(data) != {"labels"}:
            raise ValueError(f"expected a dict with the single key 'labels', got {data!r}")
        return cls(data["labels"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``labels.json`` atomically (temporary file, then rename)."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.to_dict(), handle, ensure_ascii=False, indent=2)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LabelVocab:
        """Read a file written by :meth:`save`."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return cls.from_dict(data)


ENCODE_CHUNK = 1024
"""Texts a :class:`TextClassificationDataset` hands to the tokenizer at once, at most."""
ENCODE_CHARS = 2**21
"""Characters of those texts, at most past the first: 1,024 documents of 3,000 words held 0.5 GB of records."""


def _slices(texts: list[str]) -> list[list[str]]:
    """``texts`` in order, in slices of at most :data:`ENCODE_CHUNK` texts and, past the first, at most
    :data:`ENCODE_CHARS` characters."""
    out: list[list[str]] = []
    chars = 0
    for text in texts:
        if not out or len(out[-1]) == ENCODE_CHUNK or chars + len(text) > ENCODE_CHARS:
            out.append([])
            chars = 0
        out[-1].append(text)
        chars += len(text)
    return out


class TokenIds(Sequence[np.ndarray]):
    """Token-id lists of many documents in one flat int32 array: item ``i`` is a read-only ``(T_i,)`` view.

    A slice gives a list of such views. ``nbytes`` is the memory held.
    """

    def __init__(self, lists: Iterable[Sequence[int]]) -> None:
        parts = [np.asarray(ids, dtype=np.int32) for ids in lists]
        self.offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=self.offsets[1:])
        self.flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
        self.flat.flags.writeable = False

    @classmethod
    def concat(cls, parts: Sequence[TokenIds]) -> TokenIds:
        """One :class:`TokenIds` holding the documents of ``parts`` in order."""
        out = cls([])
        if parts:
            sizes = np.concatenate([np.diff(p.offsets) for p in parts])
            out.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
            np.cumsum(sizes, out=out.offsets[1:])
            out.flat = np.concatenate([p.flat for p in parts])
            out.flat.flags.writeable = False
        return out

    @property
    def nbytes(self) -> int:
        return int(self.flat.nbytes + self.offsets.nbytes)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = int(index)
        if not -len(self) <= i < len(self):
            raise IndexError(f"document index {i} out of range for {len(self)} documents")
        i %= len(self)
        return self.flat[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))


class TextClassificationDataset(Dataset[dict[str, Tensor]]):
    """Documents encoded once, up front; item ``i`` is ``{"ids": (T,) long, "label": () long}``.

    Documents longer than ``max_len`` tokens are truncated; a document with no
    token becomes a single ``[UNK]`` so that every length is at least 1.
    ``ids`` holds them as :class:`TokenIds` (int32 views); ``lengths`` lists
    the token counts, for :func:`bucket_batches`.
    """

    def __init__(self, examples: Sequence[Example], tokenizer: Any, label_vocab: LabelVocab,
                 max_len: int) -> None:
        if not isinstance(label_vocab, LabelVocab):
            raise TypeError(f"label_vocab must be a LabelVocab, got {type(label_vocab).__name__}")
        self.examples = list(examples)
        self.label_vocab = label_vocab
        self.max_len = max_len
        parts = []
        for texts in _slices([e.text for e in self.examples]):
            parts.append(TokenIds(ids or [UNK_ID] for ids in encode_batch(tokenizer, texts, max_len)))
        self.ids = TokenIds.concat(parts)
        self.labels = [label_vocab.encode(e.label) for e in self.examples]
        self.lengths: list[int] = np.diff(self.ids.offsets).tolist()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {
            "ids": torch.from_numpy(self.ids[index].astype(np.int64)),
            "label": torch.tensor(self.labels[index], dtype=torch.long),
        }


def collate(batch: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Pad a list of dataset items into one batch.

    Shape:
        returns ``ids (B, T)`` padded with 0, ``lengths (B,)``, ``labels (B,)``;
        ``T`` is the longest document in the batch.
    """
    if not batch:
        raise ValueError("batch must hold at least one item, got an empty list")
    lengths = torch.tensor([len(item["ids"]) for item in batch], dtype=torch.long)
    ids = torch.full((len(batch), int(lengths.max())), PAD_ID, dtype=torch.long)  # (B, T)
    for row, item in enumerate(batch):
        ids[row, : len(item["ids"])] = item["ids"]
    labels = torch.stack([item["label"] for item in batch]).long()  # (B,)
    return {"ids": ids, "lengths": lengths, "labels": labels}


def bucket_batches(lengths: Sequence[int], batch_size: int, shuffle: bool = True, seed: int = 0,
                   *, pool_batches: int = 50) -> list[list[int]]:
    """Index batches grouping documents of similar length (usable as a ``batch_sampler``).

    With ``shuffle`` the indices are permuted with ``seed``, cut into pools of
    ``pool_batches * batch_size``, each pool is sorted by length and cut into
    batches, and the batch order is permuted: batches stay random from epoch to
    epoch (pass ``seed + epoch``) while each one holds similar lengths.
    Without ``shuffle`` all indices are sorted by length (a stable sort), for
    evaluation. Every index appears in exactly one batch.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if pool_batches <= 0:
        raise ValueError(f"pool_batches must be a positive int, got {pool_batches!r}")
    lens = np.asarray(lengths, dtype=np.int64)
    if lens.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lens.shape}")
    if not shuffle:
        order = np.argsort(lens, kind="stable")
        return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(lens))
    pool = pool_batches * batch_size
    batches: list[list[int]] = []
    for start in range(0, len(perm), pool):
        chunk = perm[start : start + pool]
        chunk = chunk[np.argsort(lens[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size].tolist() for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def padding_fraction(lengths: Sequence[int], batches: Iterable[Sequence[int]]) -> float:
    """Share of padded positions when ``batches`` are padded to their longest member."""
    lens = np.asarray(lengths, dtype=np.int64)
    padded = real = 0
    for batch in batches:
        group = lens[list(batch)]
        padded += int(group.max()) * len(group)
        real += int(group.sum())
    return 0.0 if padded == 0 else 1.0 - real / padded
