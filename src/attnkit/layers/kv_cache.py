"""Key/value cache for incremental (token-by-token) decoding.

At decoding step t a decoder only needs the new query; the keys and values of
steps ``< t`` do not change, so they are kept here instead of recomputed.
Self-attention appends one step at a time; cross-attention fills the cache
once from the encoder memory and then only reads it (``static=True``).

Two bounded caches keep memory flat on long streams: :class:`RollingKVCache`
(a sliding window of the last positions) and :class:`AttentionSinkCache`
(StreamingLLM: the first few positions plus a window). Each tells the
attention which of its keys each new query may see (``last_mask``), and each
equals full recomputation under its ``mask_mod()``.

Shape legend: B batch, Hkv key/value heads, T cached length, Dh head width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.core.masks import MaskMod

__all__ = ["KVCache", "RollingKVCache", "AttentionSinkCache"]


class KVCache:
    """Keys and values seen so far, per attention layer.

    Shape:
        keys ``(B, Hkv, T, Dh)``, values ``(B, Hkv, T, Dv)``.
    """

    last_mask: Tensor | None = None
    """What the new queries of the last :meth:`update` may see, when the cache limits it (None: every key)."""

    def __init__(self, *, static: bool = False) -> None:
        self.static = static
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

    @property
    def offset(self) -> int:
        """Positions seen so far: the position of the next token (the cached length here)."""
        return len(self)

    @property
    def filled(self) -> bool:
        """True once a static (cross-attention) cache holds the memory's keys and values."""
        return self.keys is not None

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's keys and values (or set them, for a static cache) and return all.

        Shape:
            keys ``(B, Hkv, Tnew, Dh)``, values ``(B, Hkv, Tnew, Dv)``;
            returns ``(B, Hkv, T + Tnew, Dh)`` and ``(B, Hkv, T + Tnew, Dv)``.
        """
        if self.keys is None or self.values is None or self.static:
            self.keys, self.values = keys, values
        else:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]:
                raise ValueError(
                    f"new keys of shape {tuple(keys.shape)} do not match the cached keys "
                    f"{tuple(self.keys.shape)} in (B, Hkv, *, Dh)"
                )
            self.keys = torch.cat([self.keys, keys], dim=2)  # (B, Hkv, T+Tnew, Dh)
            self.values = torch.cat([self.values, values], dim=2)  # (B, Hkv, T+Tnew, Dv)
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Select batch entries (beam search keeps the surviving hypotheses).

        Shape:
            index ``(B',)`` of batch positions.
        """
        if self.keys is not None and self.values is not None:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)


