"""One attention variant per file, each a thin ``nn.Module`` over :func:`attnkit.attention`.

========================== ==============================================================
layer                      what it computes
========================== ==============================================================
MultiHeadAttention         self, cross and grouped-query attention (Vaswani et al., 2017)
AdditiveAttention          Bahdanau attention: a query against a set of keys
AttentionPooling           a learned score over a sequence -> one context vector
RelativePositionAttention  Shaw et al. (2018) clipped relative positions for keys and values
LinearAttention            efficient attention (Shen et al., 2021), linear in the length
SelfAttention2d            attention over the positions of an image feature map (SAGAN)
BertAttention              BERT's attention block with Hugging Face parameter names
KVCache                    keys and values kept for incremental decoding
RollingKVCache             a sliding-window cache: the last ``window`` positions only
AttentionSinkCache         StreamingLLM: the first ``sinks`` positions plus the last ``window``
========================== ==============================================================
"""

from attnkit.layers.additive import AdditiveAttention
from attnkit.layers.bert import BertAttention, BertSelfAttention, BertSelfOutput
from attnkit.layers.image import SelfAttention2d
from attnkit.layers.kv_cache import AttentionSinkCache, KVCache, RollingKVCache
from attnkit.layers.linear import LinearAttention, linear_attention
from attnkit.layers.multi_head import MultiHeadAttention
from attnkit.layers.pooling import AttentionPooling
from attnkit.layers.relative import RelativePositionAttention, relative_attention

__all__ = [
    "MultiHeadAttention",
    "AdditiveAttention",
    "AttentionPooling",
    "RelativePositionAttention",
    "relative_attention",
    "LinearAttention",
    "linear_attention",
    "SelfAttention2d",
    "BertAttention",
    "BertSelfAttention",
    "BertSelfOutput",
    "KVCache",
    "RollingKVCache",
    "AttentionSinkCache",
]
