"""Spawn a few gloo processes for the context-parallel tests; each writes what it found to a JSON file."""

from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, out: str, fn: Callable[..., Any], args: tuple[Any, ...],
           abrupt: bool = False) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ATTNKIT_TEST_OUT=out)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        found = fn(rank, world, *args)
        Path(out, f"rank{rank}.json").write_text(json.dumps(found))
        if abrupt:  # a peer is gone and the group broken: leave without tearing it down
            os._exit(0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(fn: Callable[..., Any], world: int, tmp: Path, *args: Any) -> list[Any]:
    """``fn(rank, world, *args)`` in ``world`` gloo processes; the JSON each returned, by rank."""
    mp.spawn(_entry, args=(world, free_port(), str(tmp), fn, args), nprocs=world, join=True)
    return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


def run_rank0(fn: Callable[..., Any], world: int, tmp: Path) -> Any:
    """``fn`` in ``world`` processes that may lose a peer on purpose; what rank 0 returned."""
    mp.spawn(_entry, args=(world, free_port(), str(tmp), fn, (), True), nprocs=world, join=True)
    return json.loads(Path(tmp, "rank0.json").read_text())
