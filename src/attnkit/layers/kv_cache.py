"""Key/value cache for incremental (token-by-token) decoding.

At decoding step t a decoder only needs the new query; the keys and values of
steps ``< t`` do not change, so they are kept here instead of recomputed.
Self-attention appends one step at a time; cross-attention fills the cache
once from the encoder memory and then only reads it (``static=True``).

Shape legend: B batch, Hkv key/value heads, T cached length, Dh head width.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache"]


class KVCache:
    """Keys and values seen so far, per attention layer.

    Shape:
        keys ``(B, Hkv, T, Dh)``, values ``(B, Hkv, T, Dv)``.
    """

    def __init__(self, *, static: bool = False) -> None:
        self.static = static
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

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
