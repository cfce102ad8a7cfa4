"""Named tensors in safetensors files: atomic saves, loads that name a damaged file, strict weight loading
(names, shapes and dtypes)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from attnkit.train.runs.fileops import RunFileError, atomic_write_bytes

__all__ = ["save_tensors", "load_tensors", "load_weights_into", "check_tensors_fit", "unwrap",
           "weights_version"]


def save_tensors(path: str | os.PathLike[str], tensors: dict[str, torch.Tensor],
                 metadata: dict[str, str] | None = None) -> None:
    """Save named tensors as safetensors, atomically (tensors are made contiguous, on CPU)."""
    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    atomic_write_bytes(path, save(flat, metadata=metadata))


def load_tensors(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a :class:`RunFileError` naming the file when it is missing,
    truncated or not safetensors at all (a pickle, say: attnkit never unpickles)."""
    path = Path(path)
    if not path.is_file():
        raise RunFileError(f"{path} is missing")
    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        size = path.stat().st_size
        raise RunFileError(f"{path} is not a readable safetensors file ({size} bytes): "
                           f"{' '.join(str(err).split())}") from None


def load_weights_into(model: nn.Module, state: dict[str, torch.Tensor], source: str | os.PathLike[str],
                      what: str = "the model") -> None:
    """``model.load_state_dict(state)`` with every mismatch (names, shapes or dtypes) told as one line naming
    ``source``."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise RunFileError(f"{source} does not fit {what}: missing {missing[:8]}, unexpected {unexpected[:8]}")
    check_tensors_fit(own, state, source, what)
    model.load_state_dict(state)


def check_tensors_fit(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor], source: str | os.PathLike[str],
                      what: str = "the model") -> None:
    """Refuse the tensors ``state`` read from ``source`` when one that ``own`` (a model's state dict) also
    names has another shape or another dtype: an int64 tensor where the model holds float32 weights is a
    damaged file, never converted and served. One line names ``source`` and the first tensors."""
    common = [k for k in own if k in state]
    wrong = [f"{k} {tuple(state[k].shape)} (expected {tuple(own[k].shape)})" for k in common
             if tuple(state[k].shape) != tuple(own[k].shape)]
    if wrong:
        raise RunFileError(f"{source} does not fit {what}: wrong shape for {', '.join(wrong[:4])}")
    wrong = [f"{k} {_dtype(state[k])} (expected {_dtype(own[k])})" for k in common if state[k].dtype != own[k].dtype]
    if wrong:
        raise RunFileError(f"{source} does not fit {what}: wrong dtype for {', '.join(wrong[:4])}"
                           f"{f' and {len(wrong) - 4} more' if len(wrong) > 4 else ''}")


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel / DataParallel wrapper (or the model itself)."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


def weights_version(model: nn.Module) -> tuple[int, ...]:
    """The version counters of ``model``'s parameters and buffers: an in-place change to any of them (an
    optimizer step, a load, a fold into a layer) moves its counter, so an equal tuple means the same weights."""
    return tuple(t._version for t in (*model.parameters(), *model.buffers()))
