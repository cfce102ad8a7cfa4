"""Context parallelism: one sequence across processes, exact, with the masks of :func:`attnkit.attention`.

Each process of a ``torch.distributed`` group holds a slice of the sequence
(:func:`shard_sequence`, :func:`gather_sequence`, the ``"balanced"`` and
``"contiguous"`` layouts) and :func:`ring_attention` gives it its rows of the
full attention, forward and backward, while only the key/value pieces the
mask lets it see travel to it. :func:`context_parallel` runs attnkit's own
Transformer stacks that way. :func:`comm_stats` and :func:`bytes_sent` say
what this process sent. See ``docs/context-parallel.md``.

Shape legend: B batch, H heads, Hkv key/value heads, T full length, Tl = T / world, Dh head width.
"""

from __future__ import annotations

from attnkit.parallel.comm import (
    DEFAULT_TIMEOUT_S,
    CommStats,
    ContextParallelError,
    bytes_sent,
    comm_stats,
    reset_comm_stats,
)
from attnkit.parallel.layout import LAYOUTS, Layout, gather_sequence, local_positions, local_runs, shard_sequence
from attnkit.parallel.modules import context_parallel
from attnkit.parallel.ring import ring_attention

__all__ = ["ring_attention", "context_parallel", "shard_sequence", "gather_sequence", "local_positions",
           "local_runs", "Layout", "LAYOUTS", "ContextParallelError", "CommStats", "comm_stats",
           "reset_comm_stats", "bytes_sent", "DEFAULT_TIMEOUT_S"]
