"""Packed rows for the text classifiers: checked once, then read through one :class:`PackedBatch`.

A packed batch (:mod:`attnkit.data.packing`) holds ``N`` documents end to end
in ``R`` rows: ``ids (R, T)``, ``segment_ids (R, T)`` (the document index
``0 .. N-1`` of each token, negative for padding) and optionally
``positions (R, T)`` (each token's position in its document; derived from the
segment ids when omitted). :func:`packed_batch` checks them at the model's
boundary and builds, once, everything a classifier needs to keep the
documents apart:

* ``mask``: attention only within a document. Rows up to
  :data:`BLOCK_MASK_FROM` tokens get the dense boolean mask ``(R, 1, T, T)``
  (the fused kernel runs); longer rows get a :class:`~attnkit.core.masks.BlockMask`
  of :func:`~attnkit.core.masks.document_mod`, which skips the blocks between
  documents. Both give the same attention.
* :meth:`PackedBatch.unpack`: the ``(R, T, ...)`` token states gathered back to
  ``(N, L, ...)``, one document per row, for per-document pooling, recurrent
  encoders and anything else that must not see across documents.

Each document then gets the logits it gets alone (up to float rounding):
that is what ``tests/data/test_packing.py`` holds every classifier to.

Shape legend: R packed rows, T tokens per row, N documents, L longest document.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.core import masks
from attnkit.positional import check_positions

__all__ = ["PackedBatch", "packed_batch", "BLOCK_MASK_FROM"]

BLOCK_MASK_FROM = 1024
"""Rows of at least this many tokens get a block-sparse document mask instead of a dense one."""


@dataclass(frozen=True)
class PackedBatch:
    """A checked packed batch and the index tensors that keep its documents apart.

    Attributes:
        ids: ``(R, T)`` token ids.
        segment_ids: ``(R, T)`` document index per token, -1 for padding.
        positions: ``(R, T)`` position of each token in its document (0 on padding).
        lengths: ``(N,)`` tokens per document.
        real: ``(R, T)`` bool, True on document tokens.
        mask: the batch's one :class:`~attnkit.core.masks.AttentionMask`, holding
            ``(R, 1, T, T)`` bool or a BlockMask: True where a token may attend another
            (padding attends nothing, so its rows give zeros in every layer).
        gather: ``(N, L)`` index into the flattened ``R * T`` tokens of each document's tokens.
        doc_mask: the :class:`~attnkit.core.masks.AttentionMask` of :meth:`unpack`'s rows,
            allowed ``(N, 1, 1, L)`` True on their real tokens: what per-document pooling reads.

    Shape:
        as the attributes.
    """

    ids: Tensor
    segment_ids: Tensor
    positions: Tensor
    lengths: Tensor
    real: Tensor
    mask: masks.AttentionMask
    gather: Tensor
    doc_mask: masks.AttentionMask

    @property
    def num_documents(self) -> int:
        return int(self.lengths.shape[0])

    def unpack(self, x: Tensor) -> Tensor:
        """Token states of the packed rows, one document per row (zeros past each length).

        Shape:
            x ``(R, T, ...)``; returns ``(N, L, ...)``.
        """
        flat = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])  # (R*T, ...)
        out = flat[self.gather]  # (N, L, ...)
        keep = self.doc_mask.key_mask().view(*self.gather.shape, *([1] * (x.dim() - 2)))
        return out * keep.to(out.dtype) if out.is_floating_point() else out.masked_fill(~keep, 0)

    def to_token_positions(self, per_document: Tensor) -> Tensor:
        """Spread ``(N, L)`` per-document values back to the packed layout (zeros on padding).

        Shape:
            per_document ``(N, L)``; returns ``(R, T)``.
        """
        r, t = self.ids.shape
        out = per_document.new_zeros(r * t + 1)  # the last slot takes the padding
        index = self.gather.masked_fill(~self.doc_mask.key_mask(), r * t)
        out.scatter_(0, index.flatten(), per_document.flatten())
        return out[: r * t].view(r, t)


def _positions_from_segments(segment_ids: Tensor) -> Tensor:
    """Each token's index in its document: a running count that restarts where the id changes."""
    r, t = segment_ids.shape
    index = torch.arange(t, device=segment_ids.device).expand(r, t)
    start = torch.ones_like(segment_ids, dtype=torch.bool)
    start[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    first = torch.where(start, index, torch.zeros_like(index)).cummax(dim=1).values  # (R, T)
    return (index - first).masked_fill(segment_ids < 0, 0)


def _check_segments(ids: Tensor, segment_ids: object) -> Tensor:
    if not isinstance(segment_ids, Tensor):
        raise TypeError(f"segment_ids must be an integer torch.Tensor, got {type(segment_ids).__name__}")
    if segment_ids.dtype.is_floating_point or segment_ids.dtype == torch.bool:
        raise TypeError(f"segment_ids must hold integers, got dtype {segment_ids.dtype}")
    if segment_ids.shape != ids.shape:
        raise ValueError(
            f"segment_ids must have the shape of ids (R, T) = {tuple(ids.shape)}, "
            f"got {tuple(segment_ids.shape)}"
        )
    return segment_ids.to(device=ids.device, dtype=torch.long)


def _document_layout(seg: Tensor) -> tuple[Tensor, Tensor]:
    """Per document: its row and first column; checks each is contiguous in one row, ids ``0..N-1``."""
    r, t = seg.shape
    real = seg >= 0
    if not bool(real.any()):
        raise ValueError("segment_ids mark no document (every id is negative = padding)")
    docs = seg[real]
    n = int(docs.max()) + 1
    rows = torch.arange(r, device=seg.device)[:, None].expand(r, t)[real]
    cols = torch.arange(t, device=seg.device)[None, :].expand(r, t)[real]
    counts = torch.zeros(n, dtype=torch.long, device=seg.device).index_add_(0, docs, torch.ones_like(docs))
    if bool((counts == 0).any()):
        missing = torch.nonzero(counts == 0)[:3, 0].tolist()
        raise ValueError(
            f"segment_ids must number the documents 0 .. N-1 with N = {n} (the largest id + 1), "
            f"but ids {missing} do not occur"
        )
    big = r * t
    key = rows * t + cols  # flat position
    first = torch.full((n,), big, device=seg.device, dtype=torch.long).scatter_reduce(0, docs, key, "amin")
    last = torch.full((n,), -1, device=seg.device, dtype=torch.long).scatter_reduce(0, docs, key, "amax")
    split = ((last - first + 1) != counts) | ((first // t) != (last // t))
    if bool(split.any()):
        raise ValueError(
            f"each document's tokens must be one contiguous run in one row of segment_ids; "
            f"document {int(torch.nonzero(split)[0, 0])} is split"
        )
    return counts, first


def packed_batch(ids: Tensor, segment_ids: object, positions: object | None, vocab_size: int) -> PackedBatch:
    """Check a packed batch and build its document mask and unpacking index, once.

    ``ids`` must already be a checked integer ``(R, T)`` tensor.

    Shape:
        ids, segment_ids, positions ``(R, T)``; returns a :class:`PackedBatch`.
    """
    seg = _check_segments(ids, segment_ids)
    lengths, first = _document_layout(seg)
    real = seg >= 0
    derived = _positions_from_segments(seg)
    if positions is None:
        pos = derived
    else:
        pos = check_positions(positions, ids.shape[0], ids.shape[1], ids.device)
        if pos.shape != ids.shape:
            raise ValueError(f"positions must be (R, T) = {tuple(ids.shape)} like ids, got {tuple(pos.shape)}")
        if not bool(torch.equal(pos.masked_fill(~real, 0), derived)):
            raise ValueError(
                "positions must count 0, 1, ... from the start of each document (as segment_ids lay "
                "them out); omit positions to derive them"
            )
        pos = derived
    tokens = ids[real]
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"ids must lie in [0, vocab_size={vocab_size}) on document tokens, got values from "
            f"{int(tokens.min())} to {int(tokens.max())}"
        )
    width = int(lengths.max())
    offsets = torch.arange(width, device=ids.device)
    doc_real = offsets[None, :] < lengths[:, None]  # (N, L)
    gather = (first[:, None] + offsets[None, :]).masked_fill(~doc_real, 0)  # (N, L)
    t = ids.shape[1]
    if t >= BLOCK_MASK_FROM:
        pairs: Tensor | masks.BlockMask = masks.create_block_mask(
            masks.document_mod(seg), ids.shape[0], None, t, t, device=ids.device)
    else:
        pairs = ((seg[:, :, None] == seg[:, None, :]) & real[:, :, None] & real[:, None, :])[:, None]
    mask = masks.AttentionMask(pairs)  # the one mask every layer of the packed forward reads
    return PackedBatch(ids.masked_fill(~real, 0), seg, pos, lengths, real, mask, gather,
                       masks.AttentionMask(doc_real[:, None, None, :]))
