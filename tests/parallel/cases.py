"""The mask families context parallelism must get exactly right, each against single-process attention.

Every process builds the same full-length inputs from one seed, runs
:func:`attnkit.parallel.ring_attention` on its slice and :func:`attnkit.attention`
on the whole sequence, and reports the largest difference of its output and
q/k/v gradient slices, and the bytes it sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import attnkit.parallel.blocks as blocks_module
from attnkit import attention, masks
from attnkit.core.block_mask import BlockMask, and_mods, causal_mod, create_block_mask, document_mod, sliding_window_mod
from attnkit.core.kernels.dense import safe_softmax
from attnkit.core.score_mods import alibi_mod, soft_cap_mod
from attnkit.parallel import comm_stats, reset_comm_stats, ring_attention, shard_sequence

T = 32


def _inputs(b: int, h: int, hkv: int, dtype: torch.dtype, t: int = T, dv: int = 8) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    q = torch.randn(b, h, t, 8, generator=g, dtype=dtype)
    k = torch.randn(b, hkv, t, 8, generator=g, dtype=dtype)
    v = torch.randn(b, hkv, t, dv, generator=g, dtype=dtype)
    w = torch.randn(b, h, t, dv, generator=g, dtype=dtype)
    return q, k, v, w


def _docs(t: int) -> torch.Tensor:
    ids = torch.zeros(t, dtype=torch.long)
    for start, doc in ((5, 1), (13, 2), (22, 3), (29, -1)):  # 29.. padding: rows with no key
        ids[start:] = doc
    return ids


def _dense(t: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    m = torch.rand(2, 1, t, t, generator=g) < 0.3
    m[:, :, 3] = False  # a query row with no key
    return m


READABLE, VALUE_WIDTH = "readable", "value_width"  # options of a case, not of attention

# name -> (B, H, Hkv, kwargs of ring_attention and attention, given T)
CASES: dict[str, Callable[[int], tuple[int, int, int, dict[str, Any]]]] = {
    "full": lambda t: (2, 2, 2, {}),
    "causal": lambda t: (2, 2, 2, {"causal": True}),
    "padding": lambda t: (2, 2, 2, {"mask": torch.tensor([t - 3, t // 3])}),
    "dense": lambda t: (2, 2, 2, {"mask": _dense(t)}),
    "window": lambda t: (2, 2, 2, {"mask": create_block_mask(sliding_window_mod(3), None, None, t, t,
                                                              block_size=4)}),
    "window_causal": lambda t: (2, 2, 2, {**CASES["window"](t)[3], "causal": True}),  # the pairs both allow
    "documents": lambda t: (2, 2, 2, {"mask": create_block_mask(and_mods(causal_mod, document_mod(_docs(t))),
                                                                 None, None, t, t, block_size=4)}),
    "alibi": lambda t: (2, 4, 4, {"causal": True, "score_mod": alibi_mod(4)}),
    "soft_cap": lambda t: (1, 2, 2, {"mask": masks.AttentionMask(_dense(t)[:1]), "score_mod": soft_cap_mod(2.0),
                                     "scale": 0.7}),
    "gqa": lambda t: (2, 4, 2, {"causal": True}),
    "gqa_window": lambda t: (1, 4, 1, {"mask": create_block_mask(sliding_window_mod(5), None, 4, t, t,
                                                                  block_size=8)}),
    # the readable block formula (torch's CPU flash kernel turned off, or a value width it does not take)
    "causal_readable": lambda t: (2, 2, 2, {"causal": True, READABLE: True}),
    "documents_readable": lambda t: (2, 2, 2, {**CASES["documents"](t)[3], READABLE: True}),
    "gqa_window_readable": lambda t: (1, 4, 1, {**CASES["gqa_window"](t)[3], READABLE: True}),
    "value_width": lambda t: (2, 4, 2, {"mask": _dense(t), "causal": True, VALUE_WIDTH: 6}),
}


def readable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Any = None, causal: bool = False,
             scale: float | None = None, score_mod: Any = None) -> torch.Tensor:
    """The formula in the inputs' own dtype, score_mod included: the float64 reference."""
    b, h, t, dh = q.shape
    allowed = masks.read_mask(mask, (b, h, t, t))
    allowed = allowed.to_dense() if isinstance(allowed, BlockMask) else allowed
    if causal:
        allowed = masks.combine(allowed, masks.causal(t, t))
    kk, vv = (x.repeat_interleave(h // x.shape[1], dim=1) for x in (k, v))
    s = q @ kk.transpose(-1, -2) * (scale if scale is not None else dh ** -0.5)
    if score_mod is not None:
        idx = (torch.arange(b).view(b, 1, 1, 1), torch.arange(h).view(1, h, 1, 1), torch.arange(t).view(1, 1, t, 1),
               torch.arange(t).view(1, 1, 1, t))
        s = score_mod(s, *idx).to(q.dtype)
    return safe_softmax(s, allowed) @ vv


def run_case(name: str, layout: str, dtype: torch.dtype, t: int = T) -> dict[str, float]:
    """Largest differences (output, dq, dk, dv) to single-process attention, and the bytes sent."""
    b, h, hkv, kwargs = CASES[name](t)
    no_kernel = bool(kwargs.pop(READABLE, False))
    q, k, v, w = _inputs(b, h, hkv, dtype, t, dv=int(kwargs.pop(VALUE_WIDTH, 8)))
    full = [x.clone().requires_grad_() for x in (q, k, v)]
    # float64: the formula itself (the core's score-mod paths round scores to float32, and its
    # block-sparse runs kernel takes no float64 backward yet); float32: attnkit.attention
    ref = readable(*full, **kwargs) if dtype == torch.float64 else attention(*full, **kwargs)
    (ref * w).sum().backward()
    local = [shard_sequence(x, 2, layout=layout).detach().requires_grad_() for x in (q, k, v)]  # type: ignore[arg-type]
    reset_comm_stats()
    blocks_module.FUSED = not no_kernel
    try:
        out = ring_attention(*local, layout=layout, timeout=30, **kwargs)  # type: ignore[arg-type]
        (out * shard_sequence(w, 2, layout=layout)).sum().backward()  # type: ignore[arg-type]
    finally:
        blocks_module.FUSED = True
    stats = comm_stats()
    found = {"out": (out - shard_sequence(ref, 2, layout=layout)).abs().max().item()}  # type: ignore[arg-type]
    for n, x, loc in zip("qkv", full, local, strict=True):
        assert x.grad is not None and loc.grad is not None
        found["d" + n] = (loc.grad - shard_sequence(x.grad, 2, layout=layout)).abs().max().item()  # type: ignore[arg-type]
    found["out_nan"] = float(torch.isnan(out).any())
    found["forward_bytes"] = stats.sent.get("forward", 0)
    found["backward_bytes"] = stats.sent.get("backward", 0)
    return found


def exactness_worker(rank: int, world: int, runs: list[tuple[str, str, str]]) -> dict[str, dict[str, float]]:
    """Each ``(case, layout, dtype)`` of ``runs``, keyed ``case/layout/dtype``."""
    return {f"{c}/{lay}/{dt}": run_case(c, lay, getattr(torch, dt)) for c, lay, dt in runs}
