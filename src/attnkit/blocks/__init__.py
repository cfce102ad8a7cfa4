"""Transformer building blocks: feed-forward networks, encoder/decoder layers and stacks, decoding caches.

Every block is batch-first and follows attnkit's mask rule (boolean, True
where a query may attend a key). Layers convert from PyTorch's own with
``from_torch``; stacks are built from a :class:`TransformerLayerConfig`, a
layer to copy, or a factory.
"""

from attnkit.blocks.cache import DecoderCache, DecoderLayerCache, SelfAttentionCache
from attnkit.blocks.config import TransformerLayerConfig
from attnkit.blocks.decoder import DecoderWeights, TransformerDecoder, TransformerDecoderLayer
from attnkit.blocks.encoder import TransformerEncoder, TransformerEncoderLayer
from attnkit.blocks.feed_forward import ACTIVATIONS, FeedForward

__all__ = [
    "ACTIVATIONS",
    "FeedForward",
    "TransformerLayerConfig",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
    "DecoderWeights",
    "DecoderLayerCache",
    "DecoderCache",
    "SelfAttentionCache",
]
