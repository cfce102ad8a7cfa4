"""The process group of context parallelism: checks, timed waits, agreement, and the bytes sent.

Every wait on a peer goes through :func:`wait` with a timeout, and every error
torch.distributed raises on the way (a peer that crashed closes its
connection, a peer that stopped answering runs out the clock) becomes a
:class:`ContextParallelError` that names the peer and the step; nothing waits
forever. :func:`agree` is the one collective made before the ring starts: a
small fingerprint of each process's call (shapes, dtype, layout, options, a
hash of the mask), gathered once, so that processes that disagree are told so
by name instead of exchanging tensors that do not fit.

:func:`comm_stats` reports what this process sent and received through
:mod:`attnkit.parallel` (tensors of the ring, forward and backward), for tests
and benchmarks; :func:`reset_comm_stats` starts the count again.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["ContextParallelError", "CommStats", "comm_stats", "reset_comm_stats", "bytes_sent",
           "DEFAULT_TIMEOUT_S", "Group", "resolve_group", "wait", "agree", "fingerprint", "gather_all",
           "lost_peer"]

DEFAULT_TIMEOUT_S = 300.0
"""Seconds a process waits for a peer before :class:`ContextParallelError` (``timeout=`` changes it)."""


class ContextParallelError(RuntimeError):
    """A process group that cannot run context parallelism: none initialised, or a peer lost or silent."""


@dataclass
class CommStats:
    """Bytes and messages this process sent and received, by phase (``"forward"``, ``"backward"``, ``"gather"``)."""

    sent: dict[str, int] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)

    @property
    def bytes_sent(self) -> int:
        return sum(self.sent.values())

    @property
    def bytes_received(self) -> int:
        return sum(self.received.values())


_STATS = CommStats()


def comm_stats() -> CommStats:
    """A copy of what this process sent and received since :func:`reset_comm_stats`."""
    return copy.deepcopy(_STATS)


def reset_comm_stats() -> None:
    """Start the counts of :func:`comm_stats` again from zero."""
    for book in (_STATS.sent, _STATS.received, _STATS.messages):
        book.clear()


def bytes_sent(phase: str | None = None) -> int:
    """Bytes this process sent through :mod:`attnkit.parallel` (in ``phase`` only, when given)."""
    return _STATS.bytes_sent if phase is None else _STATS.sent.get(phase, 0)


def _count(book: dict[str, int], phase: str, n: int) -> None:
    book[phase] = book.get(phase, 0) + n


@dataclass(frozen=True)
class Group:
    """This process's place in the group: ``rank`` of ``world``, the group, and each rank's global rank."""

    rank: int
    world: int
    group: Any
    global_ranks: tuple[int, ...]
    timeout: datetime.timedelta

    def send(self, x: Tensor, to: int, tag: int, phase: str) -> Any:
        """Post an asynchronous send of ``x`` to group rank ``to``; counted in :func:`comm_stats`."""
        x = x.contiguous()
        _count(_STATS.sent, phase, x.numel() * x.element_size())
        _count(_STATS.messages, phase, 1)
        try:
            return x, dist.isend(x, self.global_ranks[to], group=self.group, tag=tag)
        except RuntimeError as e:
            raise lost_peer(self, to, f"sending to rank {to}", e) from e

    def recv(self, x: Tensor, src: int, tag: int, phase: str) -> Any:
        """Post an asynchronous receive into ``x`` from group rank ``src``."""
        _count(_STATS.received, phase, x.numel() * x.element_size())
        try:
            return x, dist.irecv(x, self.global_ranks[src], group=self.group, tag=tag)
        except RuntimeError as e:
            raise lost_peer(self, src, f"receiving from rank {src}", e) from e


def lost_peer(g: Group, peer: int | None, what: str, e: BaseException) -> ContextParallelError:
    who = "a peer" if peer is None else f"rank {peer}"
    return ContextParallelError(
        f"context parallelism lost {who} while {what} (this is rank {g.rank} of {g.world}, "
        f"timeout {g.timeout.total_seconds():g} s): {str(e).splitlines()[0] if str(e) else type(e).__name__}. "
        "A process crashed, stopped calling ring_attention, or called it with other arguments"
    )


def wait(g: Group, posted: tuple[Tensor, Any], peer: int | None, what: str) -> Tensor:
    """Wait for a posted send or receive within the group's timeout; its tensor, or a named error."""
    tensor, work = posted
    try:
        done = work.wait(g.timeout)
    except RuntimeError as e:
        raise lost_peer(g, peer, what, e) from e
    if done is False:
        raise lost_peer(g, peer, what, TimeoutError(f"no answer within {g.timeout.total_seconds():g} s"))
    return tensor


def resolve_group(group: Any, timeout: float | None) -> Group:
    """The group to run on (``None``: the default group), refused by name when torch.distributed is not set up."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    if not (dist.is_available() and dist.is_initialized()):
        raise ContextParallelError(
            "attnkit.parallel needs an initialised torch.distributed process group: call "
            "torch.distributed.init_process_group('gloo') (CPU) or ('nccl') (CUDA) in every process first, "
            "e.g. under torchrun"
        )
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ContextParallelError(f"this process (global rank {dist.get_rank()}) is not a member of group {group!r}")
    ranks = tuple(dist.get_global_rank(group, r) if group is not None else r for r in range(world))
    seconds = DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    return Group(rank, world, group, ranks, datetime.timedelta(seconds=seconds))


def fingerprint(parts: Sequence[object]) -> int:
    """A 63-bit hash of ``parts`` (ints, strings, tensors by their bytes and shapes), equal across processes."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        if isinstance(p, Tensor):
            t = p.detach().to("cpu").contiguous()
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bool else t.numpy().tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return int.from_bytes(h.digest(), "little") >> 1


def gather_all(g: Group, x: Tensor, what: str, phase: str) -> list[Tensor]:
    """Every process's ``x`` (one ``all_gather``), waited for within the timeout; counted under ``phase``."""
    x = x.contiguous()
    every = [torch.empty_like(x) for _ in range(g.world)]
    _count(_STATS.sent, phase, x.numel() * x.element_size() * (g.world - 1))
    _count(_STATS.messages, phase, 1)
    try:
        work = dist.all_gather(every, x, group=g.group, async_op=True)
    except RuntimeError as e:
        raise lost_peer(g, None, what, e) from e
    wait(g, (x, work), None, what)
    return every


def agree(g: Group, fields: dict[str, int], device: torch.device) -> None:
    """Gather each process's ``fields`` (name -> fingerprint) once; ``ValueError`` naming any that differ."""
    mine = torch.tensor(list(fields.values()), dtype=torch.int64, device=device)
    every = gather_all(g, mine, "agreeing on the arguments (the first collective of ring_attention)", "agree")
    table = torch.stack(every).cpu()  # (world, fields)
    differ = [name for i, name in enumerate(fields) if bool((table[:, i] != table[0, i]).any())]
    if differ:
        groups: dict[int, list[int]] = {}
        for r in range(g.world):
            groups.setdefault(int(table[r, list(fields).index(differ[0])]), []).append(r)
        raise ValueError(
            f"the processes disagree on {', '.join(differ)} (ranks grouped by their {differ[0]}: "
            f"{sorted(groups.values())}); every process must call ring_attention with the same full-sequence "
            "mask, layout, causal, scale, score_mod, dtype and local shapes"
        )
