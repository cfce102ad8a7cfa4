"""attnkit.reference: the NumPy twin of attnkit (imports numpy only; safetensors on use).

Every layer has a hand-written ``forward``/``backward`` pair (the protocol of
:class:`Module`), checked against central differences with :func:`gradcheck`
and against torch autograd and the attnkit torch layers in the tests.
Optimizers, a trainer, two text classifiers, safetensors weight exchange with
the torch models and attention analysis complete it.

    from attnkit.reference import TransformerClassifier, ClassifierConfig, AdamW, Trainer
"""

from attnkit.reference.analysis import (
    accuracy,
    attention_stats,
    most_attended_positions,
    most_attended_tokens,
)
from attnkit.reference.attention import (
    ScaledDotProductAttention,
    attention_backward,
    attention_forward,
)
from attnkit.reference.block_sparse import BlockLayout, block_layout
from attnkit.reference.checking import GradcheckError, gradcheck, module_gradcheck
from attnkit.reference.chunked import (
    ChunkedAttention,
    chunked_attention_backward,
    chunked_attention_forward,
)
from attnkit.reference.encoder import TransformerEncoder, TransformerEncoderLayer
from attnkit.reference.functional import causal, from_lengths, safe_softmax
from attnkit.reference.io import load_model, load_weights, save_model, save_weights
from attnkit.reference.layers import (
    GELU,
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    ReLU,
    SinusoidalPositionalEncoding,
    Softmax,
)
from attnkit.reference.linear_attention import LinearAttention
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.models import (
    ClassifierConfig,
    DocumentClassifier,
    TransformerClassifier,
    build_model,
)
from attnkit.reference.module import Module, ModuleList
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.optim import SGD, Adam, AdamW, clip_grad_norm
from attnkit.reference.pooling import AttentionPooling, MeanPooling
from attnkit.reference.relative import RelativePositionAttention
from attnkit.reference.text import Vocabulary, pad_batch
from attnkit.reference.trainer import History, Trainer, predict

__all__ = [
    "Adam", "AdamW", "AttentionPooling", "BlockLayout", "ChunkedAttention", "ClassifierConfig", "DocumentClassifier",
    "Dropout", "Embedding", "FeedForward", "GELU", "GradcheckError", "History", "LayerNorm", "Linear",
    "LinearAttention", "MeanPooling", "Module", "ModuleList", "MultiHeadAttention", "ReLU",
    "RelativePositionAttention", "SGD", "ScaledDotProductAttention", "SinusoidalPositionalEncoding",
    "Softmax", "SoftmaxCrossEntropy", "Trainer", "TransformerClassifier", "TransformerEncoder",
    "TransformerEncoderLayer", "Vocabulary", "accuracy", "attention_backward", "attention_forward",
    "attention_stats", "block_layout", "build_model", "causal", "chunked_attention_backward",
    "chunked_attention_forward", "clip_grad_norm", "gradcheck", "from_lengths", "load_model",
    "load_weights", "module_gradcheck", "most_attended_positions", "most_attended_tokens",
    "pad_batch", "predict", "safe_softmax", "save_model", "save_weights",
]
