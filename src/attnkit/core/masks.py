"""Attention masks: the one place where masks are built, checked and converted.

The rule, everywhere in attnkit: a **boolean mask is True where a query MAY
attend to a key**. It means pairs of ``(B, H, Tq, Tk)``. A float tensor is
an additive bias and is passed as ``bias=``, never as ``mask=``.

PyTorch itself uses two opposite conventions (``nn.MultiheadAttention`` reads
True as *ignore*, ``F.scaled_dot_product_attention`` reads True as *attend*).
Masks in the True-means-ignore convention enter attnkit only through the
converters whose names say so: :func:`from_key_padding_mask` and
:func:`from_torch_attn_mask`; Hugging Face's 1/0 ``attention_mask`` enters
through :func:`from_hf_attention_mask`.

Programmable masks that attention can skip block by block
(:func:`create_block_mask` and the ready mask mods) live in
:mod:`attnkit.core.block_mask` and are re-exported here.

Every reader of a user's mask -- :func:`attnkit.attention`, every layer,
pooling and kernel -- goes through :func:`read_mask` (wrapped by
:func:`as_attention_mask`): a 2-D mask is a ``(B, Tk)`` key-padding mask or
``(Tq, Tk)`` pairs by its sizes, refused as ambiguous where ``B == Tq``, so one
mask means the same pairs in every layer.

A model builds **one** :class:`AttentionMask` at its entry -- from lengths
(:meth:`AttentionMask.from_lengths`), padding, segment ids or a BlockMask --
and hands that object to every layer, pooling and kernel below it. It carries
the allowed pairs and, computed once by the one rule
(:func:`~attnkit.core.rows.rows_with_keys`), which query rows have any
key at all: those that have none give zeros in every layer.

Shape legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from attnkit.core.block_mask import (
    BlockMask,
    and_mods,
    causal_mod,
    create_block_mask,
    document_mod,
    or_mods,
    prefix_lm_mod,
    sliding_window_mod,
    with_causal,
)
from attnkit.core.rows import rows_with_keys
from attnkit.core.types import MaskMod

__all__ = [
    "AttentionMask",
    "causal",
    "from_lengths",
    "restart_documents",
    "sliding_window",
    "combine",
    "to_additive",
    "from_key_padding_mask",
    "from_torch_attn_mask",
    "from_hf_attention_mask",
    "check_mask",
    "check_bias",
    "rows_with_keys",
    "query_has_key",
    "as_attention_mask",
    "read_mask",
    "allowed_pairs",
    "four_axes",
    "MaskLike",
    # programmable block masks (attnkit.core.block_mask)
    "create_block_mask",
    "BlockMask",
    "MaskMod",
    "causal_mod",
    "sliding_window_mod",
    "document_mod",
    "prefix_lm_mod",
    "and_mods",
    "or_mods",
    "with_causal",
]

Align = Literal["bottom_right", "top_left"]


def _grid(tq: int, tk: int, align: str, device: torch.device | str | None) -> tuple[Tensor, Tensor]:
    """Each query's place on the key axis, ``i + offset`` ``(Tq, 1)`` (``align``, see :func:`causal`), and
    each key's, ``j`` ``(1, Tk)``."""
    _check_length("tq", tq)
    _check_length("tk", tk)
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align must be 'bottom_right' or 'top_left', got {align!r}")
    offset = tk - tq if align == "bottom_right" else 0
    return torch.arange(tq, device=device).unsqueeze(1) + offset, torch.arange(tk, device=device).unsqueeze(0)


