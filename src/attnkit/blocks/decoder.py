"""Transformer decoder layer and stack (Vaswani et al., 2017), with KV-cache decoding.

One layer: causal self-attention, cross-attention over the encoder output
``memory``, then a feed-forward network, each in a residual branch::

    post-norm:  x = LN1(x + Drop(SelfAttn(x)))    x = LN2(x + Drop(CrossAttn(x, m)))    x = LN3(x + Drop(FFN(x)))
    pre-norm:   x = x + Drop(SelfAttn(LN1(x)))    x = x + Drop(CrossAttn(LN2(x), m))    x = x + Drop(FFN(LN3(x)))

as in ``nn.TransformerDecoderLayer`` (norm1 self, norm2 cross, norm3 FFN).

**Incremental decoding.** At step ``t`` only the new position's query is
needed; earlier keys and values live in a :class:`~attnkit.blocks.DecoderCache`.
Causal attention is aligned bottom-right, so the new queries are the last
positions of the cached sequence and see every cached key::

    cache = decoder.init_cache()
    for step in range(max_len):
        x = embed(tokens[:, -1:])                       # (B, 1, D)
        x = positional(x, offset=cache.offset)          # the new token sits at position cache.offset
        h = decoder(x, memory, memory_mask=memory_mask, cache=cache)   # (B, 1, D)
        tokens = torch.cat([tokens, head(h).argmax(-1)], dim=1)

Positions are the caller's business: read ``cache.offset`` *before* the call
(the call appends to the cache) and pass it to the positional encoding, e.g.
``attnkit.positional.SinusoidalPositionalEncoding``'s ``forward(x, offset)``
(rotary encodings take the same ``offset`` in ``rotate``). Several
positions may be fed at once (a prompt), and ``memory`` may be omitted once the
cross-attention caches are filled; ``memory_mask`` must be passed at every step.

Shape legend: B batch, Tq target length, Tk memory length, D model width, H heads.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, overload

from torch import Tensor, nn

from attnkit.blocks.cache import DecoderCache, DecoderLayerCache
from attnkit.blocks.config import (
    LayerSpec,
    TransformerLayerConfig,
    build_layers,
    final_layer_norm,
    resolve_dropouts,
)
from attnkit.blocks.feed_forward import Activation, FeedForward, activation_from_torch
from attnkit.blocks.torch_convert import copy_final_norm, copy_layer_weights
from attnkit.core.masks import AttentionMask, BlockMask, MaskLike
from attnkit.layer_config import check_bool, check_eps
from attnkit.layers.multi_head import MultiHeadAttention, check_sequence

__all__ = ["DecoderWeights", "TransformerDecoderLayer", "TransformerDecoder"]


class DecoderWeights(NamedTuple):
    """Attention weights of one decoder layer.

    Shape:
        self_attn ``(B, H, Tq, Tq_total)`` (``Tq_total`` counts cached positions),
        cross_attn ``(B, H, Tq, Tk)``.
    """

    self_attn: Tensor
    cross_attn: Tensor


class TransformerDecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over ``memory``, feed-forward; each residual.

    Arguments as :class:`~attnkit.blocks.TransformerEncoderLayer`; ``kv_heads``
    applies to both attentions (and shrinks both caches).

    Attributes:
        self_attn: masked self-attention, a :class:`~attnkit.layers.multi_head.MultiHeadAttention`.
        cross_attn: attention over ``memory``, a :class:`~attnkit.layers.multi_head.MultiHeadAttention`.
        ff: the :class:`~attnkit.blocks.FeedForward` network.
        norm1: LayerNorm of the self-attention branch.
        norm2: LayerNorm of the cross-attention branch.
        norm3: LayerNorm of the feed-forward branch.
        dropout1: dropout on the self-attention branch.
        dropout2: dropout on the cross-attention branch.
        dropout3: dropout on the feed-forward branch.

    Shape:
        x ``(B, Tq, D)``, memory ``(B, Tk, D)``; returns ``(B, Tq, D)``.
    """

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, *, dropout: float = 0.0,
        activation: Activation = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5,
        kv_heads: int | None = None, bias: bool = True, attention_dropout: float | None = None,
        activation_dropout: float | None = None,
    ) -> None:
        super().__init__()
        dropout, attn_p, ff_p = resolve_dropouts(dropout, attention_dropout, activation_dropout)
        self.norm_first = check_bool("norm_first", norm_first)
        eps = check_eps(layer_norm_eps)
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, kv_heads=kv_heads, bias=bias, dropout=attn_p)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, kv_heads=kv_heads, bias=bias, dropout=attn_p)
        self.ff = FeedForward(d_model, d_ff, activation=activation, dropout=ff_p, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, config: TransformerLayerConfig) -> TransformerDecoderLayer:
        """Build a layer from a :class:`~attnkit.blocks.TransformerLayerConfig`."""
        return cls(config.d_model, config.num_heads, config.d_ff, **config.kwargs())

    def init_cache(self) -> DecoderLayerCache:
        """An empty cache for incremental decoding with this layer."""
        return DecoderLayerCache()

    @overload
    def forward(
        self, x: Tensor, memory: Tensor | None = ..., *, self_mask: MaskLike = ...,
        memory_mask: MaskLike = ..., self_bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[False] = ..., cache: DecoderLayerCache | None = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, memory: Tensor | None = ..., *, self_mask: MaskLike = ...,
        memory_mask: MaskLike = ..., self_bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[True], cache: DecoderLayerCache | None = ...,
    ) -> tuple[Tensor, DecoderWeights]: ...
    def forward(
        self, x: Tensor, memory: Tensor | None = None, *, self_mask: MaskLike = None,
        memory_mask: MaskLike = None, self_bias: Tensor | None = None, causal: bool = True,
        return_weights: bool = False, cache: DecoderLayerCache | None = None,
    ) -> Tensor | tuple[Tensor, DecoderWeights]:
        """Run the layer.

        Args:
            x: target sequence (the new positions only, when ``cache`` is given).
            memory: encoder output; may be omitted once ``cache.cross_attn`` is filled.
            self_mask: boolean, True where a target position may attend another,
                broadcast to ``(B, H, Tq, Tq_total)``; convert PyTorch's
                ``tgt_key_padding_mask`` with :func:`attnkit.masks.from_key_padding_mask`.
            memory_mask: boolean, True where a target position may attend a memory
                position, broadcast to ``(B, H, Tq, Tk)``; usually the memory's
                padding, ``masks.from_lengths(src_lengths)``. Either mask may be a
                :class:`~attnkit.core.masks.BlockMask` for its ``(B, H, Tq, Tk)``, passed to
                the attention as it is (block-sparse path), and so is the
                :class:`~attnkit.core.masks.AttentionMask` a model builds once
                (``AttentionMask.from_lengths(src_lengths)``); a ``self_mask`` BlockMask
                carries causality itself (``masks.and_mods(masks.causal_mod, ...)``)
                and needs ``causal=False`` and no ``self_bias``.
            self_bias: optional additive bias for self-attention.
            causal: forbid attention to later target positions (bottom-right
                aligned, so it stays right with a cache).
            return_weights: also return :class:`DecoderWeights`.
            cache: per-layer cache, updated in place.

        Shape:
            x ``(B, Tq, D)``, memory ``(B, Tk, D)``; returns ``(B, Tq, D)``.
        """
        check_sequence("x", x, self.d_model)
        check_bool("causal", causal)
        if cache is not None and not isinstance(cache, DecoderLayerCache):
            raise TypeError(f"cache must be a DecoderLayerCache, got {type(cache).__name__}")
        cross_cache = None if cache is None else cache.cross_attn
        if memory is None:
            if cross_cache is None or not cross_cache.filled:
                raise ValueError("memory is required (it may be omitted only once the cross-attention cache is filled)")
        else:
            check_sequence("memory", memory, self.d_model)
            if memory.shape[0] != x.shape[0]:
                raise ValueError(
                    f"memory batch {memory.shape[0]} differs from x batch {x.shape[0]}: "
                    f"x {tuple(x.shape)}, memory {tuple(memory.shape)}"
                )
        self_block = isinstance(self_mask, BlockMask) or (isinstance(self_mask, AttentionMask) and self_mask.is_block)
        if self_block and (causal or self_bias is not None):
            raise ValueError(
                "self_mask is a BlockMask: build causality into it (masks.and_mods(masks.causal_mod, ...)), "
                "pass causal=False (the decoder's default is True) and no self_bias"
            )
        self_cache = None if cache is None else cache.self_attn
        self_kw = dict(mask=self_mask, bias=self_bias, causal=causal, cache=self_cache)
        cross_kw = dict(mask=memory_mask, cache=cross_cache)
        if self.norm_first:
            h, w_self = self._attend(self.self_attn, self.norm1(x), None, return_weights, self_kw)
            x = x + self.dropout1(h)
            h, w_cross = self._attend(self.cross_attn, self.norm2(x), memory, return_weights, cross_kw)
            x = x + self.dropout2(h)
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            h, w_self = self._attend(self.self_attn, x, None, return_weights, self_kw)
            x = self.norm1(x + self.dropout1(h))
            h, w_cross = self._attend(self.cross_attn, x, memory, return_weights, cross_kw)
            x = self.norm2(x + self.dropout2(h))
            x = self.norm3(x + self.dropout3(self.ff(x)))
        if return_weights:
            assert w_self is not None and w_cross is not None
            return x, DecoderWeights(w_self, w_cross)
        return x

    @staticmethod
    def _attend(
        attn: MultiHeadAttention, h: Tensor, memory: Tensor | None, return_weights: bool, kwargs: dict[str, Any],
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention (``memory`` None) or cross-attention, with weights on request."""
        if return_weights:
            out, weights = attn(h, memory, memory, return_weights=True, **kwargs)
            return out, weights
        return attn(h, memory, memory, **kwargs), None

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoderLayer) -> TransformerDecoderLayer:
        """Build an equivalent layer from ``nn.TransformerDecoderLayer``, copying its weights.

        Copies weights, activation, ``norm_first``, epsilon and dropouts, and
        keeps dtype, device and train/eval mode. The result is batch-first.
        Masks translate as: ``tgt_mask`` = square subsequent mask -> ``causal=True``;
        ``tgt_key_padding_mask`` -> ``self_mask=masks.from_key_padding_mask(...)``;
        ``memory_key_padding_mask`` -> ``memory_mask=masks.from_key_padding_mask(...)``.
        """
        if not isinstance(module, nn.TransformerDecoderLayer):
            raise TypeError(f"module must be nn.TransformerDecoderLayer, got {type(module).__name__}")
        self_attn = MultiHeadAttention.from_torch(module.self_attn)
        cross_attn = MultiHeadAttention.from_torch(module.multihead_attn)
        layer = cls(
            self_attn.d_model, self_attn.num_heads, module.linear1.out_features, dropout=module.dropout.p,
            activation=activation_from_torch(module.activation), norm_first=module.norm_first,
            layer_norm_eps=module.norm1.eps, bias=module.linear1.bias is not None,
        )
        layer.self_attn, layer.cross_attn = self_attn, cross_attn
        copy_layer_weights(layer, module)
        return layer


class TransformerDecoder(nn.Module):
    """A stack of :class:`TransformerDecoderLayer` with an optional final LayerNorm.

    Built like :class:`~attnkit.blocks.TransformerEncoder` (from a config, a
    layer to copy, or a factory). Supports incremental decoding through
    :meth:`init_cache` (see the module docstring for the loop and positions).

    Attributes:
        layers: the layers, an ``nn.ModuleList``.
        norm: the final ``nn.LayerNorm``, or ``None``.

    Shape:
        x ``(B, Tq, D)``, memory ``(B, Tk, D)``; returns ``(B, Tq, D)`` and, on
        request, one :class:`DecoderWeights` per layer.
    """

    norm: nn.LayerNorm | None

    def __init__(self, layer: LayerSpec, num_layers: int, *, final_norm: bool | None = None) -> None:
        super().__init__()
        built = build_layers(layer, num_layers, TransformerDecoderLayer, TransformerDecoderLayer.from_config)
        self.layers = nn.ModuleList(built)
        self.norm = final_layer_norm(built[0], final_norm)
        self.d_model = built[0].d_model

    def init_cache(self, *, window: int | None = None, sinks: int = 0) -> DecoderCache:
        """Empty caches for every layer; pass them as ``cache=`` step after step.

        ``window=W`` keeps only the last ``W`` positions (a sliding-window
        cache), ``sinks=S`` the first ``S`` too (StreamingLLM's attention
        sinks); see :mod:`attnkit.blocks.cache`.
        """
        return DecoderCache(len(self.layers), window=window, sinks=sinks)

    @overload
    def forward(
        self, x: Tensor, memory: Tensor | None = ..., *, self_mask: MaskLike = ...,
        memory_mask: MaskLike = ..., self_bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[False] = ..., cache: DecoderCache | None = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, memory: Tensor | None = ..., *, self_mask: MaskLike = ...,
        memory_mask: MaskLike = ..., self_bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[True], cache: DecoderCache | None = ...,
    ) -> tuple[Tensor, list[DecoderWeights]]: ...
    def forward(
        self, x: Tensor, memory: Tensor | None = None, *, self_mask: MaskLike = None,
        memory_mask: MaskLike = None, self_bias: Tensor | None = None, causal: bool = True,
        return_weights: bool = False, cache: DecoderCache | None = None,
    ) -> Tensor | tuple[Tensor, list[DecoderWeights]]:
        """Run every layer; arguments as :meth:`TransformerDecoderLayer.forward`.

        With ``cache`` (from :meth:`init_cache`), ``x`` holds only the new
        positions, which sit at positions ``cache.offset ...`` (read before the call).

        Shape:
            x ``(B, Tq, D)``, memory ``(B, Tk, D)``; returns ``(B, Tq, D)``.
        """
        check_sequence("x", x, self.d_model)
        if cache is not None:
            if not isinstance(cache, DecoderCache):
                raise TypeError(f"cache must be a DecoderCache from init_cache(), got {type(cache).__name__}")
            if len(cache.layers) != len(self.layers):
                raise ValueError(f"cache has {len(cache.layers)} layers, the decoder has {len(self.layers)}")
        all_weights: list[DecoderWeights] = []
        for index, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[index]
            kwargs = dict(self_mask=self_mask, memory_mask=memory_mask, self_bias=self_bias, causal=causal)
            if return_weights:
                x, weights = layer(x, memory, return_weights=True, cache=layer_cache, **kwargs)
                all_weights.append(weights)
            else:
                x = layer(x, memory, cache=layer_cache, **kwargs)
        if self.norm is not None:
            x = self.norm(x)
        return (x, all_weights) if return_weights else x

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoder) -> TransformerDecoder:
        """Build an equivalent stack from ``nn.TransformerDecoder``, copying every layer and the final norm."""
        if not isinstance(module, nn.TransformerDecoder):
            raise TypeError(f"module must be nn.TransformerDecoder, got {type(module).__name__}")
        converted = iter([TransformerDecoderLayer.from_torch(m) for m in module.layers])
        stack = cls(lambda: next(converted), len(module.layers), final_norm=module.norm is not None)
        copy_final_norm(stack.norm, module.norm)
        return stack
