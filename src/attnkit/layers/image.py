"""Self-attention over the positions of a 2-D feature map (SAGAN; Zhang, Goodfellow, Metaxas and
Odena, 2019, "Self-Attention Generative Adversarial Networks").

Convolutions only see a local window; this layer lets every position of a
``(B, C, H, W)`` feature map look at every other. With ``N = H * W``
positions ``x_i`` and three 1x1 convolutions (the paper's f, g, h)::

    query_j = g(x_j) = W_g x_j          (C -> C / reduction)
    key_i   = f(x_i) = W_f x_i          (C -> C / reduction)
    value_i = h(x_i) = W_h x_i          (C -> C)
    beta_ji = softmax_i(query_j . key_i)                 "how much region j looks at i"
    o_j     = sum_i beta_ji value_i
    y_j     = x_j + gamma * o_j,        gamma a learned scalar, initialised to 0

Because ``gamma`` starts at 0 the layer starts as the identity: the network
first relies on local (convolutional) cues and learns to add non-local
evidence. Deviations from the paper, both opt-in: ``num_heads > 1`` splits
the query/key/value channels into heads; ``scaled=True`` divides the scores
by ``sqrt(head width)`` as the Transformer does (the paper uses raw dot
products, the default here). The paper's extra output 1x1 convolution ``v``
is left out: ``h`` maps straight to C channels.

The attention itself runs through :func:`attnkit.attention` (the fused
kernel when possible); asking for the weights computes them beside it.

Shape legend: B batch, C channels, H x W spatial size, N = H * W positions,
Ck = C / reduction query/key channels.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnkit._checks import positive_int
from attnkit.core.functional import attention
from attnkit.core.masks import AttentionMask, MaskLike, as_attention_mask

__all__ = ["SelfAttention2d"]


def _position_mask(mask: MaskLike, b: int, heads: int, h: int, w: int) -> AttentionMask | None:
    """``mask`` read by the rule of every layer for ``(B, heads, N, N)``; a ``(B, H, W)`` position mask first
    becomes the ``(B, 1, 1, N)`` mask of the keys it allows (positions row-major)."""
    n = h * w
    if isinstance(mask, Tensor) and mask.dim() == 3 and mask.shape[1:] == (h, w) and (h, w) != (n, n):
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = position may be attended), got dtype {mask.dtype}")
        if mask.shape[0] not in (1, b):
            raise ValueError(f"mask must be (B, H, W) = {(b, h, w)}, got shape {tuple(mask.shape)}")
        mask = mask.reshape(mask.shape[0], 1, 1, n)  # (B, 1, 1, N)
    return as_attention_mask(mask, (b, heads, n, n), name="SelfAttention2d mask")


class SelfAttention2d(nn.Module):
    """SAGAN self-attention block: ``y = x + gamma * Attention(g(x), f(x), h(x))`` over all positions.

    Args:
        in_channels: channels C of the feature map (kept by the output).
        reduction: query/key channels are ``C // reduction`` (the paper uses 8).
        num_heads: heads; must divide both ``C // reduction`` and ``C``.
        scaled: divide scores by ``sqrt(Ck / num_heads)`` (off in the paper).

    Parameters: ``query_conv`` (g), ``key_conv`` (f), ``value_conv`` (h), all
    1x1 convolutions with bias, and the scalar ``gamma`` of shape ``(1,)``.

    Shape:
        x ``(B, C, H, W)``, the one input; mask ``(B, H, W)`` or ``(B, H*W)`` bool, True
        where a position may be attended to, or any form :func:`attnkit.masks.read_mask`
        reads for ``(B, num_heads, N, N)`` (queries by keys, positions row-major), a
        :class:`~attnkit.core.masks.BlockMask` included. Returns ``(B, C, H, W)`` and, on
        request, weights ``(B, N, N)`` (averaged over heads) or
        ``(B, num_heads, N, N)`` with ``average_heads=False``; row ``j`` holds
        ``beta_j``, the weights of query position ``j = row * W + col``.
    """

    def __init__(
        self, in_channels: int, *, reduction: int = 8, num_heads: int = 1, scaled: bool = False
    ) -> None:
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.reduction = positive_int("reduction", reduction)
        self.num_heads = positive_int("num_heads", num_heads)
        qk = in_channels // reduction
        if qk < 1 or qk % num_heads or in_channels % num_heads:
            raise ValueError(
                f"num_heads={num_heads} must divide in_channels={in_channels} and "
                f"in_channels // reduction = {in_channels} // {reduction} = {qk} (which must be >= 1)"
            )
        if not isinstance(scaled, bool):
            raise TypeError(f"scaled must be a bool, got {type(scaled).__name__}")
        self.qk_channels = qk
        self.scale = (qk // num_heads) ** -0.5 if scaled else 1.0
        self.query_conv = nn.Conv2d(in_channels, qk, kernel_size=1)
        self.key_conv = nn.Conv2d(in_channels, qk, kernel_size=1)
        self.value_conv = nn.Conv2d(in_channels, in_channels, kernel_size=1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def _heads(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        x = x.reshape(b, self.num_heads, c // self.num_heads, h * w)  # (B, heads, c/heads, N)
        return x.transpose(-1, -2)  # (B, heads, N, c/heads)

    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[False] = ...,
        average_heads: bool = ...,
    ) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, mask: MaskLike = ..., return_weights: Literal[True],
        average_heads: bool = ...,
    ) -> tuple[Tensor, Tensor]: ...
    def forward(
        self, x: Tensor, *, mask: MaskLike = None, return_weights: bool = False,
        average_heads: bool = True,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Add ``gamma`` times the attended features to ``x``.

        A query position with no allowed position (mask all False) gets
        ``o_j = 0``, so its output is ``x_j``.

        Shape:
            x ``(B, C, H, W)``; returns ``(B, C, H, W)`` [and weights ``(B, N, N)``,
            or ``(B, num_heads, N, N)`` when ``average_heads=False``].
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must be (B, {self.in_channels}, H, W), got shape {tuple(x.shape)}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
        b, c, h, w = x.shape
        keep = _position_mask(mask, b, self.num_heads, h, w)
        q = self._heads(self.query_conv(x))  # (B, heads, N, Ck/heads)
        k = self._heads(self.key_conv(x))  # (B, heads, N, Ck/heads)
        v = self._heads(self.value_conv(x))  # (B, heads, N, C/heads)
        result = attention(q, k, v, mask=keep, scale=self.scale, return_weights=return_weights)
        out, weights = result if isinstance(result, tuple) else (result, None)
        o = out.transpose(-1, -2).reshape(b, c, h, w)  # (B, C, H, W)
        y = x + self.gamma * o
        if weights is None:
            return y
        return y, (weights.mean(dim=1) if average_heads else weights)  # (B, N, N) or (B, heads, N, N)
