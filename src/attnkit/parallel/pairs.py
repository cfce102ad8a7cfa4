"""The mask of the full sequence, read on ranges of global positions: what a block computes, what a peer needs.

Context parallelism cuts the ``(T, T)`` problem into blocks of (query range,
key range) on global positions. :class:`GlobalPairs` holds the mask as
:func:`attnkit.attention` reads it for the full sequence (a dense boolean mask,
a :class:`~attnkit.core.block_mask.BlockMask`, or none) together with
``causal``, and answers two questions, the same way in every process:

* :meth:`GlobalPairs.block` -- the allowed pairs of one block: ``None`` when
  all are allowed, ``False`` when none is (the block is skipped), else a
  boolean tensor;
* :meth:`GlobalPairs.needed_span` -- the span of a key range that some query
  of a process may attend: only that span is ever sent to it. For a BlockMask
  the answer is read off its blocks (a key block is sent when a block of the
  process's queries keeps it), so it may send a few keys more than the
  entries need, never fewer.

Shape legend: B batch, H heads, Tq/Tk query/key length (both ``T``), bs block size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnkit.core.block_mask import BlockMask
from attnkit.core.kernels.tiles import block_kinds

__all__ = ["GlobalPairs", "Allowed", "intersect"]

Allowed = Tensor | bool | None
"""A block's pairs: ``None`` all allowed, ``False`` none, or ``(Bm, Hm, tq, tk)`` bool."""

_CHUNK = 1 << 24  # mask entries reduced at once when a dense mask's needed keys are found


def intersect(a: Allowed, b: Allowed) -> Allowed:
    """The pairs both allow."""
    if a is False or b is False:
        return False
    if a is None or a is True:
        return b
    if b is None or b is True:
        return a
    assert isinstance(a, Tensor) and isinstance(b, Tensor)
    return a & b


def _decided(m: Tensor) -> Allowed:
    """``m`` itself, or ``False``/``None`` when it allows nothing/everything (one pass each)."""
    if not bool(m.any()):
        return False
    if bool(m.all()):
        return None
    return m


class GlobalPairs:
    """The full sequence's mask and ``causal``, asked block by block on global positions.

    Shape:
        dense ``(Bm, Hm, T|1, T)`` bool or a BlockMask for ``(B, H, T, T)``.
    """

    def __init__(self, mask: Tensor | BlockMask | None, causal: bool):
        self.mask = mask
        self.causal = bool(causal)
        self.kinds: Tensor | None = None
        if isinstance(mask, BlockMask):  # (Bm, Hm, nQ, nK): 0 empty, 1 full, 2 + i partial i; kept on the mask
            self.kinds = mask.cached(("parallel", "block-kinds"), lambda: block_kinds(mask))

    def description(self) -> list[object]:
        """What identifies these pairs across processes (for the agreement fingerprint)."""
        m = self.mask
        if isinstance(m, BlockMask):
            assert self.kinds is not None
            return ["block", m.shape, m.block_size, self.kinds, m.elements]
        return ["dense" if m is not None else "none", m]

    def _causal(self, qa: int, qb: int, ka: int, kb: int, device: torch.device) -> Allowed:
        if not self.causal or kb - 1 <= qa:
            return None
        if ka > qb - 1:
            return False
        return (torch.arange(ka, kb, device=device) <= torch.arange(qa, qb, device=device)[:, None])[None, None]

    def _blocks(self, qa: int, qb: int, ka: int, kb: int) -> Allowed:
        m = self.mask
        assert isinstance(m, BlockMask) and self.kinds is not None
        bs = m.block_size
        sub = self.kinds[:, :, qa // bs: (qb - 1) // bs + 1, ka // bs: (kb - 1) // bs + 1]
        if not bool(sub.any()):
            return False
        if bool((sub == 1).all()):
            return None
        qi, ki = torch.arange(qa, qb, device=m.device), torch.arange(ka, kb, device=m.device)
        kind = self.kinds[:, :, (qi // bs)[:, None], (ki // bs)[None, :]]  # (Bm, Hm, tq, tk)
        return _decided(m.elements[kind, (qi % bs)[:, None], (ki % bs)[None, :]])

    def block(self, qa: int, qb: int, ka: int, kb: int) -> Allowed:
        """The allowed pairs of queries ``[qa, qb)`` and keys ``[ka, kb)`` (global positions)."""
        m = self.mask
        device = m.device if m is not None else torch.device("cpu")
        allowed = self._causal(qa, qb, ka, kb, device)
        if allowed is False or m is None:
            return allowed
        if isinstance(m, BlockMask):
            return intersect(self._blocks(qa, qb, ka, kb), allowed)
        rows = m[:, :, qa:qb] if m.shape[2] > 1 else m
        return intersect(_decided(rows[..., ka:kb]), allowed)

    def _needed_keys(self, q_runs: Sequence[tuple[int, int]], ka: int, kb: int) -> Tensor | bool:
        """Per key of ``[ka, kb)``, whether a query of ``q_runs`` may attend it (``True``: every key)."""
        m = self.mask
        if isinstance(m, BlockMask):
            assert self.kinds is not None
            bs = m.block_size
            kblocks = self.kinds[..., ka // bs: (kb - 1) // bs + 1]
            per_block = torch.zeros(kblocks.shape[-1], dtype=torch.bool, device=m.device)
            for qa, qb in q_runs:
                per_block |= kblocks[:, :, qa // bs: (qb - 1) // bs + 1].flatten(0, 2).bool().any(0)
            return per_block[torch.arange(ka, kb, device=m.device) // bs - ka // bs]
        needed = torch.zeros(kb - ka, dtype=torch.bool)
        rows = max(1, _CHUNK // max(1, kb - ka))
        for qa, qb in q_runs:
            for r0 in range(qa, qb, rows):
                part = self.block(r0, min(qb, r0 + rows), ka, kb)
                if part is None:
                    return True
                if isinstance(part, Tensor):
                    needed |= part.flatten(0, 2).any(0).cpu()
        return needed

    def needed_span(self, q_runs: Sequence[tuple[int, int]], ka: int, kb: int) -> tuple[int, int] | None:
        """The span ``[lo, hi)`` of keys ``[ka, kb)`` that some query of ``q_runs`` may attend; ``None``: none."""
        if self.causal:  # no query of q_runs attends a key after its last query
            kb = min(kb, max(b for _, b in q_runs))
            if kb <= ka:
                return None
        needed = self._needed_keys(q_runs, ka, kb)
        if needed is True:
            return ka, kb
        assert isinstance(needed, Tensor)
        where = torch.nonzero(needed.cpu()).flatten()
        if where.numel() == 0:
            return None
        return ka + int(where[0]), ka + int(where[-1]) + 1
