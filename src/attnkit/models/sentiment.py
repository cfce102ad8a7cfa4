"""BiLSTM sentiment classifier with additive attention pooling.

::

    h_t     = [LSTM_fwd(x_1..x_t) ; LSTM_bwd(x_t..x_T)]     (B, T, 2H)   bidirectional LSTM
    u_t     = tanh(W h_t + b)                                additive scoring (Bahdanau et al., 2015)
    alpha_t = softmax_t(u^T u_t)                             over the real tokens
    doc     = sum_t alpha_t h_t                              (B, 2H)
    logits  = W_c doc + b_c                                  (B, C)

The recurrent-encoder-plus-attention design of Yang et al. (2016) and Zhou et
al. (2016, "Attention-Based Bidirectional LSTM Networks for Relation
Classification"), applied to one sequence. The LSTM runs on packed sequences,
so padding never enters the recurrence and the backward direction starts at
each document's own last token; appending ``[PAD]`` leaves the logits unchanged.

Packed rows (``model(ids, segment_ids=...)``, several documents per row) are
unpacked to one document per row before the LSTM (the base class's
:meth:`~attnkit.models.base.TextClassifier.classify_packed`): a recurrence run
along a packed row would carry one document's state into the next, in both
directions, so the LSTM never sees across a document boundary.

Shape legend: B batch, T tokens, E embedding width, H LSTM hidden width, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.core.masks import AttentionMask
from attnkit.layers.pooling import AttentionPooling
from attnkit.models.base import TextClassifier, WeightSelection
from attnkit.models.config import (
    TextClassifierConfig,
    check_fraction,
    check_positive_int,
)

__all__ = ["SentimentClassifierConfig", "SentimentClassifier", "run_packed"]


@dataclass(frozen=True)
class SentimentClassifierConfig(TextClassifierConfig):
    """Configuration of :class:`SentimentClassifier`.

    Attributes:
        vocab_size, num_classes: sizes of the token vocabulary and the label set.
        embed_dim: word embedding width E.
        hidden_size: LSTM hidden width H per direction (the pooled vector is 2H wide).
        num_layers: stacked LSTM layers.
        attention_dim: width of the additive scoring layer.
        dropout: on the embeddings, between LSTM layers and before the classifier.
    """

    embed_dim: int = 128
    hidden_size: int = 128
    num_layers: int = 1
    attention_dim: int = 128
    dropout: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("embed_dim", "hidden_size", "num_layers", "attention_dim"):
            check_positive_int(name, getattr(self, name))
        check_fraction("dropout", self.dropout)


def run_packed(rnn: nn.RNNBase, x: Tensor, lengths: Tensor) -> Tensor:
    """Run a batch-first RNN over the first ``lengths[b]`` steps of each sequence.

    Shape:
        x ``(B, T, E)``, lengths ``(B,)`` all >= 1; returns ``(B, T, hidden * directions)``
        with zeros past each length.
    """
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, _ = rnn(packed)
    padded, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return padded  # (B, T, hidden * directions)


class SentimentClassifier(TextClassifier):
    """Embedding, bidirectional LSTM, additive attention pooling, linear classifier.

    Parameters are named ``embedding.weight``, ``lstm.*``, ``pooling.*`` and
    ``classifier.{weight,bias}``.

    Shape:
        ids ``(B, T)``, lengths ``(B,)``; returns logits ``(B, C)`` and, on
        request, ``{"pooling": (B, T)}``.
    """

    config: SentimentClassifierConfig

    def __init__(self, config: SentimentClassifierConfig) -> None:
        super().__init__()
        if not isinstance(config, SentimentClassifierConfig):
            raise TypeError(f"config must be a SentimentClassifierConfig, got {type(config).__name__}")
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(
            c.embed_dim, c.hidden_size, num_layers=c.num_layers, batch_first=True,
            bidirectional=True, dropout=c.dropout if c.num_layers > 1 else 0.0,
        )
        self.pooling = AttentionPooling(2 * c.hidden_size, hidden_dim=c.attention_dim)
        self.dropout = nn.Dropout(c.dropout)
        self.classifier = nn.Linear(2 * c.hidden_size, c.num_classes)

    def classify(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Logits for a prepared batch and its pooling weights.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``, mask allowed ``(B, 1, 1, T)``; returns ``(B, C)`` and
            ``{"pooling": (B, T)}``.
        """
        x = self.dropout(self.embedding(ids))  # (B, T, E)
        h = run_packed(self.lstm, x, lengths)  # (B, T, 2H)
        doc, pool_w = self.pooling(h, mask=mask, return_weights=True)  # (B, 2H), (B, T)
        return self.classifier(self.dropout(doc)), {"pooling": pool_w}  # (B, C)
