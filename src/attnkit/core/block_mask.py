"""Block masks: programmable masks that let attention skip the work they forbid.

A *mask mod* is a function ``mask_mod(b, h, q_idx, kv_idx) -> Tensor`` that
says, by attnkit's one rule, where a query MAY attend to a key (True = may
attend). It is called with integer index tensors that broadcast against each
other (``b`` over batch, ``h`` over heads, ``q_idx`` over queries, ``kv_idx``
over keys) and must return a boolean tensor of their broadcast shape (or one
that broadcasts to it). Write it element-wise, for index tensors of any rank.

:func:`create_block_mask` evaluates a mod once, tile by tile, and records for
every query block which key blocks are *empty* (skipped), *full* (computed
without an element mask) or *partial* (the element mask is kept for those
blocks only). The mods of this module (causal, windows, documents, prefix-LM
and their ``and_mods``/``or_mods``) also carry a *block rule*
(:func:`with_block_rule`) that classifies whole blocks from their corners and
per-block ranges of the ids they read; then only the blocks the rule cannot
decide are evaluated entry by entry, with the same result.
:func:`attnkit.attention` given the resulting :class:`BlockMask` computes the
non-empty blocks only. The conventions follow PyTorch's FlexAttention
(``create_block_mask``, ``mask_mod``); the rule is attnkit's.

Shape legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from attnkit import _checks
from attnkit.core.rows import rows_with_keys
from attnkit.core.types import MaskMod

__all__ = [
    "BlockMask",
    "with_causal",
    "MaskMod",
    "create_block_mask",
    "causal_mod",
    "sliding_window_mod",
    "document_mod",
    "prefix_lm_mod",
    "and_mods",
    "or_mods",
    "BlockBounds",
    "with_block_rule",
]

T = TypeVar("T")

_CHUNK_ELEMENTS = 1 << 24  # mask entries evaluated at once by create_block_mask
_NEEDS = "_attnkit_needs"  # attribute of a mod: [(what, batch or None, length)] it requires
_RULE = "_attnkit_block_rule"  # attribute of a mod: its BlockRule
_USE_RULES = True  # False: every mod evaluated entry by entry (what the rules are tested against)


class BlockBounds:
    """Where the blocks of :func:`create_block_mask` lie: what a mod's block rule reads.

    The first and last query index of each query block (``qa``, ``qz``) and of
    each key block (``ka``, ``kz``) are cut at ``Tq``/``Tk``; the positions of
    each block repeat the last one past the end.

    Shape:
        index tensors broadcast to ``(B, H, nQ, nK)``: ``b`` ``(B, 1, 1, 1)``,
        ``h`` ``(1, H, 1, 1)``, ``qa``, ``qz`` ``(1, 1, nQ, 1)``, ``ka``, ``kz``
        ``(1, 1, 1, nK)``; ``q_pos`` ``(nQ, bs)``, ``k_pos`` ``(nK, bs)``.
    """

    def __init__(self, b: Tensor, h: Tensor, q_pos: Tensor, k_pos: Tensor):
        self.b, self.h, self.q_pos, self.k_pos = b, h, q_pos, k_pos
        self.qa, self.qz = q_pos[:, 0].view(1, 1, -1, 1), q_pos[:, -1].view(1, 1, -1, 1)
        self.ka, self.kz = k_pos[:, 0].view(1, 1, 1, -1), k_pos[:, -1].view(1, 1, 1, -1)

    def shifted(self, dq: int, dk: int) -> BlockBounds:
        """The same blocks with query indices moved by ``dq`` and key indices by ``dk``."""
        return BlockBounds(self.b, self.h, self.q_pos + dq, self.k_pos + dk)

    def _range(self, table: Tensor, pos: Tensor, query: bool) -> tuple[Tensor, Tensor]:
        table = table.to(pos.device)
        if table.dim() == 1:
            vals = table[pos]  # (n, bs)
            lo, hi = vals.amin(-1), vals.amax(-1)
            shape = (1, 1, -1, 1) if query else (1, 1, 1, -1)
            return lo.view(shape), hi.view(shape)
        vals = table[:, pos]  # (Bt, n, bs)
        lo, hi = vals.amin(-1)[self.b.view(-1)], vals.amax(-1)[self.b.view(-1)]  # (B, n)
        shape = (-1, 1, lo.shape[1], 1) if query else (-1, 1, 1, lo.shape[1])
        return lo.view(shape), hi.view(shape)

    def q_range(self, table: Tensor) -> tuple[Tensor, Tensor]:
        """Least and greatest of ``table`` ``(T,)`` or ``(B, T)`` over each query block: ``(B|1, 1, nQ, 1)``."""
        return self._range(table, self.q_pos, True)

    def k_range(self, table: Tensor) -> tuple[Tensor, Tensor]:
        """Least and greatest of ``table`` ``(T,)`` or ``(B, T)`` over each key block: ``(B|1, 1, 1, nK)``."""
        return self._range(table, self.k_pos, False)


BlockRule = Callable[[BlockBounds], "tuple[Tensor | bool, Tensor | bool]"]
"""``rule(bounds) -> (empty, full)``, each broadcast to ``(B, H, nQ, nK)``: True only where *every* entry
of the block is refused (``empty``) or allowed (``full``); False where it cannot tell."""


def with_block_rule(mask_mod: MaskMod, rule: BlockRule | None) -> MaskMod:
    """``mask_mod`` with a block rule that :func:`create_block_mask` asks before evaluating entries.

    The rule must be sound: a block it calls empty or full holds no entry where
    the mod says otherwise (blocks it leaves undecided are evaluated). ``None``
    returns ``mask_mod`` itself. The returned mod computes what ``mask_mod`` does.
    """
    if rule is None:
        return mask_mod

    def ruled(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return mask_mod(b, h, q_idx, kv_idx)

    setattr(ruled, _NEEDS, getattr(mask_mod, _NEEDS, []))
    setattr(ruled, _RULE, rule)
    return ruled


def block_rule(mask_mod: object) -> BlockRule | None:
    """The block rule a mod carries (:func:`with_block_rule`), or ``None``."""
    rule: BlockRule | None = getattr(mask_mod, _RULE, None)
    return rule


def _causal_rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
    return x.ka > x.qz, x.kz <= x.qa


def _window_rule(window: int) -> BlockRule:
    def rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
        return (x.ka - x.qz > window) | (x.qa - x.kz > window), torch.maximum(x.kz - x.qa, x.qz - x.ka) <= window

    return rule


def same_id_rule(ids: Tensor, non_negative: bool) -> BlockRule:
    """The block rule of ``ids[q] == ids[kv]`` (and both ``>= 0`` when ``non_negative``).

    Shape:
        ids ``(T,)`` or ``(B, T)`` integers.
    """
    def rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
        (qlo, qhi), (klo, khi) = x.q_range(ids), x.k_range(ids)
        empty = (qhi < klo) | (khi < qlo)
        full = (qlo == qhi) & (klo == khi) & (qlo == klo)
        if non_negative:
            empty, full = empty | (qhi < 0) | (khi < 0), full & (qlo >= 0)
        return empty, full

    return rule


def causal_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Causal mask mod: query ``i`` may attend key ``j`` when ``j <= i`` (top-left aligned).

    Shape:
        index tensors broadcast together; returns their broadcast shape, bool.
    """
    return kv_idx <= q_idx


