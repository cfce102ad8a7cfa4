"""The one dispatcher of :func:`attnkit.attention`: :func:`plan` picks a kernel and says why, :func:`run` runs it.

The plan is a :class:`BackendChoice`: ``name`` (``"fused"``, ``"math"`` or
``"block-sparse"``, the family users see), ``reason``, ``route`` (which kernel
of :mod:`attnkit.core.kernels` runs) and, on request, the kernel torch
picks inside its fused function. The choice, in order:

* a :class:`~attnkit.core.block_mask.BlockMask` (unless ``backend="math"``):
  contiguous key runs as views (``runs``), a ``score_mod`` in query tiles
  (``tiles``), else the gathered blocks (``gather``);
* a ``score_mod`` without a BlockMask: query tiles over every key when there is
  no mask, bias or causal flag, else the readable path with the full scores
  (``score-mod-math``);
* otherwise torch's fused kernel (``sdpa``), or the readable formula (``math``)
  when asked for with ``backend="math"``, when weights are asked for inside
  :func:`weights_in_graph` (the output is then computed from them, so
  gradients reach them), or for bfloat16 on the CPU with gradients and at most
  :data:`CPU_BF16_MATH_KEYS` keys (faster there than torch's flash backward).

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width, Dv value head width.
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from attnkit.core.block_mask import BlockMask, with_causal
from attnkit.core.kernels import dense, gather, runs, tiles
from attnkit.core.types import ScoreMod

__all__ = ["BackendChoice", "MaskArg", "Backend", "CPU_BF16_MATH_KEYS", "plan", "run", "choose_backend",
           "last_backend", "remember", "weights_in_graph", "weights_kept_for_gradients"]

MaskArg = Tensor | BlockMask | None
"""What ``attention(mask=...)`` takes: a bool tensor, a BlockMask or ``None``."""
Backend = Literal["auto", "fused", "math"]
"""What ``attention(backend=...)`` takes."""
Route = Literal["sdpa", "math", "score-mod-math", "runs", "tiles", "gather"]
_last = threading.local()
_graph_weights: contextvars.ContextVar[bool] = contextvars.ContextVar("attnkit_weights_in_graph", default=False)


@contextmanager
def weights_in_graph() -> Iterator[None]:
    """Inside, attention asked for its weights computes its output from them, so gradients reach them.

    The fused path computes the weights beside the output (no gradient
    reaches them); relevance by gradients through the weights (Chefer et al.,
    2021) needs the readable path. The setting is a context variable: it holds
    for the calls of this thread (or asyncio task) only, so another thread
    running the same model meanwhile keeps its own path. Calls that do not ask
    for weights, or ask for ``backend="fused"``, are unchanged.
    """
    token = _graph_weights.set(True)
    try:
        yield
    finally:
        _graph_weights.reset(token)


def weights_kept_for_gradients() -> bool:
    """Whether this call runs inside :func:`weights_in_graph` (never inside a compiled graph)."""
    return not torch.compiler.is_compiling() and _graph_weights.get()


@dataclass(frozen=True)
class BackendChoice:
    """Which path computes attention, and why: the plan :func:`plan` makes and :func:`run` follows.

    ``name`` is ``"fused"``, ``"math"`` or ``"block-sparse"``; ``reason`` says why
    this path runs; ``route`` names the kernel of :mod:`attnkit.core.kernels`
    (``"sdpa"``, ``"math"``, ``"score-mod-math"``, ``"runs"``, ``"tiles"``,
    ``"gather"``); ``kernel`` names the kernel torch picked inside the fused path
    (``"FLASH_ATTENTION"``, ``"EFFICIENT_ATTENTION"``, ``"MATH"``...) when asked
    and torch can tell.
    """

    name: Literal["fused", "math", "block-sparse"]
    reason: str
    kernel: str | None = None
    route: Route = "sdpa"


def last_backend() -> BackendChoice | None:
    """The :class:`BackendChoice` of the most recent :func:`attnkit.attention` call in this thread."""
    return getattr(_last, "choice", None)


def remember(choice: BackendChoice) -> None:
    """Keep ``choice`` for :func:`last_backend` (not inside a compiled graph)."""
    if not torch.compiler.is_compiling():  # a thread-local write breaks a compiled graph
        _last.choice = choice


def _tiles_apply(q: Tensor, score_mod: ScoreMod | None, dropout: float, return_weights: bool) -> bool:
    """Whether a score_mod call runs in query tiles (:mod:`attnkit.core.kernels.tiles`).

    Not with dropout or weights asked for, nor when the score_mod mixes in a
    tensor that needs a gradient: those take the blocks through autograd. Nor
    in a compiled graph: the tiles' custom backward is eager code, and the
    compiler fuses the autograd path's score_mod itself.
    """
    return (score_mod is not None and dropout == 0.0 and not return_weights
            and not torch.compiler.is_compiling()
            and not tiles.captures_gradients(score_mod, q.device))


CPU_BF16_MATH_KEYS = 200
"""Up to this many keys, bfloat16 attention that needs gradients runs the readable path on the CPU: torch's
flash kernel is slower there, forward and backward together (measured, 2-core EPYC with AVX-512 BF16,
12 heads of 32: 5.3x at Tk=16, 4.4x at 42, 1.8x at 130, 1.3x at 200; 0.76x at 256, where flash wins)."""


def _short_bf16_training(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether attention on ``q``, ``k``, ``v`` is bfloat16 on the CPU, needs gradients and reads at most
    :data:`CPU_BF16_MATH_KEYS` keys (then the readable path is the faster one)."""
    return (q.device.type == "cpu" and q.dtype == torch.bfloat16 and k.shape[2] <= CPU_BF16_MATH_KEYS
            and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            and not torch.compiler.is_compiling())


