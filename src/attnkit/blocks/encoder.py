"""Transformer encoder layer and stack (Vaswani et al., 2017), post-norm or pre-norm.

One layer, in its two orderings (Xiong et al., 2020, "On Layer Normalization
in the Transformer Architecture")::

    post-norm:  x = LN1(x + Drop(SelfAttn(x)))        x = LN2(x + Drop(FFN(x)))
    pre-norm:   x = x + Drop(SelfAttn(LN1(x)))        x = x + Drop(FFN(LN2(x)))

``Drop`` is residual dropout; the attention weights and the FFN's hidden
activations get dropout too. That is exactly where ``nn.TransformerEncoderLayer``
puts its four dropouts, so :meth:`TransformerEncoderLayer.from_torch` reproduces
it in eval mode to rounding error.

A causal encoder stack is a decoder-only (GPT-style) model. It decodes token
by token with :meth:`TransformerEncoder.init_cache`, exactly as
:class:`~attnkit.blocks.TransformerDecoder` does (see :mod:`attnkit.blocks.decoder`
for the loop and for passing ``cache.offset`` to the positional encoding)::

    cache = stack.init_cache()
    h = stack(positional(x_new, offset=cache.offset), causal=True, cache=cache)

Shape legend: B batch, T length, D model width, H heads.
"""

from __future__ import annotations

from typing import Literal, overload

from torch import Tensor, nn

from attnkit.blocks.cache import SelfAttentionCache
from attnkit.blocks.config import (
    LayerSpec,
    TransformerLayerConfig,
    build_layers,
    final_layer_norm,
    resolve_dropouts,
)
from attnkit.blocks.feed_forward import Activation, FeedForward, activation_from_torch
from attnkit.blocks.torch_convert import copy_final_norm, copy_layer_weights
from attnkit.core.masks import MaskLike
from attnkit.layer_config import check_bool, check_eps
from attnkit.layers.kv_cache import KVCache
from attnkit.layers.multi_head import MultiHeadAttention, check_sequence

__all__ = ["TransformerEncoderLayer", "TransformerEncoder"]


class TransformerEncoderLayer(nn.Module):
    """Self-attention then a feed-forward network, each in a residual branch with LayerNorm.

    Args:
        d_model: model width D.
        num_heads: attention heads H.
        d_ff: hidden width of the feed-forward network.
        dropout: used for the attention weights, the FFN hidden activations and
            both residual branches (training mode only).
        activation: FFN activation: a registered name (``"relu"``, ``"gelu"``,
            ``"swiglu"``...) or an ``nn.Module`` class.
        norm_first: pre-norm (True) or post-norm (False, the original Transformer).
        layer_norm_eps: LayerNorm epsilon.
        kv_heads: key/value heads for grouped-query attention (default ``num_heads``).
        bias: biases in every linear map and LayerNorm.
        attention_dropout: dropout on the attention weights instead of
            ``dropout`` (0 lets training keep the fused kernel's speed).
        activation_dropout: dropout on the FFN hidden activations instead of
            ``dropout``. Leaving both at ``None`` gives PyTorch's placement;
            ``0`` for both is the fairseq default (residual dropout only).

    Attributes:
        self_attn (:class:`~attnkit.layers.multi_head.MultiHeadAttention`),
        ff (:class:`~attnkit.blocks.FeedForward`), norm1, norm2, dropout1, dropout2.

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)`` and, on request, weights ``(B, H, T, T)``.
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
        self.ff = FeedForward(d_model, d_ff, activation=activation, dropout=ff_p, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, config: TransformerLayerConfig) -> TransformerEncoderLayer:
        """Build a layer from a :class:`~attnkit.blocks.TransformerLayerConfig`."""
        return cls(config.d_model, config.num_heads, config.d_ff, **config.kwargs())

    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[False] = ..., cache: KVCache | None = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[True], cache: KVCache | None = ...,
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: MaskLike = None, bias: Tensor | None = None, causal: bool = False,
        return_weights: bool = False, cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Run the layer.

        Args:
            x: input sequence.
            mask: boolean, True where a query may attend to a key, broadcast to
                ``(B, H, T, T)``; a PyTorch ``src_key_padding_mask`` goes through
                :func:`attnkit.masks.from_key_padding_mask` first. A
                :class:`~attnkit.core.masks.BlockMask` for ``(B, H, T, T)`` is passed to
                the attention as it is (block-sparse path); ``causal=True`` keeps the pairs
                both allow, a ``bias`` is refused (use a ``score_mod``), and
                padding goes into it too (``masks.and_mods(..., masks.document_mod(ids))``).
                The :class:`~attnkit.core.masks.AttentionMask` a model builds once
                is passed to every layer as it is.
            bias: optional additive attention bias (ALiBi, relative positions).
            causal: forbid attention to later positions.
            return_weights: also return the self-attention weights.
            cache: self-attention keys and values of earlier positions, for
                incremental decoding in decoder-only (causal) models; this
                call's positions are appended to it.

        Shape:
            x ``(B, T, D)``; mask ``(B, 1, 1, T)`` or any shape broadcasting to
            ``(B, H, T, T_total)``; returns ``(B, T, D)`` and weights
            ``(B, H, T, T_total)`` (``T_total = T`` plus cached positions).
        """
        check_sequence("x", x, self.d_model)
        check_bool("causal", causal)
        if cache is not None and (not isinstance(cache, KVCache) or cache.static):
            raise TypeError(f"cache must be a growing (non-static) KVCache, got {cache!r}")
        weights: Tensor | None = None
        if self.norm_first:
            attn, weights = self._attend(self.norm1(x), mask, bias, causal, return_weights, cache)
            x = x + attn
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            attn, weights = self._attend(x, mask, bias, causal, return_weights, cache)
            x = self.norm1(x + attn)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        if return_weights:
            assert weights is not None
            return x, weights
        return x

    def _attend(
        self, h: Tensor, mask: MaskLike, bias: Tensor | None, causal: bool, return_weights: bool,
        cache: KVCache | None,
    ) -> tuple[Tensor, Tensor | None]:
        if return_weights:
            out, weights = self.self_attn(
                h, mask=mask, bias=bias, causal=causal, return_weights=True, cache=cache
            )
            return self.dropout1(out), weights
        return self.dropout1(self.self_attn(h, mask=mask, bias=bias, causal=causal, cache=cache)), None

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
        """Build an equivalent layer from ``nn.TransformerEncoderLayer``, copying its weights.

        Copies the weights, activation, ``norm_first``, LayerNorm epsilon and
        dropout probabilities, and keeps the source's dtype, device and
        train/eval mode. The result is batch-first whatever ``batch_first`` the
        source had, and reads masks by attnkit's rule: pass
        ``mask=masks.from_key_padding_mask(src_key_padding_mask)`` and
        ``causal=True`` where PyTorch gets a square subsequent mask.
        """
        if not isinstance(module, nn.TransformerEncoderLayer):
            raise TypeError(f"module must be nn.TransformerEncoderLayer, got {type(module).__name__}")
        attn = MultiHeadAttention.from_torch(module.self_attn)
        layer = cls(
            attn.d_model, attn.num_heads, module.linear1.out_features, dropout=module.dropout.p,
            activation=activation_from_torch(module.activation), norm_first=module.norm_first,
            layer_norm_eps=module.norm1.eps, bias=module.linear1.bias is not None,
        )
        layer.self_attn = attn  # keeps the source's attention dropout and widths
        copy_layer_weights(layer, module)
        return layer