setattr(causal_mod, _RULE, _causal_rule)


def sliding_window_mod(window: int) -> MaskMod:
    """Local band: query ``i`` may attend key ``j`` when ``|j - i| <= window``.

    Symmetric like :func:`attnkit.masks.sliding_window`; the causal sliding
    window of Longformer/Mistral is ``and_mods(causal_mod, sliding_window_mod(w))``.

    Shape:
        the returned mod maps broadcast index tensors to their broadcast shape, bool.
    """
    window = _checks.non_negative_int("window", window)

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx - q_idx).abs() <= window

    setattr(mod, _RULE, _window_rule(window))
    return mod


def _ids_tensor(segment_ids: object) -> Tensor:
    if not isinstance(segment_ids, Tensor):
        segment_ids = torch.as_tensor(segment_ids)
    assert isinstance(segment_ids, Tensor)
    if segment_ids.dtype == torch.bool or segment_ids.dtype.is_floating_point:
        raise TypeError(f"segment_ids must hold integers, got dtype {segment_ids.dtype}")
    if segment_ids.dim() not in (1, 2) or segment_ids.shape[-1] == 0:
        raise ValueError(
            f"segment_ids must be (T,) or (B, T) with T > 0, got shape {tuple(segment_ids.shape)}"
        )
    return segment_ids.long()