def _check_length(name: str, value: int) -> None:
    # torch.SymInt: a length that torch.export keeps symbolic (a dynamic dimension)
    if not isinstance(value, (int, torch.SymInt)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")


def causal(
    tq: int, tk: int, *, align: Align = "bottom_right", device: torch.device | str | None = None
) -> Tensor:
    """Causal mask: query ``i`` may attend key ``j`` when ``j <= i + offset``.

    ``align="bottom_right"`` (the default, and what ``attention(causal=True)``
    uses) puts the last query on the last key, ``offset = Tk - Tq``: the
    queries are the newest ``Tq`` positions of a ``Tk``-long sequence, as in
    incremental decoding with a KV cache. ``align="top_left"`` puts the first
    query on the first key (``offset = 0``), PyTorch's ``is_causal`` convention.
    When ``Tq > Tk`` with bottom-right alignment the first ``Tq - Tk`` queries
    have no key at all; attention returns zeros for them.

    Shape:
        returns ``(Tq, Tk)`` bool.
    """
    i, j = _grid(tq, tk, align, device)
    return j <= i


def sliding_window(
    tq: int,
    tk: int,
    window: int,
    *,
    align: Align = "bottom_right",
    device: torch.device | str | None = None,
) -> Tensor:
    """Local (banded) mask: query ``i`` may attend key ``j`` when ``|j - (i + offset)| <= window``.

    The band is symmetric; combine it with :func:`causal` for the causal
    sliding window of Longformer/Mistral (each query sees itself and the
    ``window`` keys before it). ``offset`` follows ``align`` as in :func:`causal`.

    Shape:
        returns ``(Tq, Tk)`` bool.
    """
    i, j = _grid(tq, tk, align, device)
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"window must be a non-negative int, got {window!r}")
    return (j - i).abs() <= window