def plan(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = None, bias: Tensor | None = None, causal: bool = False,
    dropout: float = 0.0, score_mod: ScoreMod | None = None, return_weights: bool = False,
    backend: Backend = "auto", probe_kernel: bool = False,
) -> BackendChoice:
    """The path :func:`attnkit.attention` takes for these (already checked) arguments, and why.

    ``probe_kernel`` asks torch which fused kernel it would pick (a small cost,
    paid by attention only when debug logging is on).

    Shape:
        as :func:`attnkit.attention`.
    """
    if backend not in ("auto", "fused", "math"):
        raise ValueError(f"backend must be one of 'auto', 'fused', 'math', got {backend!r}")
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be callable, got {type(score_mod).__name__}")
    if isinstance(mask, BlockMask):
        mask.check(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.device)
        if bias is not None:
            raise ValueError("a BlockMask takes no bias=: put the bias into score_mod (score_mods.bias_mod)")
        if backend == "math":
            return BackendChoice("math", "requested with backend='math'", route="score-mod-math")
        why = f"{100 * mask.sparsity():.0f}% of blocks skipped ({mask.counts['partial']} partial)"
        if score_mod is None and dropout == 0.0 and not return_weights and runs.usable(q, k, v, mask):
            return BackendChoice("block-sparse", why + "; contiguous key runs as views", route="runs")
        if _tiles_apply(q, score_mod, dropout, return_weights):
            return BackendChoice("block-sparse", why + "; score_mod in query tiles", route="tiles")
        return BackendChoice("block-sparse", why, route="gather")
    if score_mod is not None:
        if backend == "fused":
            raise ValueError("score_mod needs the readable path or a BlockMask, not backend='fused'")
        if mask is None and bias is None and not causal and backend == "auto" and _tiles_apply(
                q, score_mod, dropout, return_weights):
            return BackendChoice("block-sparse", "score_mod in query tiles over every key (no mask)",
                                 route="tiles")
        why = "requested with backend='math'" if backend == "math" else "score_mod with a dense mask"
        return BackendChoice("math", why, route="score-mod-math")
    if backend == "math":
        return BackendChoice("math", "requested with backend='math'", route="math")
    if return_weights and backend == "auto" and weights_kept_for_gradients():
        return BackendChoice("math", "weights kept for gradients (weights_in_graph)", route="math")
    if backend == "auto" and _short_bf16_training(q, k, v):
        return BackendChoice("math", f"bfloat16 with gradients on the CPU at Tk <= {CPU_BF16_MATH_KEYS}: the "
                                     "readable path is faster than torch's flash backward there", route="math")
    kernel = None
    if probe_kernel:
        tq, tk = q.shape[2], k.shape[2]
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
        is_causal = causal and mask is None and bias is None and tq == tk
        kernel = dense.kernel_name(q, k, v, bias if bias is not None else mask, is_causal, scale,
                                   q.shape[1] != k.shape[1])
    why = "requested with backend='fused'" if backend == "fused" else "arguments allow the fused kernel"
    return BackendChoice("fused", why, kernel)


