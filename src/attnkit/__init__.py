"""attnkit: attention mechanisms, correct, fast and visible.

The core: :func:`attention` (one mask rule, safe numerics, fused when
possible), :mod:`attnkit.masks`, and one ``nn.Module`` per attention variant.
The core lives in the package ``attnkit.attention``; the name
``attnkit.attention`` stays the function (see ``_Package`` below).

Names are imported on first use, so ``import attnkit.reference`` (the NumPy
twin) never loads torch.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from attnkit._lazy import lazy_exports
from attnkit._version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "attention": "attnkit.attention.functional",
    "attention_weights": "attnkit.attention.functional",
    "choose_backend": "attnkit.attention.dispatch",
    "last_backend": "attnkit.attention.dispatch",
    "BackendChoice": "attnkit.attention.dispatch",
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
    from attnkit.attention.dispatch import BackendChoice, choose_backend, last_backend
    from attnkit.attention.functional import attention, attention_weights
    from attnkit.blocks import (
        FeedForward,
        TransformerDecoder,
        TransformerDecoderLayer,
        TransformerEncoder,
        TransformerEncoderLayer,
    )
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


class _Package(types.ModuleType):
    """attnkit's module type: importing the subpackage ``attnkit.attention`` leaves the name the function.

    Python binds a subpackage as an attribute of its parent once imported; here
    that would replace ``attnkit.attention`` (the function users call) with the
    core's package. The package stays reachable by its modules' full paths
    (``attnkit.attention.masks``...), which go through ``sys.modules``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "attention" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
