"""Data-parallel training across processes with ``torch.distributed``.

Launch with ``torchrun --nproc_per_node=2 -m attnkit train ...``: torchrun sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
in each process; :func:`init_distributed` reads them and joins the process
group — ``nccl`` when the processes train on CUDA, ``gloo`` on CPU. The trainer
then wraps the model in ``DistributedDataParallel``: every process holds a full
copy, sees its own share of each epoch's batches, and the gradients are
averaged (all-reduce) in ``backward`` so the copies stay identical.
Only rank 0 writes files and shows progress.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DistInfo", "init_distributed", "shutdown_distributed", "resolve_device", "resolve_precision",
           "all_reduce_sum", "broadcast_object"]


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size``, its GPU index ``local_rank``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(preference: str, info: DistInfo | None = None) -> torch.device:
    """``"auto"`` -> CUDA when available (this process's GPU under torchrun), else CPU."""
    info = info or DistInfo()
    if preference == "cpu" or (preference == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {preference!r} requested but CUDA is not available")
    if preference.startswith("cuda:"):
        return torch.device(preference)
    return torch.device("cuda", info.local_rank if info.enabled else 0)


def resolve_precision(preference: str, device: torch.device) -> str:
    """``TrainConfig.precision`` on ``device``: ``"auto"`` -> ``"bf16"`` where the device multiplies bfloat16
    natively (a CUDA GPU that supports it; a CPU with AVX-512 BF16 or AMX), else ``"fp32"``."""
    if preference != "auto":
        return preference
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    cpu = getattr(torch, "cpu", None)
    native = any(callable(getattr(cpu, name, None)) and getattr(cpu, name)()
                 for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return "bf16" if native else "fp32"


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group torchrun prepared; a no-op ``DistInfo()`` when run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = device != "cpu" and torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, backend=backend)


def shutdown_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers over all processes (returned unchanged when alone)."""
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_object(obj: object, info: DistInfo) -> object:
    """Rank 0's ``obj`` on every process (e.g. a run id)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
