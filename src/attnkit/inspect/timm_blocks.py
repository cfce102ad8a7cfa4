"""Weights of timm's other attention blocks: the map each one puts through its own ``attn_drop``.

timm's attention blocks beyond the standard ``Attention``
(:mod:`attnkit.inspect.timm_attention`) each add their own terms to the
scores: Swin's ``WindowAttention`` (windows, a relative position bias and the
shifted-window mask), BEiT's relative position bias, EVA-02's rotary
positions, CaiT's ``ClassAttn`` (the class token's queries) and
``TalkingHeadAttn`` (heads mixed before and after the softmax), ConViT's
``GPSA`` (content and positional softmaxes mixed by a learned gate) and
``MHSA``, MaxViT's ``AttentionCl`` (block and grid partitions, relative
position bias) and XCiT's ``XCA`` (cross-covariance attention: a channel x
channel map per head, recorded with the role ``"channel"``). All of them
compute the map that multiplies the values on their non-fused path and pass
it through ``self.attn_drop``; that tensor *is* the block's attention, terms
included, so it is read rather than re-derived:

* a block that has no fused path (``TalkingHeadAttn``, ``GPSA``, ``MHSA``, or
  ``fused_attn`` off) is read during its own call, from the input of its
  ``attn_drop``: nothing is computed twice;
* a block whose ``fused_attn`` is on runs its fused kernel as usual; beside
  it, the block's own non-fused path is run on the same input (eval mode,
  no grad) and the input of its ``attn_drop`` kept. That path's output is
  compared with the fused kernel's: a map is recorded only when they agree
  (within 1e-4 of the output's scale), else the call is missed, by name.

The model's output is the one it gives without a capture. A windowed block
(Swin, MaxViT) records one map per window, ``(B * windows, H, N, N)`` in the
block's window order, with its :class:`WindowLayout`; :func:`place_windows`
puts them back on image positions, ``(B, H, HW, HW)``.
"""

from __future__ import annotations

import functools
import inspect as _pyinspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode

__all__ = ["is_timm_block", "channel_block", "eager_probabilities", "drop_inputs", "outputs_agree",
           "WindowLayout", "window_layout", "place_windows", "eval_call"]

_CHANNEL_BLOCKS = ("XCA",)
"""Blocks whose map is channel x channel (cross-covariance attention), not token x token."""


@functools.lru_cache(maxsize=256)
def _drops_its_map(cls: type) -> bool:
    try:
        source = _pyinspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return "self.attn_drop(" in source and "softmax" in source


def is_timm_block(module: nn.Module) -> bool:
    """True for a timm attention block that passes its map through an ``attn_drop`` dropout."""
    cls = type(module)
    return cls.__module__.startswith("timm.") and isinstance(getattr(module, "attn_drop", None), nn.Dropout) \
        and _drops_its_map(cls)  # type: ignore[arg-type]


def channel_block(module: nn.Module) -> bool:
    """Whether the block's map is channel x channel (XCiT's cross-covariance attention)."""
    return type(module).__name__ in _CHANNEL_BLOCKS


def eval_call(module: nn.Module, fn: Any) -> Any:
    """``fn()`` with ``module`` in eval mode and no grad; the modes are put back after."""
    with eval_mode(module), torch.no_grad():
        return fn()


class drop_inputs:  # noqa: N801 - used as a context manager, like torch's own lower-case ones
    """Keep every input of ``module.attn_drop`` while open (``.seen``)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.seen: list[Tensor] = []

    def __enter__(self) -> drop_inputs:
        drop: nn.Module = self.module.attn_drop  # type: ignore[assignment]
        self.handle = drop.register_forward_hook(lambda _m, inp, _o: self.seen.append(inp[0].detach()))
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()

    def single(self) -> Tensor:
        """The one map that went through ``attn_drop`` (a block that passes several is not read)."""
        if len(self.seen) != 1 or self.seen[0].dim() != 4:
            shapes = [tuple(t.shape) for t in self.seen]
            raise ValueError(f"{type(self.module).__name__} passed {shapes} through attn_drop; expected one "
                             "(B, H, Tq, Tk) map")
        return self.seen[0]


def eager_probabilities(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Tensor, Any]:
    """The block's own non-fused map for ``module(*args, **kwargs)``, and that path's output.

    The block is called through its class's ``forward`` (no hooks) with
    ``fused_attn`` off, in eval mode, without grad.

    Shape:
        returns the map ``(B, H, Tq, Tk)`` (``(B, H, C/H, C/H)`` for XCA) and the block's output.
    """
    fused = getattr(module, "fused_attn", None)
    try:
        if fused is not None:
            module.fused_attn = False  # type: ignore[assignment]
        with drop_inputs(module) as seen:
            out = eval_call(module, lambda: type(module).forward(module, *args, **kwargs))
    finally:
        if fused is not None:
            module.fused_attn = fused
    return seen.single(), out


def outputs_agree(ours: Any, theirs: Any) -> float | None:
    """``max |ours - theirs|`` when within 1e-4 of the output's scale (else None: they disagree)."""
    if not (isinstance(ours, Tensor) and isinstance(theirs, Tensor)) or ours.shape != theirs.shape:
        return None
    diff = float((ours.float() - theirs.float()).abs().max()) if ours.numel() else 0.0
    scale = float(theirs.float().abs().max()) if theirs.numel() else 0.0
    return diff if diff <= 1e-4 * (1.0 + scale) else None