def from_lengths(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """Key-padding mask from sequence lengths: key ``j`` of example ``b`` is valid when ``j < lengths[b]``.

    Shape:
        lengths ``(B,)`` ints; returns ``(B, 1, 1, Tk)`` bool with ``Tk = max_len``
        (default ``max(lengths)``), ready to broadcast over heads and queries.
    """
    lengths_t = torch.as_tensor(lengths)
    if lengths_t.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths_t.shape)}")
    if lengths_t.dtype.is_floating_point or lengths_t.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths_t.dtype}")
    # A torch.compile/torch.export graph cannot branch on the lengths' values: given max_len,
    # traced code skips the value checks.
    traced = max_len is not None and torch.compiler.is_compiling()
    if not traced and lengths_t.numel() and int(lengths_t.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {lengths_t.tolist()}")
    longest = int(lengths_t.max()) if lengths_t.numel() and not traced else 0
    if max_len is None:
        max_len = longest
    _check_length("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    j = torch.arange(max_len, device=lengths_t.device)  # (Tk,)
    valid = j.unsqueeze(0) < lengths_t.unsqueeze(1)  # (B, Tk)
    return valid[:, None, None, :]  # (B, 1, 1, Tk)


def restart_documents(position_ids: Tensor) -> Tensor | None:
    """The document of each position of packed rows: a new one starts where the position id restarts.

    A restart is a position id not greater than the one before it
    (``[0, 1, 2, 0, 1]``: two documents). A forward jump (``[0, 1, 2, 7, 8]``: a
    prompt with a gap, a left-padded cache) stays in its document. ``None``
    when every row is one document.

    Shape:
        position_ids ``(B, T)``; returns ``(B, T)`` long document indices from 0, or ``None``.
    """
    if position_ids.dim() != 2 or position_ids.shape[-1] < 2:
        return None
    restarts = position_ids[:, 1:] <= position_ids[:, :-1]  # (B, T - 1)
    if not bool(restarts.any()):
        return None
    return torch.nn.functional.pad(restarts.long().cumsum(-1), (1, 0))


def combine(*masks: Tensor | None) -> Tensor | None:
    """Intersect masks: a query may attend a key only where every mask allows it.

    ``None`` entries are skipped; with no mask left the result is ``None``
    (attend everywhere). Shapes broadcast as in ``torch.logical_and``.
    """
    result: Tensor | None = None
    for index, m in enumerate(masks):
        if m is None:
            continue
        if not isinstance(m, Tensor) or m.dtype != torch.bool:
            raise TypeError(
                f"combine() takes boolean masks; argument {index} is "
                f"{type(m).__name__ if not isinstance(m, Tensor) else m.dtype}"
            )
        if result is None:
            result = m
        else:
            try:
                result = result & m
            except RuntimeError as err:
                raise ValueError(
                    f"combine(): mask {index} of shape {tuple(m.shape)} does not broadcast "
                    f"with shape {tuple(result.shape)}"
                ) from err
    return result


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Convert a boolean mask to an additive bias: 0 where allowed, the dtype's minimum where not.

    The dtype's own finite minimum is used instead of ``-inf`` or ``-1e9``:
    ``-1e9`` overflows float16, and ``-inf`` turns a row with no key into NaN.
    Prefer passing the boolean mask itself to :func:`attnkit.attention`, which
    also zeroes rows that have no key.
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got {getattr(mask, 'dtype', type(mask))}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype}")
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert PyTorch's ``key_padding_mask`` (True = IGNORE this key) to attnkit's rule.

    ``nn.MultiheadAttention`` and ``nn.TransformerEncoder`` mark padded keys
    with True. attnkit marks keys that MAY be attended with True, so this
    function inverts the mask and adds the head and query axes. A float
    key-padding mask (PyTorch's additive form) is rejected: pass it as ``bias``.

    Shape:
        key_padding_mask ``(B, Tk)`` bool; returns ``(B, 1, 1, Tk)`` bool.
    """
    if not isinstance(key_padding_mask, Tensor):
        raise TypeError(f"key_padding_mask must be a tensor, got {type(key_padding_mask).__name__}")
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(
            f"key_padding_mask must be boolean (True = ignore), got {key_padding_mask.dtype}; "
            "pass additive float masks as bias"
        )
    if key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask must be 2-D (B, Tk), got shape {tuple(key_padding_mask.shape)}"
        )
    return (~key_padding_mask)[:, None, None, :]  # (B, 1, 1, Tk)


def from_torch_attn_mask(attn_mask: Tensor, batch: int, heads: int) -> Tensor:
    """Convert ``nn.MultiheadAttention``'s boolean ``attn_mask`` (True = IGNORE) to attnkit's rule.

    Shape:
        attn_mask ``(Tq, Tk)`` or ``(B * H, Tq, Tk)`` bool;
        returns ``(1, 1, Tq, Tk)`` or ``(B, H, Tq, Tk)`` bool.
    """
    if attn_mask.dtype != torch.bool:
        raise TypeError(
            f"from_torch_attn_mask takes a boolean mask (True = ignore), got {attn_mask.dtype}; "
            "pass additive float masks as bias"
        )
    if attn_mask.dim() == 2:
        return (~attn_mask)[None, None]  # (1, 1, Tq, Tk)
    if attn_mask.dim() == 3 and attn_mask.shape[0] == batch * heads:
        return (~attn_mask).reshape(batch, heads, *attn_mask.shape[1:])  # (B, H, Tq, Tk)
    raise ValueError(
        f"attn_mask must be (Tq, Tk) or (B*H={batch * heads}, Tq, Tk), got shape {tuple(attn_mask.shape)}"
    )


def from_hf_attention_mask(attention_mask: Tensor) -> Tensor:
    """Convert Hugging Face's ``attention_mask`` (1 = token, 0 = padding) to attnkit's key mask.

    Shape:
        attention_mask ``(B, T)`` integer or bool; returns ``(B, 1, 1, T)`` bool.
    """
    if not isinstance(attention_mask, Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
        raise TypeError(
            f"attention_mask must hold integers 1/0 (or bools), got dtype {attention_mask.dtype}; "
            "an already extended float mask is an additive bias: pass it as bias="
        )
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be 2-D (B, T), got shape {tuple(attention_mask.shape)}")
    if attention_mask.dtype != torch.bool and bool(((attention_mask != 0) & (attention_mask != 1)).any()):
        raise ValueError(
            f"attention_mask must hold only 0 and 1, got values {attention_mask.unique().tolist()}"
        )
    return (attention_mask != 0)[:, None, None, :]  # (B, 1, 1, T)


def _check_broadcast(name: str, t: Tensor, target: tuple[int, ...]) -> None:
    if t.dim() > len(target):
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} has more than {len(target)} dims; "
            f"it must broadcast to (B, H, Tq, Tk) = {target}"
        )
    # dim by dim, not torch.broadcast_shapes: a traced graph cannot catch its error
    if any(s not in (1, n) for s, n in zip(t.shape[::-1], target[::-1], strict=False)):
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} does not broadcast to (B, H, Tq, Tk) = {target}"
        )


def check_mask(mask: object, target: tuple[int, ...], name: str = "mask") -> Tensor:
    """Validate a boolean mask against the ``(B, H, Tq, Tk)`` it must broadcast to."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        hint = (
            "; a float tensor is an additive bias: pass it as bias=, or convert a "
            "True-means-ignore mask with masks.from_key_padding_mask"
            if mask.dtype.is_floating_point
            else "; build it with attnkit.masks or compare, e.g. mask = ids != pad_id (a 1/0 Hugging Face "
            "attention_mask goes through masks.from_hf_attention_mask)"
        )
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}{hint}")
    _check_broadcast(name, mask, target)
    return mask


