"""Encoder–decoder Transformer for translation (Vaswani et al., 2017, "Attention Is All You Need").

::

    m      = Encoder(Embed_src(x) * sqrt(D) + PE)            (B, Ts, D)  source padding masked
    h      = Decoder(Embed_tgt(y_in) * sqrt(D) + PE, m)      (B, Tt, D)  causal self-attention,
                                                                           cross-attention over m
    logits = h W_out^T                                        (B, Tt, V)

The decoder reads the target shifted right (``y_in = [BOS] y``) and predicts
``y_out = y [EOS]``. Embeddings are scaled by ``sqrt(D)`` as in the paper, so
that with an ``N(0, D^-1/2)`` initialisation they are as large as the
sinusoidal positions they are added to.

Vocabularies and tying (Press & Wolf, 2017):

* ``shared_vocab=True`` — one joint (source + target) vocabulary, one
  embedding table for both sides;
* ``tie_embeddings=True`` — the output projection reuses the target embedding
  matrix (no separate ``V x D`` weight).

Target padding needs no mask: attention is causal, so padding at the end of a
target is only ever seen by later padding, and :meth:`Seq2SeqTransformer.loss`
ignores it. That is also why token-by-token decoding with the KV cache
(:meth:`Seq2SeqTransformer.decode_step`) gives the same logits as one full
:meth:`~Seq2SeqTransformer.forward` pass.

Shape legend: B batch, Ts source length, Tt target length, D model width,
H heads, V target vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.blocks import (
    DecoderCache,
    DecoderWeights,
    TransformerDecoder,
    TransformerEncoder,
    TransformerLayerConfig,
)
from attnkit.core import masks
from attnkit.models.config import (
    ModelConfig,
    check_fraction,
    check_positive_int,
    check_token_batch,
)
from attnkit.positional import SinusoidalPositionalEncoding

__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer", "EncoderOutput", "Seq2SeqWeights"]

DEFAULT_LAYER = TransformerLayerConfig(256, 8, 1024, dropout=0.1, norm_first=True)
"""The layer of a :class:`Seq2SeqConfig` that names none (pre-norm, ReLU)."""


@dataclass(frozen=True)
class Seq2SeqConfig(ModelConfig):
    """Configuration of :class:`Seq2SeqTransformer`.

    Attributes:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (equal when ``shared_vocab``).
        layer: every encoder and decoder layer, a :class:`~attnkit.blocks.TransformerLayerConfig`
            (``d_model``, ``num_heads``, ``d_ff``, ``dropout`` -- also on the embeddings --,
            ``attention_dropout`` and ``activation_dropout``: ``None`` is ``dropout``, 0 for both
            is residual dropout only, as in fairseq, and trains faster on a CPU; ``activation``;
            ``norm_first``: pre-norm, more stable for short warm-ups, or post-norm, the paper's).
            In JSON a nested dict; fields it leaves out keep the default layer's values.
        encoder_layers, decoder_layers: depths of the two stacks.
        shared_vocab: one joint vocabulary and one embedding table for both sides.
        tie_embeddings: the output projection is the target embedding matrix.
        label_smoothing: ``epsilon_ls`` of :meth:`Seq2SeqTransformer.loss` (0.1 in the paper).
        max_len: positions precomputed by the sinusoidal table (longer inputs still work).
        pad_id, bos_id, eos_id: special token ids, shared by both vocabularies.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    layer: TransformerLayerConfig = field(default_factory=lambda: DEFAULT_LAYER)
    encoder_layers: int = 3
    decoder_layers: int = 3
    shared_vocab: bool = False
    tie_embeddings: bool = True
    label_smoothing: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 3

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "encoder_layers", "decoder_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        if not isinstance(self.layer, TransformerLayerConfig):
            raise TypeError(f"layer must be a TransformerLayerConfig, got {type(self.layer).__name__}")
        check_fraction("label_smoothing", self.label_smoothing)
        for name in ("shared_vocab", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        if self.shared_vocab and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"shared_vocab needs src_vocab_size == tgt_vocab_size, got {self.src_vocab_size} "
                f"and {self.tgt_vocab_size}"
            )
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < smallest:
                raise ValueError(f"{name} must be an int in [0, {smallest}), got {value!r}")
        if len({self.pad_id, self.bos_id, self.eos_id}) != 3:
            raise ValueError(
                f"pad_id, bos_id and eos_id must differ, got {self.pad_id}, {self.bos_id}, {self.eos_id}"
            )



class EncoderOutput(NamedTuple):
    """What the decoder needs from the encoder.

    Shape:
        memory ``(B, Ts, D)``; memory_mask the source's key-padding
        :class:`~attnkit.core.masks.AttentionMask`, ``allowed`` ``(B, 1, 1, Ts)``
        True at real source tokens, built once by :meth:`Seq2SeqTransformer.encode`
        and read by every decoder layer at every step.
    """

    memory: Tensor
    memory_mask: masks.AttentionMask

    def index_select(self, index: Tensor) -> EncoderOutput:
        """Keep (or repeat) batch entries ``index`` — beam search expands each source K times.

        Shape:
            index ``(B',)``; returns memory ``(B', Ts, D)``, memory_mask ``(B', 1, 1, Ts)``.
        """
        return EncoderOutput(self.memory.index_select(0, index), self.memory_mask.index_select(index))


class Seq2SeqWeights(NamedTuple):
    """Attention weights of a full forward pass, one tensor per layer, first layer first.

    Shape:
        encoder ``(B, H, Ts, Ts)``; decoder_self ``(B, H, Tt, Tt)``;
        cross ``(B, H, Tt, Ts)`` — the source–target alignments; each row sums
        to 1 over the real source tokens and gives padding exactly 0.
    """

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    cross: list[Tensor]


class Seq2SeqTransformer(nn.Module):
    """Transformer encoder–decoder with incremental (KV-cache) decoding.

    Args:
        config: a :class:`Seq2SeqConfig`.

    Attributes:
        src_embed: the source embedding.
        tgt_embed: the target embedding (the same module as ``src_embed`` when ``shared_vocab``).
        positional: the positional encoding.
        encoder: the :class:`~attnkit.blocks.TransformerEncoder`.
        decoder: the :class:`~attnkit.blocks.TransformerDecoder`.
        out_proj: the output projection (its weight is ``tgt_embed.weight`` when ``tie_embeddings``).

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``, tgt_in_ids ``(B, Tt)``;
        returns logits ``(B, Tt, V)``.
    """

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        if not isinstance(config, Seq2SeqConfig):
            raise TypeError(f"config must be a Seq2SeqConfig, got {type(config).__name__}")
        self.config = config
        d = config.layer.d_model
        self.scale = math.sqrt(d)
        self.src_embed = nn.Embedding(config.src_vocab_size, d, padding_idx=config.pad_id)
        self.tgt_embed = (
            self.src_embed if config.shared_vocab
            else nn.Embedding(config.tgt_vocab_size, d, padding_idx=config.pad_id)
        )
        self.positional = SinusoidalPositionalEncoding(d, config.max_len)
        self.embed_dropout = nn.Dropout(config.layer.dropout)
        self.encoder = TransformerEncoder(config.layer, config.encoder_layers)
        self.decoder = TransformerDecoder(config.layer, config.decoder_layers)
        self.out_proj = nn.Linear(d, config.tgt_vocab_size, bias=False)
        self._init_embeddings()
        if config.tie_embeddings:
            self.out_proj.weight = self.tgt_embed.weight

    def _init_embeddings(self) -> None:
        # N(0, D^-1/2) so that Embed * sqrt(D) has unit scale, like the positions.
        for embed in {id(m): m for m in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(embed.weight, std=self.config.layer.d_model ** -0.5)
            with torch.no_grad():
                embed.weight[self.config.pad_id].zero_()

    # --- weights -------------------------------------------------------------------------------

    def tensors_to_save(self) -> dict[str, Tensor]:
        """The state dict without tied aliases (safetensors stores each tensor once).

        With ``shared_vocab`` the target embedding is the source embedding, and
        with ``tie_embeddings`` the output projection is the target embedding;
        only the first name of each shared tensor is kept.
        """
        seen: set[int] = set()
        out: dict[str, Tensor] = {}
        for name, tensor in self.state_dict().items():
            if tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            out[name] = tensor
        return out

    def load_saved_tensors(self, tensors: dict[str, Tensor]) -> None:
        """Load what :meth:`tensors_to_save` wrote; any other missing or extra key is a ValueError."""
        expected = set(self.tensors_to_save())
        missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        if missing or unexpected:
            raise ValueError(f"weights do not fit this Seq2SeqTransformer: missing {missing}, unexpected {unexpected}")
        self.load_state_dict(tensors, strict=False)

    # --- encoder -------------------------------------------------------------------------------

    @overload
    def encode(self, src_ids: Tensor, src_lengths: Tensor, *,
               return_weights: Literal[False] = ...) -> EncoderOutput: ...
    @overload
    def encode(self, src_ids: Tensor, src_lengths: Tensor, *,
               return_weights: Literal[True]) -> tuple[EncoderOutput, list[Tensor]]: ...
    def encode(
        self, src_ids: Tensor, src_lengths: Tensor, *, return_weights: bool = False,
    ) -> EncoderOutput | tuple[EncoderOutput, list[Tensor]]:
        """Encode a padded source batch.

        Shape:
            src_ids ``(B, Ts)`` (anything past ``src_lengths[b]`` is padding),
            src_lengths ``(B,)`` with ``1 <= src_lengths[b] <= Ts``; returns
            memory ``(B, Ts, D)`` and memory_mask ``(B, 1, 1, Ts)``.
        """
        src_ids, src_lengths = check_token_batch(src_ids, src_lengths, self.config.src_vocab_size)
        src_mask = masks.AttentionMask.from_lengths(src_lengths, src_ids.shape[1])  # (B, 1, 1, Ts)
        # Ids past the length may be anything; make them valid rows before the lookup.
        src_ids = src_ids.masked_fill(~src_mask.key_mask(), self.config.pad_id)
        x = self.embed_dropout(self.positional(self.src_embed(src_ids) * self.scale))  # (B, Ts, D)
        if return_weights:
            memory, weights = self.encoder(x, mask=src_mask, return_weights=True)
            return EncoderOutput(memory, src_mask), weights
        return EncoderOutput(self.encoder(x, mask=src_mask), src_mask)

    # --- decoder -------------------------------------------------------------------------------

    def _check_target(self, tgt_ids: object, batch: int) -> Tensor:
        if not isinstance(tgt_ids, Tensor):
            raise TypeError(f"tgt_ids must be a torch.Tensor, got {type(tgt_ids).__name__}")
        if tgt_ids.dtype.is_floating_point or tgt_ids.dtype == torch.bool or tgt_ids.dim() != 2:
            raise ValueError(f"tgt_ids must be an integer (B, Tt) tensor, got {tgt_ids.dtype} {tuple(tgt_ids.shape)}")
        if tgt_ids.shape[0] != batch or tgt_ids.shape[1] == 0:
            raise ValueError(
                f"tgt_ids must be (B={batch}, Tt >= 1), got shape {tuple(tgt_ids.shape)}"
            )
        v = self.config.tgt_vocab_size
        if int(tgt_ids.min()) < 0 or int(tgt_ids.max()) >= v:
            raise ValueError(f"tgt_ids must lie in [0, tgt_vocab_size={v}), got values from "
                             f"{int(tgt_ids.min())} to {int(tgt_ids.max())}")
        return tgt_ids.long()

    def _embed_target(self, tgt_ids: Tensor, offset: int) -> Tensor:
        x = self.tgt_embed(tgt_ids) * self.scale  # (B, Tt, D)
        return self.embed_dropout(self.positional(x, offset=offset))

    def init_cache(self, *, window: int | None = None, sinks: int = 0) -> DecoderCache:
        """Empty decoder caches for :meth:`decode_step` (one per decoder layer).

        ``window=W`` keeps only the last ``W`` target positions, ``sinks=S`` the
        first ``S`` too (:meth:`attnkit.blocks.TransformerDecoder.init_cache`).
        """
        return self.decoder.init_cache(window=window, sinks=sinks)

    @overload
    def decode_step(self, tgt_ids: Tensor, encoded: EncoderOutput, cache: DecoderCache, *,
                    return_weights: Literal[False] = ...) -> Tensor: ...
    @overload
    def decode_step(self, tgt_ids: Tensor, encoded: EncoderOutput, cache: DecoderCache, *,
                    return_weights: Literal[True]) -> tuple[Tensor, list[DecoderWeights]]: ...
    @overload
    def decode_step(self, tgt_ids: Tensor, encoded: EncoderOutput, cache: DecoderCache, *,
                    return_weights: bool = ...) -> Tensor | tuple[Tensor, list[DecoderWeights]]: ...
    def decode_step(
        self, tgt_ids: Tensor, encoded: EncoderOutput, cache: DecoderCache, *, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, list[DecoderWeights]]:
        """Decode the next target position(s), reusing the cached keys and values.

        The new tokens sit at positions ``cache.offset ...``; the cache grows by
        ``Tnew``. The first call fills the cross-attention caches from
        ``encoded.memory``; later calls only read them, so after a
        ``cache.reorder(index)`` (beam search) ``encoded`` must be reordered too
        (its ``memory_mask`` is used at every step).

        Shape:
            tgt_ids ``(B, Tnew)``; returns logits ``(B, Tnew, V)`` and, on request,
            one :class:`~attnkit.blocks.DecoderWeights` per layer with
            cross ``(B, H, Tnew, Ts)``.
        """
        if not isinstance(encoded, EncoderOutput):
            raise TypeError(f"encoded must be the EncoderOutput of encode(), got {type(encoded).__name__}")
        if not isinstance(cache, DecoderCache):
            raise TypeError(f"cache must be a DecoderCache from init_cache(), got {type(cache).__name__}")
        tgt_ids = self._check_target(tgt_ids, encoded.memory.shape[0])
        offset = cache.offset
        x = self._embed_target(tgt_ids, offset)  # (B, Tnew, D)
        memory = encoded.memory if offset == 0 else None  # cross caches are filled on the first step
        if return_weights:
            h, weights = self.decoder(x, memory, memory_mask=encoded.memory_mask, cache=cache,
                                      return_weights=True)
            return self.out_proj(h), weights  # (B, Tnew, V)
        return self.out_proj(self.decoder(x, memory, memory_mask=encoded.memory_mask, cache=cache))

    # --- full pass -----------------------------------------------------------------------------

    @overload
    def forward(self, src_ids: Tensor, src_lengths: Tensor, tgt_in_ids: Tensor, *,
                return_weights: Literal[False] = ...) -> Tensor: ...
    @overload
    def forward(self, src_ids: Tensor, src_lengths: Tensor, tgt_in_ids: Tensor, *,
                return_weights: Literal[True]) -> tuple[Tensor, Seq2SeqWeights]: ...
    def forward(
        self, src_ids: Tensor, src_lengths: Tensor, tgt_in_ids: Tensor, *, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Seq2SeqWeights]:
        """Teacher-forced logits for every target position.

        Shape:
            src_ids ``(B, Ts)``, src_lengths ``(B,)``, tgt_in_ids ``(B, Tt)``
            (``[BOS] y``, padded); returns logits ``(B, Tt, V)`` and, on request,
            :class:`Seq2SeqWeights` (cross-attention ``(B, H, Tt, Ts)`` per layer).
        """
        if return_weights:
            encoded, enc_weights = self.encode(src_ids, src_lengths, return_weights=True)
        else:
            encoded, enc_weights = self.encode(src_ids, src_lengths), []
        tgt_in_ids = self._check_target(tgt_in_ids, encoded.memory.shape[0])
        x = self._embed_target(tgt_in_ids, 0)  # (B, Tt, D)
        if return_weights:
            h, dec_weights = self.decoder(x, encoded.memory, memory_mask=encoded.memory_mask,
                                          return_weights=True)
            weights = Seq2SeqWeights(enc_weights, [w.self_attn for w in dec_weights],
                                     [w.cross_attn for w in dec_weights])
            return self.out_proj(h), weights
        h = self.decoder(x, encoded.memory, memory_mask=encoded.memory_mask)  # (B, Tt, D)
        return self.out_proj(h)  # (B, Tt, V)

    def loss(self, logits: Tensor, tgt_out_ids: Tensor) -> Tensor:
        """Label-smoothed cross-entropy, averaged over the non-padding target tokens.

        With smoothing ``eps`` the target distribution is ``1 - eps`` on the
        reference token plus ``eps / V`` everywhere (Szegedy et al., 2016; used
        with ``eps = 0.1`` by Vaswani et al.). It hurts perplexity but helps BLEU.

        Shape:
            logits ``(B, Tt, V)``; tgt_out_ids ``(B, Tt)`` (``y [EOS]``, padded
            with ``pad_id``); returns a scalar.
        """
        if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.shape[-1] != self.config.tgt_vocab_size:
            shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(f"logits must be (B, Tt, {self.config.tgt_vocab_size}), got {shape}")
        if not isinstance(tgt_out_ids, Tensor) or tuple(tgt_out_ids.shape) != tuple(logits.shape[:2]):
            shape = tuple(tgt_out_ids.shape) if isinstance(tgt_out_ids, Tensor) else type(tgt_out_ids).__name__
            raise ValueError(f"tgt_out_ids must be (B, Tt) = {tuple(logits.shape[:2])}, got {shape}")
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), tgt_out_ids.reshape(-1).long(),  # (B*Tt, V)
            ignore_index=self.config.pad_id, label_smoothing=self.config.label_smoothing,
        )