@dataclass(frozen=True)
class WindowLayout:
    """Where a windowed block's maps lie on the image.

    Attributes:
        kind: ``"window"`` (Swin, MaxViT's block attention: contiguous windows)
            or ``"grid"`` (MaxViT's grid attention: windows strided over the image).
        image: the feature map's ``(H, W)`` in tokens.
        window: ``(h, w)`` of a window (for ``"grid"``: the grid's size).
        shift: Swin's cyclic shift ``(rows, columns)``, ``(0, 0)`` for none.
    """

    kind: str
    image: tuple[int, int]
    window: tuple[int, int]
    shift: tuple[int, int] = (0, 0)

    def positions(self) -> Tensor:
        """The image position (``row * W + column``) of each window's tokens, -1 for padding.

        Shape:
            returns ``(windows, h * w)``, windows in the block's order.
        """
        (h, w), (wh, ww), (sh, sw) = self.image, self.window, self.shift
        if self.kind == "grid":  # grid_partition: tokens of a window strided by (H / gh, W / gw)
            frame = torch.arange(h * w).view(wh, h // wh, ww, w // ww)
            return frame.permute(1, 3, 0, 2).reshape(-1, wh * ww)
        hp, wp = math.ceil(h / wh) * wh, math.ceil(w / ww) * ww
        r, c = torch.arange(hp), torch.arange(wp)  # the shifted, padded frame the windows cut
        flat = ((r + sh) % h)[:, None] * w + ((c + sw) % w)[None, :]
        flat = flat.masked_fill((r >= h)[:, None] | (c >= w)[None, :], -1)
        return flat.view(hp // wh, wh, wp // ww, ww).permute(0, 2, 1, 3).reshape(-1, wh * ww)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def window_layout(parent: nn.Module, image: tuple[int, int]) -> WindowLayout | None:
    """The layout of the attention inside ``parent`` (a Swin block or a MaxViT partition), or None."""
    if hasattr(parent, "shift_size") and hasattr(parent, "window_size"):  # Swin
        return WindowLayout("window", image, _pair(parent.window_size), _pair(parent.shift_size))
    if hasattr(parent, "partition_size") and hasattr(parent, "partition_block"):  # MaxViT
        kind = "window" if parent.partition_block else "grid"
        return WindowLayout(kind, image, _pair(parent.partition_size))
    return None


def place_windows(weights: Tensor, layout: WindowLayout) -> Tensor:
    """Per-window maps laid on the image: ``out[b, h, p, q]`` is the weight of image position q for p.

    Pairs of positions in different windows are zero; padded tokens are dropped.

    Shape:
        weights ``(B * windows, H, N, N)``; returns ``(B, H, HW, HW)``.
    """
    pos = layout.positions().to(weights.device)  # (nW, N)
    n_win, n = pos.shape
    if weights.dim() != 4 or weights.shape[0] % n_win or weights.shape[-1] != n or weights.shape[-2] != n:
        raise ValueError(f"weights: expected (B * {n_win} windows, H, {n}, {n}) for {layout}, "
                         f"got {tuple(weights.shape)}")
    b, heads = weights.shape[0] // n_win, weights.shape[1]
    hw = layout.image[0] * layout.image[1]
    qi, kj = pos[:, :, None].expand(n_win, n, n), pos[:, None, :].expand(n_win, n, n)
    real = (qi >= 0) & (kj >= 0)
    per = weights.reshape(b, n_win, heads, n, n).permute(0, 2, 1, 3, 4)  # (B, H, nW, N, N)
    out = weights.new_zeros(b, heads, hw, hw)
    out[:, :, qi[real], kj[real]] = per[:, :, real]
    return out