def check_bias(bias: object, target: tuple[int, ...], name: str = "bias") -> Tensor:
    """Validate an additive float bias against the ``(B, H, Tq, Tk)`` it must broadcast to."""
    if not isinstance(bias, Tensor):
        raise TypeError(f"{name} must be a float torch.Tensor, got {type(bias).__name__}")
    if not bias.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating tensor (an additive bias), got dtype {bias.dtype}; "
            "pass boolean masks as mask="
        )
    _check_broadcast(name, bias, target)
    return bias


_causal_mask = causal  # the causal flags below shadow the function


def _query_rows(mask: Tensor | BlockMask | None, tq: int, causal_tk: int | None) -> Tensor | None:
    """Rows with a key in some head, by :func:`rows_with_keys`; ``causal_tk`` adds bottom-right causality.

    Shape:
        returns ``(Bm, Tq or 1, 1)`` bool, or ``None`` when every row has a key.
    """
    if isinstance(mask, BlockMask):
        block_rows = mask.rows_with_keys()  # (Bm, Hm, Tq, 1) or None
        return None if block_rows is None else block_rows.any(dim=1)
    if mask is None and (causal_tk is None or tq <= causal_tk):
        return None
    device = None if mask is None else mask.device
    full = mask if causal_tk is None else combine(mask, _causal_mask(tq, causal_tk, device=device))
    assert full is not None
    rows = rows_with_keys(full)  # (..., Tq, 1)
    while rows.dim() < 4:
        rows = rows.unsqueeze(0)
    return rows.any(dim=1)  # (Bm, Tq or 1, 1): some head has a key


