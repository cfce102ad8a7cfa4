"""Caches for incremental decoding with :class:`~attnkit.blocks.TransformerDecoder`.

A decoder-only (causal) :class:`~attnkit.blocks.TransformerEncoder` keeps one
growing :class:`~attnkit.layers.kv_cache.KVCache` per layer
(:class:`SelfAttentionCache`). Each encoder-decoder layer keeps two :class:`~attnkit.layers.kv_cache.KVCache`:

* ``self_attn`` grows by the new positions at every step (the keys and values
  of earlier target positions never change under causal attention);
* ``cross_attn`` is *static*: filled from the encoder memory on the first
  step, then only read, so the memory is projected once per sequence.

Every self-attention cache may be bounded: ``init_cache(window=W)`` keeps the
last ``W`` positions (:class:`~attnkit.layers.kv_cache.RollingKVCache`),
``init_cache(window=W, sinks=S)`` the first ``S`` as well
(:class:`~attnkit.layers.kv_cache.AttentionSinkCache`, StreamingLLM). Decoding
then equals full recomputation under the cache's ``mask_mod()``, with memory
that stays flat; ``offset`` keeps counting the original positions.

Shape legend: B batch, Hkv key/value heads, T cached length, Dh head width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from torch import Tensor

from attnkit._checks import positive_int
from attnkit.layers.kv_cache import AttentionSinkCache, KVCache, RollingKVCache

__all__ = ["DecoderLayerCache", "DecoderCache", "SelfAttentionCache", "self_attention_cache"]


def self_attention_cache(window: int | None = None, sinks: int = 0) -> Callable[[], KVCache]:
    """A factory of self-attention caches: full (``window=None``), rolling, or with attention sinks."""
    if window is None:
        if sinks:
            raise ValueError(f"sinks={sinks} needs a window (the cache keeps the sinks plus the last window)")
        return KVCache
    positive_int("window", window)
    if sinks:
        positive_int("sinks", sinks)
        return lambda: AttentionSinkCache(sinks, window)
    return lambda: RollingKVCache(window)


@dataclass
class DecoderLayerCache:
    """The self-attention and cross-attention caches of one decoder layer.

    Shape:
        ``self_attn`` keys/values ``(B, Hkv, T, Dh)`` for the ``T`` target
        positions so far; ``cross_attn`` ``(B, Hkv, Tk, Dh)`` for the encoder
        memory; ``reorder`` takes an index ``(B',)``.
    """

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))

    def __len__(self) -> int:
        """Target positions cached so far."""
        return len(self.self_attn)

    @property
    def offset(self) -> int:
        """Target positions seen so far (more than cached once a bounded cache drops some)."""
        return self.self_attn.offset

    def reorder(self, index: Tensor) -> None:
        """Keep batch entries ``index`` (beam search). Shape: index ``(B',)``."""
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


class DecoderCache:
    """Per-layer caches of a whole :class:`~attnkit.blocks.TransformerDecoder`.

    ``offset`` is the number of target positions already decoded: read it
    *before* a step and give it to the positional encoding, so that the new
    token gets position ``offset`` (and the next ones ``offset + 1``...).

    Shape:
        per layer, as :class:`DecoderLayerCache`; ``reorder`` takes an index ``(B',)``.
    """

    def __init__(self, num_layers: int, *, window: int | None = None, sinks: int = 0) -> None:
        positive_int("num_layers", num_layers)
        make = self_attention_cache(window, sinks)
        self.layers = [DecoderLayerCache(self_attn=make()) for _ in range(num_layers)]

    @property
    def offset(self) -> int:
        """Number of target positions seen so far (the position of the next token)."""
        return self.layers[0].offset

    def __len__(self) -> int:
        return self.offset

    def __iter__(self) -> Iterator[DecoderLayerCache]:
        return iter(self.layers)

    def __getitem__(self, index: int) -> DecoderLayerCache:
        return self.layers[index]

    def reorder(self, index: Tensor) -> None:
        """Keep batch entries ``index`` in every layer (beam search). Shape: index ``(B',)``."""
        for layer in self.layers:
            layer.reorder(index)


class SelfAttentionCache:
    """Per-layer self-attention caches of a causal :class:`~attnkit.blocks.TransformerEncoder`
    used as a decoder-only model (GPT-style).

    ``offset`` is the number of positions already decoded; read it before a
    step and give it to the positional encoding.

    Shape:
        per layer, keys/values ``(B, Hkv, T, Dh)``; ``reorder`` takes an index ``(B',)``.
    """

    def __init__(self, num_layers: int, *, window: int | None = None, sinks: int = 0) -> None:
        positive_int("num_layers", num_layers)
        make = self_attention_cache(window, sinks)
        self.layers = [make() for _ in range(num_layers)]

    @property
    def offset(self) -> int:
        """Number of positions seen so far (the position of the next token)."""
        return self.layers[0].offset

    def __len__(self) -> int:
        return self.offset

    def reorder(self, index: Tensor) -> None:
        """Keep batch entries ``index`` in every layer (beam search). Shape: index ``(B',)``."""
        for layer in self.layers:
            layer.reorder(index)