def document_mod(segment_ids: Tensor) -> MaskMod:
    """Packed documents: a query may attend a key of the same document; a negative id is padding.

    Queries and keys are positions of the same packed sequence (self-attention,
    ``Tq == Tk == T``). Per-example ids ``(B, T)`` need ``B`` given to
    :func:`create_block_mask`. Combine with :func:`causal_mod` for causal
    packing.

    Shape:
        segment_ids ``(T,)`` or ``(B, T)`` ints; the returned mod maps broadcast
        index tensors to their broadcast shape, bool.
    """
    ids = _ids_tensor(segment_ids)

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        table = ids.to(q_idx.device)
        if table.dim() == 1:
            qi, ki = table[q_idx], table[kv_idx]
        else:
            qi, ki = table[b, q_idx], table[b, kv_idx]
        return (qi == ki) & (qi >= 0) & (ki >= 0)

    batch = ids.shape[0] if ids.dim() == 2 else None
    setattr(mod, _NEEDS, [("document_mod segment_ids", batch, ids.shape[-1])])
    setattr(mod, _RULE, same_id_rule(ids, non_negative=True))
    return mod


def prefix_lm_mod(prefix_len: int | Tensor) -> MaskMod:
    """Prefix LM: every query may attend the first ``prefix_len`` keys, and causally after them.

    ``prefix_len`` is one int, or a ``(B,)`` tensor of one length per example.

    Shape:
        prefix_len an int or ``(B,)``; the returned mod maps broadcast index
        tensors to their broadcast shape, bool.
    """
    if isinstance(prefix_len, Tensor):
        if prefix_len.dim() != 1 or prefix_len.dtype.is_floating_point or prefix_len.dtype == torch.bool:
            raise TypeError(
                f"prefix_len must be an int or a (B,) integer tensor, got {prefix_len.dtype} "
                f"of shape {tuple(prefix_len.shape)}"
            )
        lengths = prefix_len.long()

        def per_example(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return (kv_idx < lengths.to(b.device)[b]) | (kv_idx <= q_idx)

        def per_example_rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
            n = lengths.to(x.b.device)[x.b]
            return (x.ka >= n) & (x.ka > x.qz), (x.kz < n) | (x.kz <= x.qa)

        setattr(per_example, _NEEDS, [("prefix_lm_mod prefix_len", lengths.shape[0], None)])
        setattr(per_example, _RULE, per_example_rule)
        return per_example
    n = _checks.non_negative_int("prefix_len", prefix_len)

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx < n) | (kv_idx <= q_idx)

    def rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
        return (x.ka >= n) & (x.ka > x.qz), (x.kz < n) | (x.kz <= x.qa)

    setattr(mod, _RULE, rule)
    return mod


def _combine_mods(mods: tuple[MaskMod, ...], name: str, both: bool) -> MaskMod:
    if not mods:
        raise ValueError(f"{name}() needs at least one mask mod")
    for index, m in enumerate(mods):
        if not callable(m):
            raise TypeError(f"{name}(): argument {index} must be a mask mod, got {type(m).__name__}")

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        result = mods[0](b, h, q_idx, kv_idx)
        for m in mods[1:]:
            result = (result & m(b, h, q_idx, kv_idx)) if both else (result | m(b, h, q_idx, kv_idx))
        return result

    setattr(mod, _NEEDS, [need for m in mods for need in getattr(m, _NEEDS, [])])
    rules = [block_rule(m) for m in mods]
    if any(r is not None for r in rules):
        setattr(mod, _RULE, combine_rules(rules, both))
    return mod


def combine_rules(rules: list[BlockRule | None], both: bool) -> BlockRule:
    """The rule of ``and`` (``both``) or ``or`` of mods with these rules; ``None`` decides nothing."""
    def rule(x: BlockBounds) -> tuple[Tensor | bool, Tensor | bool]:
        empty: Tensor | bool = not both  # and: any part empty; or: every part empty
        full: Tensor | bool = both  # and: every part full; or: any part full
        for r in rules:
            e, f = r(x) if r is not None else (False, False)
            empty, full = (empty | e, full & f) if both else (empty & e, full | f)
        return empty, full

    return rule


def and_mods(*mods: MaskMod) -> MaskMod:
    """A mask mod that allows an entry only where every given mod allows it.

    Shape:
        the returned mod maps broadcast index tensors to their broadcast shape, bool.
    """
    return _combine_mods(mods, "and_mods", both=True)