class AttentionMask:
    """One mask for a whole forward pass: the pairs a query may attend, and the rows that have any.

    A model builds it once at its entry -- ``AttentionMask(mask)`` from a
    boolean mask (True = may attend) or a :class:`BlockMask`, or
    :meth:`from_lengths` -- and passes the object down unchanged:
    :func:`attnkit.attention` and every attnkit layer, block and pooling take
    it wherever they take a mask, and none of them rebuilds it. The rows that
    have a key are found once here, by :func:`rows_with_keys`; a layer reads
    them (:meth:`query_rows`) to give a query with no key a zero output.

    Attributes:
        allowed: the boolean mask broadcasting to ``(B, H, Tq, Tk)``, or the
            :class:`BlockMask`, exactly as given.
        rows: ``(Bm, Tq or 1, 1)`` bool, True for each query row that may
            attend some key in some head; ``None`` when every row may
            (a BlockMask knows that without looking).

    A tensor with two or three axes whose first is not 1 is refused: without the
    call's sizes it could be a ``(B, Tk)`` key-padding mask or ``(Tq, Tk)`` pairs;
    :func:`as_attention_mask` with the call's ``(B, H, Tq, Tk)`` reads it by the rule
    of every layer (:func:`read_mask`).

    Shape:
        allowed ``(B|1, H|1, Tq|1, Tk)`` (leading ones may be left out) or a BlockMask
        for ``(B, H, Tq, Tk)``.
    """

    __slots__ = ("allowed", "rows", "_causal_rows")

    def __init__(self, allowed: Tensor | BlockMask) -> None:
        if isinstance(allowed, AttentionMask):
            raise TypeError("allowed is already an AttentionMask; pass it on as it is")
        if not isinstance(allowed, BlockMask):
            check_mask(allowed, tuple(allowed.shape) if isinstance(allowed, Tensor) else ())
            if allowed.dim() > 4:
                raise ValueError(
                    f"allowed must broadcast to (B, H, Tq, Tk), got {allowed.dim()} dims {tuple(allowed.shape)}"
                )
            if allowed.dim() in (2, 3) and allowed.shape[0] != 1:
                raise ValueError(
                    f"AttentionMask takes four axes (B|1, H|1, Tq|1, Tk); a mask of shape {tuple(allowed.shape)} "
                    "could mean more than one thing: build it with masks.as_attention_mask(mask, (B, H, Tq, Tk)), "
                    "which reads it by the rule of every layer, or add the axes (mask[:, None, None, :] for "
                    "(B, Tk) key padding, mask[None, None] for (Tq, Tk) pairs)"
                )
        self.allowed: Tensor | BlockMask = allowed
        self.rows: Tensor | None = _query_rows(allowed, 1, None)
        self._causal_rows: dict[tuple[int, int], Tensor | None] = {}

    @classmethod
    def from_lengths(cls, lengths: Tensor | Sequence[int], max_len: int | None = None) -> AttentionMask:
        """The key-padding mask of :func:`from_lengths` (``(B, 1, 1, Tk)``) with its rows.

        Shape:
            lengths ``(B,)``; ``allowed`` is ``(B, 1, 1, Tk)`` and ``rows`` ``(B, 1, 1)``.
        """
        return cls(from_lengths(lengths, max_len))

    @property
    def is_block(self) -> bool:
        """Whether :attr:`allowed` is a :class:`BlockMask` (attention takes the block-sparse path)."""
        return isinstance(self.allowed, BlockMask)

    @property
    def device(self) -> torch.device:
        return self.allowed.device

    def key_mask(self) -> Tensor:
        """The ``(B, Tk)`` key mask of a key-padding mask ``(B, 1, 1, Tk)``: True on the keys that may be attended.

        Raises ``ValueError`` for a mask that differs between queries or heads (it has no one key mask).
        """
        m = self.allowed
        if isinstance(m, BlockMask) or m.dim() != 4 or m.shape[1] != 1 or m.shape[2] != 1:
            what = "a BlockMask" if isinstance(m, BlockMask) else f"shape {tuple(m.shape)}"
            raise ValueError(f"key_mask() needs a key-padding mask (B, 1, 1, Tk), got {what}")
        return m[:, 0, 0]  # (B, Tk)

    def query_rows(self, tq: int, tk: int, *, causal: bool = False) -> Tensor | None:
        """True for each of ``Tq`` query rows that may attend a key in some head; ``None`` when all may.

        ``causal`` adds the bottom-right causal mask of ``attention(causal=True)``
        over ``Tk`` keys; that variant is computed once per ``(Tq, Tk)`` and kept.

        Shape:
            returns ``(Bm, Tq or 1, 1)`` bool, or ``None``.
        """
        if not causal:
            return self.rows
        if (tq, tk) not in self._causal_rows:
            rows = _query_rows(self.allowed, tq, tk)
            if torch.compiler.is_compiling():  # a compiled graph keeps no state on its inputs
                return rows
            self._causal_rows[(tq, tk)] = rows
        return self._causal_rows[(tq, tk)]

    def index_select(self, index: Tensor) -> AttentionMask:
        """The mask of the examples ``index`` picks (beam search reorders its batch), rows included.

        Shape:
            index ``(B',)``; returns a mask whose batch axis is ``B'``.
        """
        if isinstance(self.allowed, BlockMask):
            raise TypeError("index_select() takes a dense mask; build the BlockMask for the new batch instead")
        picked = object.__new__(AttentionMask)
        picked.allowed = self.allowed.index_select(0, index) if self.allowed.shape[0] > 1 else self.allowed
        rows = self.rows
        picked.rows = None if rows is None else rows.index_select(0, index) if rows.shape[0] > 1 else rows
        picked._causal_rows = {}
        return picked

    def __repr__(self) -> str:
        what = repr(self.allowed) if isinstance(self.allowed, BlockMask) else f"shape={tuple(self.allowed.shape)}"
        rows = "every row" if self.rows is None else f"shape={tuple(self.rows.shape)}"
        return f"AttentionMask({what}, rows {rows})"


