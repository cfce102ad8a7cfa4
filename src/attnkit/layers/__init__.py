"""One attention variant per file, each a thin ``nn.Module`` over :func:`attnkit.attention`."""

from attnkit.layers.kv_cache import KVCache
from attnkit.layers.multi_head import MultiHeadAttention

__all__ = ["KVCache", "MultiHeadAttention"]
