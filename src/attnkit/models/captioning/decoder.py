"""The captioner's decoder: an LSTM that attends over image regions before every word
(Xu et al., 2015, "Show, Attend and Tell")::

    e_ti   = v^T tanh(W_h h_{t-1} + W_a a_i + b)           additive attention
    α_t    = softmax_i(e_t)                                   Σ_i α_ti = 1
    β_t    = σ(f_β(h_{t-1}))                                  gating scalar (paper §4.2.1)
    ẑ_t    = β_t Σ_i α_ti a_i
    h_t, c_t = LSTM([E y_{t-1}; ẑ_t], (h_{t-1}, c_{t-1}))
    p(y_t) = softmax(L_o(E y_{t-1} + L_h h_t + L_z ẑ_t))      deep output (paper eq. 7)

``h_0`` and ``c_0`` come from the mean region through two small layers. With
``attend_with="current_state"`` the LSTM first reads ``[E y_{t-1}; mean_i a_i]``
and attention is queried with ``h_t`` (Lu et al., 2017); see
:class:`~attnkit.models.captioning.config.CaptionerConfig`.

Generation (greedy and beam search) runs through :mod:`attnkit.decoding`,
the one search shared with the translation model; the decoder only supplies
the step function.

Shape legend: B batch, R regions, C region width, Hd LSTM width, A attention
width, V vocabulary, K beam size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.decoding import StepFunction
from attnkit.layers.additive import AdditiveAttention
from attnkit.models.captioning.config import CaptionerConfig
from attnkit.models.captioning.generation import CaptionGenerator, GeneratedCaption

__all__ = ["GeneratedCaption", "SoftAttentionDecoder"]

_DecoderState = tuple[Tensor, Tensor, Tensor, Tensor]  # h (N, Hd), c (N, Hd), features (N, R, C), keys (N, R, A)


class SoftAttentionDecoder(CaptionGenerator, nn.Module):
    """The attending LSTM decoder, as a base class: the image captioner is this decoder with an
    image encoder in front.

    :meth:`build_decoder` registers the layers on the module itself (no
    ``decoder.`` prefix), and a subclass calls it after registering its
    encoder: parameter names and order are those the captioner has always
    had, so saved weights and optimizer states load as they are.

    Shape:
        features ``(B, R, C)`` region vectors; one step reads the previous words ``(B,)``
        and returns logits ``(B, V)`` and weights ``(B, R)``.
    """

    config: CaptionerConfig

    def build_decoder(self, config: CaptionerConfig, feature_dim: int) -> None:
        """Create the embedding, initial-state, attention, gate, LSTM and deep-output layers (and the
        region projection when ``config.region_dim`` asks for one)."""
        feature_dim_in, feature_dim = feature_dim, config.region_dim or feature_dim
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.init_h = nn.Linear(feature_dim, config.hidden_dim)
        self.init_c = nn.Linear(feature_dim, config.hidden_dim)
        self.attention = AdditiveAttention(config.hidden_dim, feature_dim, config.attention_dim)
        self.gate = nn.Linear(config.hidden_dim, 1)  # f_β
        self.lstm = nn.LSTMCell(config.embed_dim + feature_dim, config.hidden_dim)
        self.out_h = nn.Linear(config.hidden_dim, config.embed_dim)  # L_h
        self.out_z = nn.Linear(feature_dim, config.embed_dim)  # L_z
        self.out = nn.Linear(config.embed_dim, config.vocab_size)  # L_o
        self.drop = nn.Dropout(config.dropout)
        if config.region_dim:  # registered last: runs saved without it keep their parameter order
            self.project = nn.Linear(feature_dim_in, config.region_dim)

    def _regions(self, features: Tensor) -> Tensor:
        """The region vectors the decoder reads: the encoder's, or their projection to ``region_dim``."""
        return self.project(features) if self.config.region_dim else features  # (B, R, C')

    def _start(self, features: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mean = features.mean(dim=1)  # (B, C)
        h, c = torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean))  # (B, Hd) each
        return h, c, self.attention.project_keys(features)  # (B, R, A)

    def _step(self, prev: Tensor, h: Tensor, c: Tensor, features: Tensor,
              projected: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One word: attend, gate, update the LSTM, score the vocabulary (order per ``attend_with``).

        Shape:
            prev ``(B,)`` ids; h, c ``(B, Hd)``; returns logits ``(B, V)``,
            weights ``(B, R)``, new h, c.
        """
        emb = self.embed(prev)  # (B, E)
        if self.config.attend_with == "previous_state":
            context, alpha = self.attention(h, features, projected_keys=projected,
                                            return_weights=True)  # (B, C), (B, R)
            z = torch.sigmoid(self.gate(h)) * context if self.config.gate else context  # (B, C): β_t ẑ_t
            h, c = self.lstm(torch.cat([emb, z], dim=-1), (h, c))  # (B, Hd) each
        else:  # "current_state": read the word and the whole image first, then look
            h, c = self.lstm(torch.cat([emb, features.mean(dim=1)], dim=-1), (h, c))  # (B, Hd) each
            context, alpha = self.attention(h, features, projected_keys=projected,
                                            return_weights=True)  # (B, C), (B, R)
            z = torch.sigmoid(self.gate(h)) * context if self.config.gate else context  # (B, C)
        logits = self.out(self.drop(emb + self.out_h(h) + self.out_z(z)))  # (B, V)
        return logits, alpha, h, c

    def _teacher_forced(self, features: Tensor, captions: Tensor, steps: int) -> tuple[Tensor, Tensor]:
        """Step ``t`` reads the true word ``captions[:, t]``; logits ``(B, steps, V)``, weights ``(B, steps, R)``."""
        features = self._regions(features)
        h, c, projected = self._start(features)
        logits, weights = [], []
        for t in range(steps):
            step_logits, alpha, h, c = self._step(captions[:, t], h, c, features, projected)
            logits.append(step_logits)
            weights.append(alpha)
        return torch.stack(logits, dim=1), torch.stack(weights, dim=1)

    # --- generation: the hooks of CaptionGenerator ------------------------------------------------

    def _step_function(self) -> StepFunction[_DecoderState]:
        cfg = self.config
        # <pad> and <bos> are inputs, never outputs; <unk> tells no one anything
        blocked = [cfg.pad_id, cfg.bos_id] + ([] if cfg.unk_id is None else [cfg.unk_id])

        def step(prev: Tensor, state: _DecoderState) -> tuple[Tensor, Tensor, _DecoderState]:
            h, c, features, projected = state
            logits, alpha, h, c = self._step(prev, h, c, features, projected)
            logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
            logp[:, blocked] = float("-inf")
            return logp, alpha, (h, c, features, projected)  # (N, V), (N, R)
        return step

    def _start_state(self, features: Tensor) -> _DecoderState:
        features = self._regions(features)
        h, c, projected = self._start(features)
        return h, c, features, projected