MaskLike = Tensor | BlockMask | AttentionMask | None
"""What a layer takes as ``mask=``: a boolean tensor, a BlockMask, one :class:`AttentionMask`, or ``None``."""


Target = tuple[int, int | None, int, int]
"""The ``(B, H, Tq, Tk)`` of one call; ``H`` is ``None`` where the caller does not know it (any head count)."""


def _read_tensor(mask: Tensor, target: Target, name: str) -> Tensor:
    """A user's tensor mask as the 4-D ``(B|1, H|1, Tq|1, Tk)`` bool tensor it means in this call."""
    b, h, tq, tk = target
    if mask.dim() == 1 and not mask.dtype.is_floating_point and mask.dtype != torch.bool:
        if mask.shape[0] != b:
            raise ValueError(f"{name}: integer lengths must be (B,) = ({b},), got shape {tuple(mask.shape)}")
        return from_lengths(mask, tk)  # (B, 1, 1, Tk)
    if mask.dtype != torch.bool or mask.dim() > 4:
        check_mask(mask, (b, 1 if h is None else h, tq, tk), name)  # raises, naming the dtype or the axes
    if mask.dim() and mask.shape[-1] not in (1, tk):
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to (B, H, Tq, Tk) = {target}: "
                         f"it has {mask.shape[-1]} keys where the call has Tk = {tk}")
    if mask.dim() in (2, 3) and mask.shape[0] != 1:
        two = mask.dim() == 2
        lead = mask.shape[0]
        other, other_name = (tq, "Tq") if two else (h, "H")
        forms = ("(B, Tk) key-padding mask", "(Tq, Tk) mask of pairs") if two else (
            "(B, Tq, Tk) mask", "(H, Tq, Tk) mask")
        fixes = ("mask[:, None, None, :] (or masks.from_lengths, masks.from_key_padding_mask) for key "
                 "padding, mask[None, None] for pairs") if two else (
            "mask[:, None] for (B, 1, Tq, Tk), mask[None] for (1, H, Tq, Tk)")
        if lead == b and (other is None or lead == other):
            why = f"B = {other_name} = {b}" if other is not None else f"B = {b} and any head count is taken"
            raise ValueError(
                f"{name} of shape {tuple(mask.shape)} is ambiguous here ({why}): it could be a {forms[0]} "
                f"or a {forms[1]}; give it four axes (B, H, Tq, Tk): {fixes}"
            )
        if lead == b:
            mask = mask[:, None, None, :] if two else mask[:, None]  # (B, 1, 1|Tq, Tk)
        elif lead != other:
            raise ValueError(
                f"{name} of shape {tuple(mask.shape)} is neither a {forms[0]} nor a {forms[1]} "
                f"for (B, H, Tq, Tk) = {target}"
            )
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    check_mask(mask, (b, mask.shape[1] if h is None else h, tq, tk), name)
    return mask