class TransformerEncoder(nn.Module):
    """A stack of :class:`TransformerEncoderLayer` with an optional final LayerNorm.

    Args:
        layer: a :class:`~attnkit.blocks.TransformerLayerConfig`, a layer to copy
            ``num_layers`` times, or a factory (``lambda: TransformerEncoderLayer(...)``)
            called once per layer.
        num_layers: depth.
        final_norm: add a LayerNorm after the last layer. Default: exactly when
            the layers are pre-norm (their output is otherwise never normalised).

    Attributes:
        layers: the layers, an ``nn.ModuleList``.
        norm: the final ``nn.LayerNorm``, or ``None``.

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)`` and, on request, a list of
        ``num_layers`` weights ``(B, H, T, T)``.
    """

    norm: nn.LayerNorm | None

    def __init__(self, layer: LayerSpec, num_layers: int, *, final_norm: bool | None = None) -> None:
        super().__init__()
        built = build_layers(layer, num_layers, TransformerEncoderLayer, TransformerEncoderLayer.from_config)
        self.layers = nn.ModuleList(built)
        self.norm = final_layer_norm(built[0], final_norm)
        self.d_model = built[0].d_model

    def init_cache(self, *, window: int | None = None, sinks: int = 0) -> SelfAttentionCache:
        """Empty caches for every layer; pass them as ``cache=`` step after step.

        ``window=W`` keeps only the last ``W`` positions (a sliding-window
        cache), ``sinks=S`` the first ``S`` too (StreamingLLM's attention
        sinks); see :mod:`attnkit.blocks.cache`.
        """
        return SelfAttentionCache(len(self.layers), window=window, sinks=sinks)

    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[False] = ..., cache: SelfAttentionCache | None = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., bias: Tensor | None = ..., causal: bool = ...,
        return_weights: Literal[True], cache: SelfAttentionCache | None = ...,
    ) -> tuple[Tensor, list[Tensor]]: ...
    def forward(
        self, x: Tensor, *, mask: MaskLike = None, bias: Tensor | None = None, causal: bool = False,
        return_weights: bool = False, cache: SelfAttentionCache | None = None,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Run every layer with the same mask, bias and causal setting.

        With ``cache`` (from :meth:`init_cache`, decoder-only models with
        ``causal=True``), ``x`` holds only the new positions, which sit at
        positions ``cache.offset ...`` (read it before the call and pass it to
        the positional encoding).

        Shape:
            x ``(B, T, D)``; returns ``(B, T, D)`` and, on request, one
            ``(B, H, T, T_total)`` weight tensor per layer, first layer first.
        """
        check_sequence("x", x, self.d_model)
        if cache is not None:
            if not isinstance(cache, SelfAttentionCache):
                raise TypeError(f"cache must be a SelfAttentionCache from init_cache(), got {type(cache).__name__}")
            if len(cache.layers) != len(self.layers):
                raise ValueError(f"cache has {len(cache.layers)} layers, the encoder has {len(self.layers)}")
        all_weights: list[Tensor] = []
        for index, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[index]
            if return_weights:
                x, weights = layer(x, mask=mask, bias=bias, causal=causal, return_weights=True, cache=layer_cache)
                all_weights.append(weights)
            else:
                x = layer(x, mask=mask, bias=bias, causal=causal, cache=layer_cache)
        if self.norm is not None:
            x = self.norm(x)
        return (x, all_weights) if return_weights else x

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoder) -> TransformerEncoder:
        """Build an equivalent stack from ``nn.TransformerEncoder``, copying every layer and the final norm."""
        if not isinstance(module, nn.TransformerEncoder):
            raise TypeError(f"module must be nn.TransformerEncoder, got {type(module).__name__}")
        converted = iter([TransformerEncoderLayer.from_torch(m) for m in module.layers])
        stack = cls(lambda: next(converted), len(module.layers), final_norm=module.norm is not None)
        copy_final_norm(stack.norm, module.norm)
        return stack
