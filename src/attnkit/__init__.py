"""attnkit: attention mechanisms, correct, fast and visible.

The core: :func:`attention` (one mask rule, safe numerics, fused when
possible), :mod:`attnkit.masks`, and one ``nn.Module`` per attention variant.
The core lives in the package :mod:`attnkit.core`; ``attnkit.attention`` is
plainly the function.

Names are imported on first use, so ``import attnkit.reference`` (the NumPy
twin) never loads torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnkit._lazy import lazy_exports
from attnkit._version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "attention": "attnkit.core.functional",
    "attention_weights": "attnkit.core.functional",
    "choose_backend": "attnkit.core.dispatch",
    "last_backend": "attnkit.core.dispatch",
    "BackendChoice": "attnkit.core.dispatch",
    "MultiHeadAttention": "attnkit.layers",
    "AdditiveAttention": "attnkit.layers",
    "AttentionPooling": "attnkit.layers",
    "RelativePositionAttention": "attnkit.layers",
    "LinearAttention": "attnkit.layers",
    "SelfAttention2d": "attnkit.layers",
    "BertAttention": "attnkit.layers",
    "KVCache": "attnkit.layers",
    "SinusoidalPositionalEncoding": "attnkit.positional",
    "LearnedPositionalEmbedding": "attnkit.positional",
    "RotaryEmbedding": "attnkit.positional",
    "alibi_bias": "attnkit.positional",
    "FeedForward": "attnkit.blocks",
    "TransformerEncoderLayer": "attnkit.blocks",
    "TransformerEncoder": "attnkit.blocks",
    "TransformerDecoderLayer": "attnkit.blocks",
    "TransformerDecoder": "attnkit.blocks",
    "Seq2SeqTransformer": "attnkit.models.seq2seq",
    "greedy_decode": "attnkit.decoding",
    "beam_search": "attnkit.decoding",
    "Trainer": "attnkit.train",
    "TrainConfig": "attnkit.train",
    "load_run": "attnkit.api",
    "Predictor": "attnkit.api",
    "TextClassifier": "attnkit.estimator",
}
_SUBMODULES = {
    "masks", "functional", "score_mods", "layers", "positional", "blocks", "models", "reference", "data",
    "train", "viz", "decoding", "bench",
}

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])

if TYPE_CHECKING:
    from attnkit import (
        bench,
        blocks,
        data,
        decoding,
        functional,
        layers,
        masks,
        models,
        positional,
        score_mods,
        train,
        viz,
    )
    from attnkit.api import Predictor, load_run
    from attnkit.blocks import (
        FeedForward,
        TransformerDecoder,
        TransformerDecoderLayer,
        TransformerEncoder,
        TransformerEncoderLayer,
    )
    from attnkit.core.dispatch import BackendChoice, choose_backend, last_backend
    from attnkit.core.functional import attention, attention_weights
    from attnkit.decoding import beam_search, greedy_decode
    from attnkit.estimator import TextClassifier
    from attnkit.layers import (
        AdditiveAttention,
        AttentionPooling,
        BertAttention,
        KVCache,
        LinearAttention,
        MultiHeadAttention,
        RelativePositionAttention,
        SelfAttention2d,
    )
    from attnkit.models.seq2seq import Seq2SeqTransformer
    from attnkit.positional import (
        LearnedPositionalEmbedding,
        RotaryEmbedding,
        SinusoidalPositionalEncoding,
        alibi_bias,
    )
    from attnkit.train import TrainConfig, Trainer


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, _SUBMODULES)