def read_mask(mask: object, target: Target, *, name: str = "mask") -> Tensor | BlockMask | None:
    """The allowed pairs that ``mask`` means for a call of shape ``target``: the one reader of user masks.

    :func:`attnkit.attention`, every layer, pooling and kernel read a mask through this
    function (:func:`as_attention_mask` wraps its answer), so the same mask means the same
    pairs everywhere. Accepted, in attnkit's rule (True = may attend):

    * ``(B, 1|H, Tq|1, Tk)`` and anything that broadcasts to ``(B, H, Tq, Tk)`` with four axes;
    * a 2-D ``(B, Tk)`` key-padding mask or ``(Tq, Tk)`` pairs (``masks.causal``), told apart by
      their sizes; a ``(1, Tk)`` key mask is the same under both;
    * a 3-D ``(B, Tq, Tk)`` or ``(H, Tq, Tk)`` mask, told apart the same way;
    * a 1-D integer tensor of ``B`` lengths (:func:`from_lengths`), or a 1-D bool ``(Tk,)`` key mask;
    * a :class:`BlockMask`, or an :class:`AttentionMask` (read by broadcasting, as built).

    A 2-D tensor with ``B == Tq`` (or a 3-D one with ``B == H``) could mean either, and is
    refused with a ``ValueError`` that names the four-axis form to use; ``H=None`` in the
    target (a caller that does not know the heads) refuses every 3-D mask whose first axis
    is ``B``. PyTorch's True-means-ignore masks and Hugging Face's 1/0 ``attention_mask``
    enter through :func:`from_key_padding_mask`, :func:`from_torch_attn_mask` and
    :func:`from_hf_attention_mask`.

    Shape:
        target ``(B, H, Tq, Tk)``; returns a bool tensor ``(B|1, H|1, Tq|1, Tk)``, the
        BlockMask, an AttentionMask's ``allowed`` as it holds it, or ``None``.
    """
    if mask is None or isinstance(mask, BlockMask):
        return mask
    b, h, tq, tk = target
    if isinstance(mask, AttentionMask):
        if isinstance(mask.allowed, BlockMask):
            return mask.allowed
        allowed = mask.allowed
        check_mask(allowed, (b, (allowed.shape[-3] if allowed.dim() >= 3 else 1) if h is None else h, tq, tk), name)
        return allowed
    if not isinstance(mask, Tensor):
        check_mask(mask, (b, 1 if h is None else h, tq, tk), name)  # raises: names what was given
    assert isinstance(mask, Tensor)
    return _read_tensor(mask, target, name)


def as_attention_mask(mask: MaskLike, target: Target | None = None, *, name: str = "mask") -> AttentionMask | None:
    """``mask`` as an :class:`AttentionMask` (itself when it is one already); ``None`` stays ``None``.

    With ``target`` (the call's ``(B, H, Tq, Tk)``) a plain mask is read by :func:`read_mask`,
    the one rule of every layer; without it the mask is taken as it is, broadcasting to
    ``(B, H, Tq, Tk)`` (a model building its mask at its entry). A model passes the object
    it built, which goes through untouched (checked against ``target`` when given).
    """
    if mask is None:
        return None
    if target is not None:
        pairs = read_mask(mask, target, name=name)
        if isinstance(mask, AttentionMask):
            return mask
        assert pairs is not None
        return AttentionMask(pairs)
    if isinstance(mask, AttentionMask):
        return mask
    return AttentionMask(mask)


def four_axes(allowed: Tensor) -> Tensor:
    """A dense mask's pairs with the leading axes it omits added (a view): what broadcasts reads.

    Shape:
        allowed ``(..., Tq|1, Tk)`` with at most four axes; returns ``(B|1, H|1, Tq|1, Tk)``.
    """
    return allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))


def allowed_pairs(mask: MaskLike) -> Tensor | BlockMask | None:
    """The allowed pairs of ``mask``: the tensor or BlockMask itself, or an :class:`AttentionMask`'s ``allowed``.

    Shape:
        returns what the mask holds: a bool tensor broadcasting to ``(B, H, Tq, Tk)``, a BlockMask or ``None``.
    """
    return mask.allowed if isinstance(mask, AttentionMask) else mask


def query_has_key(mask: MaskLike, tq: int, tk: int, *, causal: bool = False) -> Tensor | None:
    """True for each query row that may attend at least one key in some head; ``None`` when all may.

    The rule behind "a query with no key gives zeros" for a layer whose output
    passes through a projection with a bias: :func:`attnkit.attention` already
    gives zero for such a row, and the layer zeroes the projected row too.
    ``causal`` adds the bottom-right causal mask of ``attention(causal=True)``.
    An :class:`AttentionMask` answers from the rows it carries.

    Shape:
        mask broadcasting to ``(B, H, Tq, Tk)``, a :class:`BlockMask` or an
        :class:`AttentionMask`; returns ``(B or 1, Tq, 1)`` bool, or ``None``.
    """
    if isinstance(mask, AttentionMask):
        rows = mask.query_rows(tq, tk, causal=causal)
    else:
        rows = _query_rows(mask, tq, tk if causal else None)
    return None if rows is None else rows.expand(rows.shape[0], tq, 1)
