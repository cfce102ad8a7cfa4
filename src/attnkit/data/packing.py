"""Packing: several documents per row of a fixed token budget, instead of one padded row each.

A padded batch holds each document in its own row, padded to the longest
one. A *packed* batch lays documents end to end in rows of at most
``budget`` tokens (first-fit decreasing), and says who is who::

    ids          (R, T) long   the documents' tokens, end to end; [PAD] = 0 after the last one
    segment_ids  (R, T) long   the index (in the batch) of the document each token belongs to; -1 = padding
    positions    (R, T) long   each token's position inside its own document: 0, 1, ... again at every start
    lengths      (N,)   long   tokens per document
    labels       (N,)   long   one label per document, in document order (the order of the items given)

``T`` is the fullest row's fill (at most ``budget``). A model that reads a
packed batch must keep documents apart: attention only within a document
(:func:`attnkit.masks.document_mod`, or the equivalent boolean mask), positions
from ``positions``, pooling per document. The text classifiers do
(``model(ids, segment_ids=..., positions=...)``), and give each document the
logits it gets alone.

Document ``i`` of the batch is item ``i`` given to :func:`collate_packed`, so
labels and logits stay in the caller's order whatever row a document lands in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnkit.data.tokenization import PAD_ID

__all__ = ["pack_rows", "collate_packed", "PackedCollator", "packed_fraction"]


def _budget(budget: object) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"budget must be a positive int (tokens per packed row), got {budget!r}")
    return budget


def pack_rows(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group item indices into rows of at most ``budget`` tokens (first-fit decreasing).

    Longest items first, each into the first row with room; rows come out in
    the order they were opened, their items in the order they were placed.
    Deterministic: equal lengths keep their input order. An item longer than
    ``budget`` is a ``ValueError`` naming it.
    """
    budget = _budget(budget)
    for index, length in enumerate(lengths):
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"lengths[{index}] must be a positive int, got {length!r}")
        if length > budget:
            raise ValueError(
                f"item {index} has {length} tokens, more than the packing budget of {budget}; "
                f"raise the budget to at least the longest item (max_len) or truncate"
            )
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(budget - lengths[i])
    return rows


def collate_packed(batch: Sequence[dict[str, Tensor]], budget: int) -> dict[str, Tensor]:
    """Pack a list of dataset items (``{"ids": (L,), "label": ()}``) into rows of ``budget`` tokens.

    See the module docstring for the batch it returns.

    Shape:
        items' ids ``(L_i,)``; returns ``ids``, ``segment_ids``, ``positions``
        ``(R, T)`` with ``T <= budget``, ``lengths`` and ``labels`` ``(N,)``.
    """
    if not batch:
        raise ValueError("batch must hold at least one item, got an empty list")
    lengths = [len(item["ids"]) for item in batch]
    rows = pack_rows(lengths, budget)
    width = max(sum(lengths[i] for i in row) for row in rows)
    ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)  # (R, T)
    segment_ids = torch.full((len(rows), width), -1, dtype=torch.long)  # (R, T)
    positions = torch.zeros(len(rows), width, dtype=torch.long)  # (R, T)
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            n = lengths[i]
            ids[r, start : start + n] = batch[i]["ids"]
            segment_ids[r, start : start + n] = i
            positions[r, start : start + n] = torch.arange(n)
            start += n
    labels = torch.stack([item["label"] for item in batch]).long()  # (N,)
    return {"ids": ids, "segment_ids": segment_ids, "positions": positions,
            "lengths": torch.tensor(lengths, dtype=torch.long), "labels": labels}


class PackedCollator:
    """``collate_fn`` that packs each batch into rows of ``budget`` tokens (:func:`collate_packed`).

    Shape:
        as :func:`collate_packed`.
    """

    def __init__(self, budget: int) -> None:
        self.budget = _budget(budget)

    def __call__(self, batch: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        return collate_packed(batch, self.budget)

    def __repr__(self) -> str:
        return f"PackedCollator(budget={self.budget})"


def packed_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]], budget: int) -> float:
    """Share of padded positions when each batch is packed into rows of ``budget`` tokens.

    The counterpart of :func:`attnkit.data.batching.padding_fraction` for packed batches.
    """
    padded = real = 0
    for batch in batches:
        sizes = [lengths[i] for i in batch]
        rows = pack_rows(sizes, budget)
        padded += len(rows) * max(sum(sizes[i] for i in row) for row in rows)
        real += sum(sizes)
    return 0.0 if padded == 0 else 1.0 - real / padded