def or_mods(*mods: MaskMod) -> MaskMod:
    """A mask mod that allows an entry where any given mod allows it.

    Shape:
        the returned mod maps broadcast index tensors to their broadcast shape, bool.
    """
    return _combine_mods(mods, "or_mods", both=False)


def _check_needs(mask_mod: object, b: int | None, tq: int, tk: int) -> None:
    for what, batch, length in getattr(mask_mod, _NEEDS, []):
        if length is not None and not tq == tk == length:
            raise ValueError(
                f"{what} have length T={length}, but the block mask is for Tq={tq}, Tk={tk}"
            )
        if batch is not None and b != batch:
            raise ValueError(
                f"{what} hold one row per example (B={batch}); pass B={batch} to create_block_mask, "
                f"got B={b}"
            )


def eval_mod(mask_mod: MaskMod, idx: tuple[Tensor, Tensor, Tensor, Tensor], shape: tuple[int, ...]
             ) -> Tensor:
    """Call a mask mod on broadcast index tensors and check that it returned a bool mask of ``shape``."""
    try:
        out = mask_mod(*idx)
    except IndexError as e:  # every index is in range, so a tensor the mod reads is too short
        raise ValueError(f"mask_mod indexed past the end of a tensor ({e}); what it reads must cover "
                         "b < B, h < H, q_idx < Tq and kv_idx < Tk of create_block_mask") from e
    if not isinstance(out, Tensor):
        raise TypeError(f"mask_mod must return a bool torch.Tensor, got {type(out).__name__}")
    if out.dtype != torch.bool:
        raise TypeError(
            f"mask_mod must return a bool tensor (True = may attend), got dtype {out.dtype}; "
            "compare, e.g. return kv_idx <= q_idx"
        )
    trailing = zip(out.shape[::-1], shape[::-1], strict=False)  # dims aligned from the right
    if out.dim() > len(shape) or any(s not in (1, n) for s, n in trailing):
        raise ValueError(
            f"mask_mod returned shape {tuple(out.shape)}, which does not broadcast to the "
            f"index shape {shape}; use element-wise operations on b, h, q_idx, kv_idx"
        )
    return out.expand(shape)