def _window(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class RollingKVCache(KVCache):
    """A sliding-window cache: keeps the keys and values of the last ``window`` positions only.

    A query at position ``i`` attends keys ``i - window .. i`` (Longformer,
    Mistral): exactly :func:`attnkit.masks.sliding_window_mod` with
    :func:`~attnkit.core.masks.causal_mod` (:meth:`mask_mod`), at a memory of
    ``window`` positions however long the stream. :meth:`update` returns the kept
    keys plus the new ones and sets :attr:`last_mask`, the window mask the new
    queries need, which :class:`~attnkit.layers.MultiHeadAttention` applies.

    **Positions** are the tokens' original positions: :attr:`offset` counts
    every position seen (not the slots kept), :attr:`key_positions` holds
    the original position of each kept key and :attr:`last_key_positions` that
    of each key the last :meth:`update` returned (for distance terms such as
    ALiBi: ``-slope * (q_pos - last_key_positions)``). Keys are stored as
    computed, so an absolute encoding added at the input (or rotary applied
    with ``offset=cache.offset``) gives exactly the attention of the full
    sequence under the equivalent mask.

    Shape:
        keys ``(B, Hkv, <= window, Dh)``; :attr:`last_mask` ``(1, 1, Tnew, Tk)``.
    """

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = _window("window", window, 1)
        self.key_positions = torch.zeros(0, dtype=torch.long)
        self.last_key_positions = torch.zeros(0, dtype=torch.long)
        self.last_mask: Tensor | None = None
        self._seen = 0

    @property
    def offset(self) -> int:
        """Positions seen so far: the original position of the next token."""
        return self._seen

    def _keep(self, positions: Tensor) -> Tensor:
        """Which of the stored positions stay for the next step (bool per position)."""
        return positions > self._seen - 1 - self.window

    def _allowed(self, q: Tensor, k: Tensor) -> Tensor:
        return (k[None, :] <= q[:, None]) & (q[:, None] - k[None, :] <= self.window)

    def mask_mod(self) -> MaskMod:
        """The mask mod whose full recomputation this cache reproduces."""
        window = self.window

        def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return (kv_idx <= q_idx) & (q_idx - kv_idx <= window)

        return mod

    def update(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys and values; return those the new queries may need.

        Shape:
            keys ``(B, Hkv, Tnew, Dh)``; returns ``(B, Hkv, Tk, Dh)`` and ``(B, Hkv, Tk, Dv)``
            with ``Tk`` the kept positions plus ``Tnew``.
        """
        t_new = keys.shape[2]
        new_pos = torch.arange(self._seen, self._seen + t_new, device=keys.device)
        if self.keys is not None and self.values is not None:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]:
                raise ValueError(
                    f"new keys of shape {tuple(keys.shape)} do not match the cached keys "
                    f"{tuple(self.keys.shape)} in (B, Hkv, *, Dh)"
                )
            keys = torch.cat([self.keys, keys], dim=2)  # (B, Hkv, Tk, Dh)
            values = torch.cat([self.values, values], dim=2)
            positions = torch.cat([self.key_positions.to(keys.device), new_pos])
        else:
            positions = new_pos
        self.last_mask = self._allowed(new_pos, positions)[None, None]  # (1, 1, Tnew, Tk)
        self.last_key_positions = positions  # (Tk,): of the keys returned, for distance terms (ALiBi)
        self._seen += t_new
        keep = self._keep(positions)
        self.keys, self.values = keys[:, :, keep], values[:, :, keep]
        self.key_positions = positions[keep]
        return keys, values

    def __len__(self) -> int:
        return int(self.key_positions.shape[0])


class AttentionSinkCache(RollingKVCache):
    """StreamingLLM's cache (Xiao et al., 2023): the first ``sinks`` positions plus the last ``window``.

    The first tokens of a stream collect a large share of attention whatever
    they hold ("attention sinks"); dropping them, as a plain sliding window
    does, upsets the softmax. Keeping ``sinks`` of them beside a window keeps a
    model stable on streams far longer than its cache. A query at position
    ``i`` attends keys ``j <= i`` with ``j < sinks`` or ``i - j <= window``
    (:meth:`mask_mod`).

    **Positions.** StreamingLLM gives the cached keys their *slots* in the
    cache (re-rotating them every step) so that relative distances stay within
    the trained range. attnkit keeps the *original* positions here, as
    :class:`RollingKVCache` does (:attr:`offset`, :attr:`key_positions`): the
    cache is then exactly full recomputation under :meth:`mask_mod`, which is
    what its tests hold it to. Slot positions are ``arange(len(cache))``; a
    model that wants them stores un-rotated keys and rotates with
    ``RotaryEmbedding.rotate(k, positions=...)`` itself.

    Shape:
        keys ``(B, Hkv, <= sinks + window, Dh)``; :attr:`last_mask` ``(1, 1, Tnew, Tk)``.
    """

    def __init__(self, sinks: int, window: int) -> None:
        super().__init__(window)
        self.sinks = _window("sinks", sinks, 1)

    def _keep(self, positions: Tensor) -> Tensor:
        return (positions < self.sinks) | super()._keep(positions)

    def _allowed(self, q: Tensor, k: Tensor) -> Tensor:
        return (k[None, :] <= q[:, None]) & ((k[None, :] < self.sinks) | (q[:, None] - k[None, :] <= self.window))

    def mask_mod(self) -> MaskMod:
        """The mask mod whose full recomputation this cache reproduces."""
        window, sinks = self.window, self.sinks

        def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return (kv_idx <= q_idx) & ((kv_idx < sinks) | (q_idx - kv_idx <= window))

        return mod
