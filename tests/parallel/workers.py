"""What each of two gloo processes runs once for the whole folder (tests/parallel/conftest.py)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from attnkit import attention
from attnkit.parallel import ContextParallelError, gather_sequence, local_positions, ring_attention, shard_sequence
from tests.parallel import cases


def qkv(tl: int, h: int = 2) -> list[torch.Tensor]:
    """Local q, k, v of ``tl`` positions, the same in every process."""
    g = torch.Generator().manual_seed(1)
    return [torch.randn(1, h, tl, 4, generator=g) for _ in range(3)]


def message(fn: Any) -> str:
    """The error ``fn()`` raises, as ``Type: text``, or ``"no error"``."""
    try:
        fn()
    except (ValueError, TypeError, ContextParallelError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def refusals(rank: int, world: int) -> dict[str, Any]:
    """Each bad call's error message (every process makes the same calls)."""
    q, k, v = qkv(8)
    found = {
        "odd length": message(lambda: ring_attention(*qkv(5))),
        "odd Tl, contiguous": message(lambda: ring_attention(*qkv(3), layout="contiguous", timeout=30)),
        "mask shape": message(lambda: ring_attention(q, k, v, mask=torch.ones(8, 8, dtype=torch.bool))),
        "causal differs": message(lambda: ring_attention(q, k, v, causal=rank == 0, timeout=30)),
        "layout differs": message(lambda: ring_attention(
            q, k, v, layout="balanced" if rank else "contiguous", timeout=30)),  # type: ignore[arg-type]
        "mask differs": message(lambda: ring_attention(q, k, v, mask=torch.tensor([16 - rank]), timeout=30)),
        "timeout": message(lambda: ring_attention(q, k, v, timeout=0)),
        "learned score_mod": message(lambda: ring_attention(
            q, k, v, score_mod=lambda s, b, h, i, j: s + table[h], timeout=30)),
    }
    # a group of one runs locally: attnkit.attention itself
    alone = [dist.new_group([r]) for r in range(world)][rank]
    out = ring_attention(q, k, v, causal=True, group=alone)
    found["group of one"] = bool(torch.equal(out, attention(q, k, v, causal=True)))
    return found


table = torch.zeros(2, requires_grad=True)


def round_trip(rank: int, world: int) -> dict[str, Any]:
    """shard -> gather is the identity in both layouts, and gather's gradient is the slice of the full one."""
    found: dict[str, Any] = {}
    x = torch.arange(2 * 16 * 3, dtype=torch.float64).view(2, 16, 3)
    for layout in ("balanced", "contiguous"):
        local = shard_sequence(x, 1, layout=layout)  # type: ignore[arg-type]
        pos = local_positions(16, layout=layout)  # type: ignore[arg-type]
        found[f"{layout}/slice"] = bool(torch.equal(local, x[:, pos]))
        leaf = local.clone().requires_grad_()
        full = gather_sequence(leaf, 1, layout=layout, timeout=30)  # type: ignore[arg-type]
        found[f"{layout}/round_trip"] = bool(torch.equal(full, x))
        (full * torch.arange(16.0, dtype=torch.float64).view(1, 16, 1)).sum().backward()
        assert leaf.grad is not None
        found[f"{layout}/grad"] = bool(torch.equal(leaf.grad, pos.double().view(1, -1, 1).expand_as(leaf)))
    try:
        shard_sequence(torch.zeros(1, 6), 1)
    except ValueError as e:
        found["odd"] = str(e)
    return found


def two_worker(rank: int, world: int, exact: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Exactness of every case, the layouts' round trip, then the refusals (which end with a group of one)."""
    return {"exact": cases.exactness_worker(rank, world, exact), "layout": round_trip(rank, world),
            "refusals": refusals(rank, world)}
