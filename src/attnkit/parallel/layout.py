"""Which positions of the full sequence each process holds: the two layouts, shard and gather.

``"contiguous"`` cuts the sequence of length ``T`` into ``world`` equal slices
in order: rank ``r`` holds ``[r T/world, (r+1) T/world)``. Under a causal mask
the last rank then does ``2 world - 1`` times the work of the first.

``"balanced"`` (the head-tail layout of ring attention's load balancing, as in
Megatron-LM and PyTorch's ``context_parallel``) cuts it into ``2 world`` chunks
and gives rank ``r`` chunks ``r`` and ``2 world - 1 - r``; every rank then has
the same causal work::

    T = 16, world = 2, chunks of 4:   | 0 0 0 0 | 1 1 1 1 | 1 1 1 1 | 0 0 0 0 |
                                        rank 0     rank 1    rank 1    rank 0

A slice is always the concatenation of its chunks, in the order of the
sequence; :func:`local_runs` gives them as ``(start, stop)`` ranges of global
positions and :func:`local_positions` as one tensor (for ``position_ids`` or a
rotary embedding of the local tokens).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from attnkit import _checks
from attnkit.parallel.comm import Group, gather_all, resolve_group

__all__ = ["Layout", "LAYOUTS", "local_runs", "local_positions", "shard_sequence", "gather_sequence"]

Layout = Literal["balanced", "contiguous"]
"""How a sequence is cut between processes: ``"balanced"`` (head and tail chunks) or ``"contiguous"``."""
LAYOUTS: tuple[str, ...] = ("balanced", "contiguous")
"""The layouts, by name."""


def _pieces(layout: str, world: int) -> int:
    return 2 * world if layout == "balanced" else world


def check_length(what: str, length: int, layout: str, world: int) -> int:
    """``length // pieces`` of the layout, or ``ValueError`` when ``length`` does not divide."""
    _checks.one_of("layout", layout, LAYOUTS)
    n = _pieces(layout, world)
    if length <= 0 or length % n:
        rule = f"2 * world = {n} chunks" if layout == "balanced" else f"world = {n} slices"
        raise ValueError(
            f"{what} = {length} does not divide into the {layout!r} layout's {rule} "
            f"(world = {world}); pad the sequence to a multiple of {n}"
        )
    return length // n


def runs_of(rank: int, world: int, length: int, layout: str) -> list[tuple[int, int]]:
    """The ``(start, stop)`` global ranges rank ``rank`` holds of a sequence of ``length``, in order."""
    c = check_length("the sequence length T", length, layout, world)
    if layout == "contiguous":
        return [(rank * c, (rank + 1) * c)]
    head, tail = rank, 2 * world - 1 - rank
    if world == 1:  # both chunks touch: one run
        return [(0, length)]
    return [(head * c, (head + 1) * c), (tail * c, (tail + 1) * c)]


def local_runs(length: int, *, group: Any = None, layout: Layout = "balanced") -> list[tuple[int, int]]:
    """The ranges of global positions this process holds of a sequence of ``length``, in order."""
    g = resolve_group(group, None)
    return runs_of(g.rank, g.world, length, layout)


def local_positions(length: int, *, group: Any = None, layout: Layout = "balanced",
                    device: torch.device | str | None = None) -> Tensor:
    """The global positions of this process's slice of a sequence of ``length`` (for ``position_ids``).

    Shape:
        returns ``(length // world,)`` long.
    """
    runs = local_runs(length, group=group, layout=layout)
    return torch.cat([torch.arange(a, b, device=device) for a, b in runs])


def _dim(x: Tensor, dim: int) -> int:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be an axis of x (shape {tuple(x.shape)}), got {dim!r}")
    return dim % x.dim()


def shard_sequence(x: Tensor, dim: int, *, group: Any = None, layout: Layout = "balanced") -> Tensor:
    """This process's slice of the full-length ``x`` along ``dim`` (differentiable; no communication).

    Every process passes the same full tensor (the same batch, e.g. from the same seed) and keeps
    its own positions; a group of one keeps everything.

    Shape:
        x ``(..., T, ...)`` with ``T`` at ``dim``; returns ``(..., T / world, ...)``.
    """
    d = _dim(x, dim)
    g = resolve_group(group, None)
    runs = runs_of(g.rank, g.world, x.shape[d], layout)
    parts = [x.narrow(d, a, b - a) for a, b in runs]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=d)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, d: int, g: Group, layout: str) -> Tensor:
        ctx.args = (d, g, layout)
        every = gather_all(g, x, "gathering the sequence (gather_sequence)", "gather")
        length = x.shape[d] * g.world
        out = x.new_empty(x.shape[:d] + (length,) + x.shape[d + 1:])
        for r, piece in enumerate(every):
            at = 0
            for a, b in runs_of(r, g.world, length, layout):
                out.narrow(d, a, b - a).copy_(piece.narrow(d, at, b - a))
                at += b - a
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        d, g, layout = ctx.args
        runs = runs_of(g.rank, g.world, grad.shape[d], layout)
        return torch.cat([grad.narrow(d, a, b - a) for a, b in runs], dim=d), None, None, None


def gather_sequence(x_local: Tensor, dim: int, *, group: Any = None, layout: Layout = "balanced",
                    timeout: float | None = None) -> Tensor:
    """The full-length tensor from every process's slice along ``dim``, in the order of the sequence.

    One ``all_gather``, waited for at most ``timeout`` seconds. Differentiable
    for a loss every process computes alike on the gathered tensor: the
    gradient of this process's slice is its own part of the full gradient.

    Shape:
        x_local ``(..., T / world, ...)``; returns ``(..., T, ...)``.
    """
    d = _dim(x_local, dim)
    g = resolve_group(group, timeout)
    check_length("the gathered length T", x_local.shape[d] * g.world, layout, g.world)
    if g.world == 1:
        return x_local
    out: Tensor = _Gather.apply(x_local, d, g, layout)
    return out
