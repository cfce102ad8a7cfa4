"""Named tensors in safetensors files: atomic saves, loads that name a damaged file, strict weight loading."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from attnkit.train.fileops import RunFileError, atomic_write_bytes

__all__ = ["save_tensors", "load_tensors", "load_weights_into", "unwrap"]


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
    """``model.load_state_dict(state)`` with every mismatch (names or shapes) told as one line naming ``source``."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise RunFileError(f"{source} does not fit {what}: missing {missing[:8]}, unexpected {unexpected[:8]}")
    wrong = [f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})" for k, v in own.items()
             if tuple(state[k].shape) != tuple(v.shape)]
    if wrong:
        raise RunFileError(f"{source} does not fit {what}: wrong shape for {', '.join(wrong[:4])}")
    model.load_state_dict(state)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel / DataParallel wrapper (or the model itself)."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model