class BlockMask:
    """A mask stored as blocks: per query block, the non-empty key blocks and their kind.

    Built by :func:`create_block_mask`; pass it as ``mask=`` to
    :func:`attnkit.attention`. ``B`` or ``H`` is ``None`` where the mask
    broadcasts over that axis.

    Attributes:
        kv_indices: ``(Bm, Hm, nQ, K)`` long, the key blocks each query block
            computes (``Bm = B or 1``, ``Hm = H or 1``, ``K`` the most of any
            query block; the rest is padding).
        elem_index: ``(Bm, Hm, nQ, K)`` long into ``elements``: 0 for padding
            (nothing allowed), 1 for a full block, ``2 + i`` for partial block ``i``.
        elements: ``(2 + P, bs, bs)`` bool: an empty block, a full block, then
            the element masks of the ``P`` partial blocks.

    Shape:
        used with q ``(B, H, Tq, Dh)`` and k ``(B, Hkv, Tk, Dh)``;
        :meth:`to_dense` returns ``(Bm, Hm, Tq, Tk)`` bool.
    """

    def __init__(self, *, shape: tuple[int | None, int | None, int, int], block_size: int,
                 kv_indices: Tensor, elem_index: Tensor, elements: Tensor, counts: dict[str, int],
                 flags: tuple[bool, bool] | None = None):
        self.shape = shape
        self.block_size = block_size
        self.kv_indices = kv_indices
        self.elem_index = elem_index
        self.elements = elements
        self.counts = counts
        self._kept: tuple[Tensor | None, Tensor | None] | None = None
        self._derived: dict[tuple[Any, ...], Any] = {}  # what attention derives from it, by key
        # (all blocks full, all query rows keep a key), eagerly: attention may not branch on data
        self._flags = flags if flags is not None else (
            bool((elem_index == 1).all()), bool(self._query_rows().all()))

    @property
    def device(self) -> torch.device:
        return self.kv_indices.device

    @property
    def ndim(self) -> int:
        """4: the mask is for ``(B, H, Tq, Tk)`` (what code written for 4-D mask tensors reads)."""
        return len(self.shape)

    def contiguous(self) -> BlockMask:
        """The mask itself: its blocks are stored contiguously (code written for mask tensors calls this)."""
        return self

    def sparsity(self) -> float:
        """The fraction of (query block, key block) pairs skipped, over every (b, h) stored."""
        total = sum(self.counts.values())
        return self.counts["empty"] / total if total else 0.0

    def __repr__(self) -> str:
        b, h, tq, tk = self.shape
        c = self.counts
        return (
            f"BlockMask(B={b}, H={h}, Tq={tq}, Tk={tk}, block_size={self.block_size}, "
            f"full={c['full']}, partial={c['partial']}, empty={c['empty']} "
            f"({100 * self.sparsity():.1f}% skipped), device={self.device})"
        )

    def kept_mask(self) -> tuple[Tensor | None, Tensor | None]:
        """What the block-sparse path fills with ``-inf``, and the rows that keep a key (cached).

        The first is True at entries of the computed blocks a query may not
        attend, except in rows with no key at all (left open, then zeroed);
        it is ``None`` when every computed block is full. The second is
        ``None`` when every row keeps a key.

        Shape:
            returns ``(Bm, Hm, nQ, bs, K * bs)`` bool and ``(Bm, Hm, nQ, bs, 1)`` bool.
        """
        if self._kept is not None:
            return self._kept
        kept: tuple[Tensor | None, Tensor | None] = (None, None)
        if not self._flags[0]:
            (bm, hm, nq, k), bs = self.elem_index.shape, self.block_size
            elems = self.elements[self.elem_index]  # (Bm, Hm, nQ, K, bs, bs)
            allowed = elems.transpose(3, 4).reshape(bm, hm, nq, bs, k * bs)
            row_ok = rows_with_keys(allowed)  # (Bm, Hm, nQ, bs, 1)
            kept = (~allowed & row_ok, None if self._flags[1] else row_ok)
        if not torch.compiler.is_compiling():  # a compiled graph keeps no state on its inputs
            self._kept = kept
        return kept

    def cached(self, key: tuple[Any, ...], make: Callable[[], T], *,
               keep: Callable[[T], bool] | None = None) -> T:
        """``make()``, computed once per ``key`` and kept on this mask: data attention derives from it.

        The kernels keep their plans and additive masks here, so a mask built
        once serves every call. ``keep(result)`` False (too large to hold)
        computes without keeping; so does a compiled graph, which keeps no
        state on its inputs.
        """
        if key in self._derived:
            value: T = self._derived[key]
            return value
        value = make()
        if not torch.compiler.is_compiling() and (keep is None or keep(value)):
            self._derived[key] = value
        return value

    def _query_rows(self) -> Tensor:
        """:func:`~attnkit.core.rows.rows_with_keys` read off the blocks: ``(Bm, Hm, Tq, 1)``."""
        (bm, hm, nq, _), bs = self.elem_index.shape, self.block_size
        per_block = rows_with_keys(self.elements)[self.elem_index]  # (Bm, Hm, nQ, K, bs, 1)
        rows = rows_with_keys(per_block[..., 0].transpose(3, 4))  # (Bm, Hm, nQ, bs, 1)
        return rows.reshape(bm, hm, nq * bs, 1)[:, :, : self.shape[2]]

    def rows_with_keys(self) -> Tensor | None:
        """True for each query row that may attend at least one key; ``None`` when every row may.

        Computed once and kept on the mask (:meth:`cached`).

        Shape:
            returns ``(Bm, Hm, Tq, 1)`` bool.
        """
        if self._flags[1]:
            return None
        return self.cached(("rows-with-keys",), self._query_rows)

    def to_dense(self) -> Tensor:
        """The dense boolean mask, True where a query may attend a key.

        Shape:
            returns ``(Bm, Hm, Tq, Tk)`` bool, ``Bm = B or 1``, ``Hm = H or 1``.
        """
        bm, hm, nq, k = self.elem_index.shape
        bs = self.block_size
        nk = -(-self.shape[3] // bs)
        dense = torch.zeros(bm, hm, nq, nk, bs, bs, dtype=torch.uint8, device=self.device)
        elems = self.elements[self.elem_index].to(torch.uint8)  # (Bm, Hm, nQ, K, bs, bs)
        index = self.kv_indices[..., None, None].expand(-1, -1, -1, -1, bs, bs)
        dense.scatter_reduce_(3, index, elems, reduce="amax")  # padding adds nothing
        dense = dense.bool().transpose(3, 4).reshape(bm, hm, nq * bs, nk * bs)
        return dense[:, :, : self.shape[2], : self.shape[3]]

    def to(self, device: torch.device | str) -> BlockMask:
        """A copy on ``device``."""
        return BlockMask(shape=self.shape, block_size=self.block_size,
                         kv_indices=self.kv_indices.to(device), elem_index=self.elem_index.to(device),
                         elements=self.elements.to(device), counts=dict(self.counts), flags=self._flags)

    def check(self, b: int, h: int, tq: int, tk: int, device: torch.device) -> None:
        """Raise ``ValueError`` unless this mask fits attention over ``(B, H, Tq, Tk)`` on ``device``."""
        mb, mh, mq, mk = self.shape
        if (mq, mk) != (tq, tk) or (mb is not None and mb != b) or (mh is not None and mh != h):
            raise ValueError(
                f"BlockMask built for (B, H, Tq, Tk) = {self.shape} cannot be used with "
                f"(B, H, Tq, Tk) = {(b, h, tq, tk)}; build it with create_block_mask(mod, "
                f"{b}, {h}, {tq}, {tk}) (B or H None to broadcast)"
            )
        if self.device != device:
            raise ValueError(
                f"BlockMask is on {self.device} but q is on {device}; move it with mask.to({str(device)!r})"
            )


def block_kinds(bm: BlockMask) -> Tensor:
    """Every (query block, key block) pair's kind: 0 empty, 1 full, ``2 + i`` partial block ``i``.

    Shape:
        returns ``(Bm, Hm, nQ, nK)`` long.
    """
    bmb, hm, nq, _ = bm.kv_indices.shape
    nk = -(-bm.shape[3] // bm.block_size)
    kinds = torch.zeros(bmb, hm, nq, nk, dtype=torch.long, device=bm.device)
    return kinds.scatter_reduce(3, bm.kv_indices, bm.elem_index, reduce="amax")  # padding adds 0


def with_causal(mask: BlockMask) -> BlockMask:
    """The pairs of ``mask`` that causal attention also allows: what ``mask`` with ``causal=True`` means.

    Causality is aligned bottom-right, as :func:`attnkit.attention`'s ``causal``
    (key ``j`` for query ``i`` when ``j <= i + Tk - Tq``). Built on the mask's
    own blocks (empty stays empty, only blocks that cross the diagonal are read
    entry by entry) and kept on it (:meth:`BlockMask.cached`).

    Shape:
        returns a BlockMask of the same shape and block size.
    """
    def make() -> BlockMask:
        kinds, bs = block_kinds(mask), mask.block_size  # (Bm, Hm, nQ, nK)
        b, h, tq, tk = mask.shape
        shift = tk - tq

        def mod(b_: Tensor, h_: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            kind = kinds[b_, h_, q_idx // bs, kv_idx // bs]
            return mask.elements[kind, q_idx % bs, kv_idx % bs] & (kv_idx <= q_idx + shift)

        def rule(x: BlockBounds) -> tuple[Tensor, Tensor]:
            kind = kinds[x.b, x.h, x.qa // bs, x.ka // bs]
            return (kind == 0) | (x.ka > x.qz + shift), (kind == 1) & (x.kz <= x.qa + shift)

        return create_block_mask(with_block_rule(mod, rule), b, h, tq, tk, block_size=bs, device=mask.device)

    return mask.cached(("block_mask", "causal"), make)


def _chunk_rows(b: int, h: int, nk: int, bs: int) -> int:
    """Query rows evaluated at once: the chunks of the entry-by-entry evaluation (a multiple of ``bs``)."""
    return max(1, _CHUNK_ELEMENTS // max(1, b * h * nk * bs * bs)) * bs


def _block_kinds(mask_mod: MaskMod, b: int, h: int, tq: int, tk: int, bs: int, device: Any
                 ) -> tuple[Tensor, list[Tensor]]:
    """Evaluate the mod tile by tile: per block 0 empty, 1 full, 2 + i partial ``i``."""
    nq, nk = -(-tq // bs), -(-tk // bs)
    kv_all = torch.arange(nk * bs, device=device)
    kv = kv_all.clamp(max=tk - 1).view(1, 1, 1, -1)
    kv_ok = (kv_all < tk).view(1, 1, 1, -1)
    b_idx = torch.arange(b, device=device).view(b, 1, 1, 1)
    h_idx = torch.arange(h, device=device).view(1, h, 1, 1)
    rows = _chunk_rows(b, h, nk, bs)
    kinds = torch.empty(b, h, nq, nk, dtype=torch.long, device=device)
    partials: list[Tensor] = []
    for r0 in range(0, nq * bs, rows):
        q_all = torch.arange(r0, min(r0 + rows, nq * bs), device=device)
        q = q_all.clamp(max=tq - 1).view(1, 1, -1, 1)
        shape = (b, h, q.shape[2], nk * bs)
        m = eval_mod(mask_mod, (b_idx, h_idx, q, kv), shape) & kv_ok & (q_all < tq).view(1, 1, -1, 1)
        blocks = m.reshape(b, h, -1, bs, nk, bs).transpose(3, 4)  # (B, H, rq, nK, bs, bs)
        chunk = _numbered(blocks, partials)
        kinds[:, :, r0 // bs: r0 // bs + chunk.shape[2]] = chunk
    return kinds, partials


def _numbered(blocks: Tensor, partials: list[Tensor]) -> Tensor:
    """The kind of each ``(bs, bs)`` block of ``blocks`` (its last two dimensions): 0 empty, 1 full, 2 + i
    partial ``i``, numbered after the ``partials`` found so far, to which this call's partial blocks are added."""
    any_, all_ = blocks.any(dim=(-2, -1)), blocks.all(dim=(-2, -1))
    part = any_ & ~all_
    kind = all_.long()
    n_partial = sum(int(t.shape[0]) for t in partials)
    kind[part] = torch.arange(2 + n_partial, 2 + n_partial + int(part.sum()), device=blocks.device)
    partials.append(blocks[part])
    return kind


def _ruled_block_kinds(mask_mod: MaskMod, rule: BlockRule, b: int, h: int, tq: int, tk: int, bs: int,
                       device: Any) -> tuple[Tensor, list[Tensor]]:
    """:func:`_block_kinds` where the rule decides blocks; only the undecided ones are evaluated.

    The partial blocks are numbered in the order :func:`_block_kinds` finds them
    (by its query-row chunks, then batch, head, query block, key block), so both
    build the same BlockMask.
    """
    nq, nk = -(-tq // bs), -(-tk // bs)
    ar = torch.arange(bs, device=device)
    q_pos = (torch.arange(nq, device=device)[:, None] * bs + ar).clamp(max=tq - 1)  # (nQ, bs)
    k_pos = (torch.arange(nk, device=device)[:, None] * bs + ar).clamp(max=tk - 1)  # (nK, bs)
    bounds = BlockBounds(torch.arange(b, device=device).view(b, 1, 1, 1),
                         torch.arange(h, device=device).view(1, h, 1, 1), q_pos, k_pos)
    try:
        empty, full = rule(bounds)
    except IndexError:  # a table shorter than the indices: the entry-by-entry evaluation says so
        return _block_kinds(mask_mod, b, h, tq, tk, bs, device)
    shape = (b, h, nq, nk)
    whole = ((torch.arange(nq, device=device) + 1) * bs <= tq).view(-1, 1) & \
        ((torch.arange(nk, device=device) + 1) * bs <= tk)  # blocks not cut at Tq or Tk
    empty_t = torch.as_tensor(empty, device=device).expand(shape)
    full_t = torch.as_tensor(full, device=device).expand(shape) & whole & ~empty_t
    kinds = full_t.long()
    undecided = ~(empty_t | full_t)
    partials: list[Tensor] = []
    per_call = max(1, _CHUNK_ELEMENTS // (bs * bs))
    rows = _chunk_rows(b, h, nk, bs) // bs
    found = torch.nonzero(undecided)  # (N, 4) in (b, h, q block, k block) order
    if found.shape[0] == 0:  # nothing to evaluate: call the mod once on one block, for its errors
        found_check = torch.zeros(1, 4, dtype=torch.long, device=device)
        _eval_blocks(mask_mod, found_check, q_pos, k_pos, tq, tk)
    chunk_of = found[:, 2] // rows
    order = torch.sort(chunk_of, stable=True).indices  # the query-row chunks of _block_kinds first
    found = found[order]
    for s0 in range(0, found.shape[0], per_call):
        where = found[s0: s0 + per_call]
        blocks = _eval_blocks(mask_mod, where, q_pos, k_pos, tq, tk)  # (n, bs, bs)
        kinds[where[:, 0], where[:, 1], where[:, 2], where[:, 3]] = _numbered(blocks, partials)
    return kinds, partials


def _eval_blocks(mask_mod: MaskMod, where: Tensor, q_pos: Tensor, k_pos: Tensor, tq: int, tk: int) -> Tensor:
    """The mod's entries of the blocks ``where`` ``(n, 4)`` (b, h, q block, k block), cut at Tq, Tk.

    Shape:
        returns ``(n, bs, bs)`` bool, False past ``Tq`` or ``Tk``.
    """
    n, bs = where.shape[0], q_pos.shape[1]
    device = where.device
    ar = torch.arange(bs, device=device)
    q = q_pos[where[:, 2]].view(n, 1, bs, 1)
    kv = k_pos[where[:, 3]].view(n, 1, 1, bs)
    q_ok = (where[:, 2, None] * bs + ar < tq).view(n, 1, bs, 1)
    kv_ok = (where[:, 3, None] * bs + ar < tk).view(n, 1, 1, bs)
    idx = (where[:, 0].view(n, 1, 1, 1), where[:, 1].view(n, 1, 1, 1), q, kv)
    return (eval_mod(mask_mod, idx, (n, 1, bs, bs)) & q_ok & kv_ok)[:, 0]


def create_block_mask(
    mask_mod: MaskMod, B: int | None, H: int | None, Tq: int, Tk: int, *, block_size: int = 128,
    device: torch.device | str | None = None,
) -> BlockMask:
    """Evaluate ``mask_mod`` and store it as blocks that attention may skip.

    ``mask_mod(b, h, q_idx, kv_idx)`` returns a bool tensor, True where query
    ``q_idx`` of head ``h`` of example ``b`` may attend key ``kv_idx``; it is
    called on broadcast index tensors, a few thousand query rows at a time.
    ``B`` or ``H`` ``None`` means the mask does not depend on that axis and
    broadcasts over it. A mod with a block rule (:func:`with_block_rule`; the
    mods of this module carry one) is evaluated only on the blocks its rule
    leaves undecided, in batches of blocks (index tensors of shape
    ``(n, 1, bs, 1)`` and ``(n, 1, 1, bs)``).

    Shape:
        returns a :class:`BlockMask` for attention over ``(B, H, Tq, Tk)``.
    """
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be callable, got {type(mask_mod).__name__}")
    b = 1 if B is None else _checks.positive_int("B", B)
    h = 1 if H is None else _checks.positive_int("H", H)
    tq, tk = _checks.positive_int("Tq", Tq), _checks.positive_int("Tk", Tk)
    bs = _checks.positive_int("block_size", block_size)
    _check_needs(mask_mod, B, tq, tk)
    device = torch.device(device) if device is not None else torch.device("cpu")
    rule = block_rule(mask_mod)
    kinds, partials = (_block_kinds(mask_mod, b, h, tq, tk, bs, device) if rule is None or not _USE_RULES
                       else _ruled_block_kinds(mask_mod, rule, b, h, tq, tk, bs, device))  # (B, H, nQ, nK)
    nonempty = kinds > 0
    counts_per_row = nonempty.sum(dim=-1)  # (B, H, nQ)
    k = max(1, int(counts_per_row.max()))
    # Stable sort puts the non-empty key blocks first, in ascending order.
    order = torch.sort((~nonempty).to(torch.uint8), dim=-1, stable=True).indices[..., :k]
    valid = torch.arange(k, device=device) < counts_per_row.unsqueeze(-1)
    kv_indices = torch.where(valid, order, torch.zeros_like(order))
    elem_index = torch.where(valid, kinds.gather(-1, order), torch.zeros_like(order))
    elements = torch.cat([torch.zeros(1, bs, bs, dtype=torch.bool, device=device),
                          torch.ones(1, bs, bs, dtype=torch.bool, device=device), *partials])
    n_partial = elements.shape[0] - 2
    n_full = int((kinds == 1).sum())
    counts = {"full": n_full, "partial": n_partial, "empty": kinds.numel() - n_full - n_partial}
    return BlockMask(shape=(B, H, tq, tk), block_size=bs, kv_indices=kv_indices.contiguous(),
                     elem_index=elem_index.contiguous(), elements=elements, counts=counts)
