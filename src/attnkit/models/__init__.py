"""Task models, one file each, each built from one frozen config dataclass.

Text classifiers share one call: ``model(ids (B, T), lengths (B,),
return_weights=False)`` returns logits ``(B, C)``, or ``(logits, weights)``
where ``weights["pooling"]`` is ``(B, T)``: how much each token position
counts for the answer.

========== ===================================== =====================================
name       model                                 config
========== ===================================== =====================================
document   :class:`DocumentClassifier`           :class:`DocumentClassifierConfig`
sentiment  :class:`SentimentClassifier`          :class:`SentimentClassifierConfig`
han        :class:`HierarchicalAttentionNetwork` :class:`HierarchicalAttentionNetworkConfig`
bert       :class:`BertClassifier`               :class:`BertClassifierConfig`
wide       :class:`WideDeepClassifier`           :class:`WideDeepClassifierConfig`
========== ===================================== =====================================

``build_model("document", {"vocab_size": 20000, "num_classes": 2})`` builds one
by name; the config dict is what a checkpoint's ``config.json`` stores.

The other models have calls of their own and are not in the registry; they
are importable from here too, each loaded on first use:

* :class:`BertModel` (:class:`BertConfig`): the BERT encoder, which loads
  Hugging Face checkpoints;
* :class:`Seq2SeqTransformer` (:class:`Seq2SeqConfig`): the encoder-decoder
  Transformer of the translation task;
* :class:`ImageCaptioner` (:class:`CaptionerConfig`): a CNN encoder and an
  LSTM decoder with additive attention, for the captioning task;
* :class:`VisualAttentionClassifier` (:class:`VisualAttentionConfig`): a CNN
  with 2-D self-attention that classifies images.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn

from attnkit._lazy import lazy_exports
from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig
from attnkit.models.config import ModelConfig
from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
from attnkit.models.hierarchical import (
    HierarchicalAttentionNetwork,
    HierarchicalAttentionNetworkConfig,
)
from attnkit.models.sentiment import SentimentClassifier, SentimentClassifierConfig
from attnkit.models.wide import WideDeepClassifier, WideDeepClassifierConfig

__all__ = [
    "MODELS",
    "build_model",
    "config_to_dict",
    "config_from_dict",
    "model_name",
    "ModelConfig",
    "DocumentClassifier",
    "DocumentClassifierConfig",
    "SentimentClassifier",
    "SentimentClassifierConfig",
    "HierarchicalAttentionNetwork",
    "HierarchicalAttentionNetworkConfig",
    "BertClassifier",
    "BertClassifierConfig",
    "WideDeepClassifier",
    "WideDeepClassifierConfig",
    "BertModel",
    "BertConfig",
    "Seq2SeqTransformer",
    "Seq2SeqConfig",
    "ImageCaptioner",
    "CaptionerConfig",
    "VisualAttentionClassifier",
    "VisualAttentionConfig",
]

# Models outside the registry: public name -> module, imported on first use.
_EXPORTS = {
    "BertModel": "attnkit.models.bert",
    "BertConfig": "attnkit.models.bert",
    "Seq2SeqTransformer": "attnkit.models.seq2seq",
    "Seq2SeqConfig": "attnkit.models.seq2seq",
    "ImageCaptioner": "attnkit.models.captioning",
    "CaptionerConfig": "attnkit.models.captioning",
    "VisualAttentionClassifier": "attnkit.models.visual",
    "VisualAttentionConfig": "attnkit.models.visual",
}
__getattr__ = lazy_exports(globals(), _EXPORTS)[0]


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from attnkit.models.bert import BertConfig, BertModel
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
    from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.models.visual import VisualAttentionClassifier, VisualAttentionConfig

MODELS: dict[str, tuple[type[nn.Module], type[ModelConfig]]] = {
    "document": (DocumentClassifier, DocumentClassifierConfig),
    "sentiment": (SentimentClassifier, SentimentClassifierConfig),
    "han": (HierarchicalAttentionNetwork, HierarchicalAttentionNetworkConfig),
    "bert": (BertClassifier, BertClassifierConfig),
    "wide": (WideDeepClassifier, WideDeepClassifierConfig),
}
"""Registered models: name -> (model class, config class), as :func:`build_model` reads them."""


def _entry(name: str) -> tuple[type[nn.Module], type[ModelConfig]]:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; valid names are {sorted(MODELS)}") from None


def config_from_dict(name: str, data: Mapping[str, Any]) -> ModelConfig:
    """The validated config of model ``name`` (unknown name or field -> ValueError listing the valid ones)."""
    return _entry(name)[1].from_dict(data)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """A config as a JSON-ready dict (the inverse of :func:`config_from_dict`)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a model config dataclass, got {type(config).__name__}")
    return config.to_dict()


def build_model(name: str, config_dict: Mapping[str, Any]) -> nn.Module:
    """Build model ``name`` from a config dict."""
    model_cls, _ = _entry(name)
    return model_cls(config_from_dict(name, config_dict))


def model_name(model: nn.Module) -> str:
    """The registered name of ``model``'s class (for checkpoints)."""
    for name, (model_cls, _) in MODELS.items():
        if type(model) is model_cls:
            return name
    raise ValueError(f"{type(model).__name__} is not a registered model; valid names are {sorted(MODELS)}")
