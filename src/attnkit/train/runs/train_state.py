"""Resumable training state: last and best weights, optimizer moments, RNG states, progress.

Written into a generation's ``train_state/`` folder as safetensors plus one
``state.json`` (never pickled); read back whole by :func:`load_train_state`,
which names any damaged file.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnkit.train.runs.digests import RunIntegrityError
from attnkit.train.runs.fileops import RunFileError, atomic_write_json, read_json
from attnkit.train.runs.rundir import RESUME_ONLY, committed_dir, verify_committed
from attnkit.train.runs.tensors import load_tensors, save_tensors

__all__ = ["STATE_DIR", "STATE_FILES", "optimizer_to_tensors", "optimizer_from_tensors", "capture_rng",
           "restore_rng", "save_train_state", "load_train_state"]

STATE_DIR = RESUME_ONLY.rstrip("/")  # the part of a generation that only resuming reads (and verifies)
STATE_FILES = ("state.json", "last.safetensors", "best.safetensors", "optimizer.safetensors",
               "rng.safetensors")


def optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimizer's state_dict into safetensors-ready tensors and a JSON-ready rest."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                           rest: dict[str, Any]) -> None:
    """Inverse of :func:`optimizer_to_tensors`: load the state into ``optimizer``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, entry in rest.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(entry)
    optimizer.load_state_dict({"state": state, "param_groups": rest["param_groups"]})


def capture_rng() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The torch (CPU and CUDA), NumPy and Python RNG states, as tensors plus JSON."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)
    rest = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    return tensors, rest


def restore_rng(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng`."""
    torch.set_rng_state(tensors["torch"].to(torch.uint8))
    cuda = [tensors[f"cuda.{i}"] for i in range(len(tensors)) if f"cuda.{i}" in tensors]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = rest["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = rest["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_train_state(folder: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write resumable training state under ``folder/train_state`` (a staging folder).

    ``state`` holds ``model`` (state dict of the last weights), ``best``
    (state dict or None), ``optimizer`` (an optimizer), and JSON-ready
    ``progress`` (epoch, step, counters, history).
    """
    path = Path(folder) / STATE_DIR
    path.mkdir(parents=True, exist_ok=True)
    save_tensors(path / "last.safetensors", state["model"])
    if state.get("best") is not None:
        save_tensors(path / "best.safetensors", state["best"])
    opt_tensors, opt_rest = optimizer_to_tensors(state["optimizer"])
    save_tensors(path / "optimizer.safetensors", opt_tensors)
    rng_tensors, rng_rest = capture_rng()
    save_tensors(path / "rng.safetensors", rng_tensors)
    progress = dict(state["progress"], optimizer=opt_rest, rng=rng_rest)
    atomic_write_json(path / "state.json", progress)


def load_train_state(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Read the committed train state of run ``directory`` (``None`` when it has none).

    Returns ``model`` and ``best`` state dicts, ``optimizer`` (tensors, rest),
    ``rng`` (tensors, rest) and ``progress``; the caller applies them. A
    damaged file raises :class:`RunFileError` naming it.
    """
    try:
        folder = committed_dir(directory)
    except RunIntegrityError:
        raise
    except RunFileError:
        return None
    verify_committed(directory, under=RESUME_ONLY)
    path = folder / STATE_DIR
    if not (path / "state.json").is_file():
        return None
    progress = read_json(path / "state.json")
    try:
        optimizer_rest, rng_rest = progress.pop("optimizer"), progress.pop("rng")
        int(progress["epoch"]), int(progress["step"])
    except (AttributeError, KeyError, TypeError, ValueError):
        raise RunFileError(f"{path / 'state.json'} is not a train state written by attnkit") from None
    best = path / "best.safetensors"
    return {
        "model": load_tensors(path / "last.safetensors"),
        "best": load_tensors(best) if best.is_file() else None,
        "optimizer": (load_tensors(path / "optimizer.safetensors"), optimizer_rest),
        "rng": (load_tensors(path / "rng.safetensors"), rng_rest),
        "progress": progress,
    }