def run(
    choice: BackendChoice, q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg, bias: Tensor | None,
    causal: bool, dropout: float, scale: float, score_mod: ScoreMod | None, return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """Run the kernel ``choice`` names; ``output``, or ``(output, weights)`` when ``return_weights``.

    Shape:
        as :func:`attnkit.attention`.
    """
    route = choice.route
    if route == "runs":
        assert isinstance(mask, BlockMask)
        return runs.runs_attention(q, k, v, mask, scale=scale)
    if route == "tiles":
        assert mask is None or isinstance(mask, BlockMask)
        return tiles.tiled_attention(q, k, v, mask, scale=scale, score_mod=score_mod)
    if route == "gather":
        assert isinstance(mask, BlockMask)
        out, weights = gather.block_sparse_attention(q, k, v, mask, scale=scale, score_mod=score_mod,
                                                     dropout=dropout, return_weights=return_weights)
        return (out, weights) if weights is not None else out
    dense_mask = mask.to_dense() if isinstance(mask, BlockMask) else mask
    if route == "score-mod-math":
        out, weights = dense.score_mod_attention(q, k, v, dense_mask, bias=bias, causal=causal, scale=scale,
                                                 score_mod=score_mod, dropout=dropout)
        return (out, weights) if return_weights else out
    if route == "math":
        weights = dense.attention_weights(q, k, mask=dense_mask, bias=bias, causal=causal, scale=scale)
        out = dense.math_output(weights, v, dropout)
        return (out, weights) if return_weights else out
    out = dense.fused_output(q, k, v, dense_mask, bias, causal, dropout, scale)
    if not return_weights:
        return out
    return out, dense.attention_weights(q, k, mask=dense_mask, bias=bias, causal=causal, scale=scale)


def choose_backend(
    q: Tensor, k: Tensor, v: Tensor, *, mask: MaskArg = None, bias: Tensor | None = None,
    causal: bool = False, backend: Backend = "auto", probe_kernel: bool = True,
    score_mod: ScoreMod | None = None, dropout: float = 0.0, return_weights: bool = False,
) -> BackendChoice:
    """Say which path :func:`attnkit.attention` takes for these arguments, and why (:func:`plan`).

    The fused path is taken whenever ``backend`` allows it (but for short bfloat16 attention that needs
    gradients on the CPU, :data:`CPU_BF16_MATH_KEYS`); it supports every
    mask, bias, causal setting, grouped-query layout and dtype that attention
    accepts. The readable math path runs when ``backend="math"`` is asked for;
    a BlockMask or a ``score_mod`` takes one of the block-sparse kernels.
    ``probe_kernel`` asks torch which fused kernel it would pick.
    """
    if causal and isinstance(mask, BlockMask):  # as attention folds it: the pairs both allow
        mask, causal = with_causal(mask), False
    return plan(q, k, v, mask=mask, bias=bias, causal=causal, dropout=dropout, score_mod=score_mod,
                return_weights=return_weights, backend=backend, probe_kernel=probe_kernel)
