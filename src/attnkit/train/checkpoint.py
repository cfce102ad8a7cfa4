"""Checkpoints and resumable training state, written atomically and never pickled.

A run directory holds::

    config.json        model name and config, train config, data settings, run id, metrics
    model.safetensors  the model's weights
    tokenizer.json     the tokenizer (Hugging Face ``tokenizers`` JSON)
    labels.json        the label vocabulary
    history.jsonl      one JSON line per finished epoch
    train_state/       what exact resumption needs: last and best weights,
                       optimizer moments (safetensors), step, epoch, RNG states,
                       early-stopping counters (state.json)

Every file is written to a temporary name in the same folder and renamed over
the old one (``os.replace``), so an interruption leaves either the old or the
new file, never half of one. A directory that holds a *different* run (another
``run_id``) is never written into unless the caller asks to overwrite it.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save
from torch import nn

from attnkit.train.rundir import (
    RunExistsError,
    _read_json,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_run_dir,
    read_run_config,
)

__all__ = [
    "RunExistsError",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "save_tensors",
    "load_tensors",
    "check_run_dir",
    "clear_run",
    "save_checkpoint",
    "load_checkpoint",
    "read_run_config",
    "load_run_tokenizer",
    "save_train_state",
    "load_train_state",
    "capture_rng",
    "restore_rng",
    "optimizer_to_tensors",
    "optimizer_from_tensors",
    "unwrap",
]

RUN_FILES = ("config.json", "model.safetensors", "tokenizer.json", "labels.json", "history.jsonl",
             "report.txt", "report.html", "metrics.json")
STATE_DIR = "train_state"
STATE_FILES = ("state.json", "last.safetensors", "best.safetensors", "optimizer.safetensors",
               "rng.safetensors")


def save_tensors(path: str | os.PathLike[str], tensors: dict[str, torch.Tensor],
                 metadata: dict[str, str] | None = None) -> None:
    """Save named tensors as safetensors, atomically (tensors are made contiguous, on CPU)."""
    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    atomic_write_bytes(path, save(flat, metadata=metadata))


def load_tensors(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    return load_file(str(path), device=str(device))


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel / DataParallel wrapper (or the model itself)."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


def clear_run(directory: str | os.PathLike[str]) -> None:
    """Delete the files attnkit writes in a run directory (and nothing else)."""
    path = Path(directory)
    for name in RUN_FILES:
        (path / name).unlink(missing_ok=True)
    for name in STATE_FILES:
        (path / STATE_DIR / name).unlink(missing_ok=True)
    state_dir = path / STATE_DIR
    if state_dir.is_dir() and not any(state_dir.iterdir()):
        state_dir.rmdir()


def _config_dict(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    raise TypeError(f"model_config must be a dataclass instance or a dict, got {type(config).__name__}")


def save_checkpoint(
    directory: str | os.PathLike[str],
    model: nn.Module,
    model_name: str,
    model_config: Any,
    tokenizer: Any,
    label_vocab: Any,
    train_state: dict[str, Any] | None = None,
    *,
    run_id: str,
    overwrite: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a loadable checkpoint of ``model`` into ``directory``.

    Args:
        directory: the run directory (created if missing).
        model: the model (a DDP wrapper is unwrapped).
        model_name: its registered name in :data:`attnkit.models.MODELS`.
        model_config: its config dataclass (or the dict of it).
        tokenizer: a ``tokenizers.Tokenizer``.
        label_vocab: an :class:`attnkit.data.batching.LabelVocab`.
        train_state: optional resumable state (see :func:`save_train_state`).
        run_id: identifies the run; writing into a directory that holds a
            different run raises :class:`RunExistsError` unless ``overwrite``.
        extra: more JSON-ready entries for config.json (train config, data
            settings, metrics...).
    """
    path = Path(directory)
    check_run_dir(path, run_id, overwrite=overwrite)
    path.mkdir(parents=True, exist_ok=True)
    inner = unwrap(model)
    save_tensors(path / "model.safetensors", inner.state_dict(), metadata={"format": "pt"})
    atomic_write_text(path / "tokenizer.json", tokenizer.to_str())
    atomic_write_json(path / "labels.json", label_vocab.to_dict())
    if train_state is not None:
        save_train_state(path, train_state)
    config = {"run_id": run_id, "model_name": model_name, "model_config": _config_dict(model_config)}
    try:
        from attnkit import __version__
        config["attnkit_version"] = __version__
    except ImportError:  # pragma: no cover - the package always has a version
        pass
    config.update(extra or {})
    # config.json last: its presence with this run_id marks a complete checkpoint.
    atomic_write_json(path / "config.json", config)
    return path


def load_checkpoint(
    directory: str | os.PathLike[str], *, device: str | torch.device = "cpu"
) -> tuple[nn.Module, Any, Any, dict[str, Any]]:
    """Load ``(model, tokenizer, label_vocab, meta)`` from a run directory.

    ``meta`` is the whole config.json. The model is built from its registered
    name and config, gets its saved weights (every key must match) and is put
    in eval mode.
    """
    from attnkit.data.batching import LabelVocab
    from attnkit.models import build_model

    path = Path(directory)
    meta = read_run_config(path)
    for name in ("model.safetensors", "tokenizer.json", "labels.json"):
        if not (path / name).is_file():
            raise ValueError(f"run directory {path} is incomplete: {name} is missing")
    model = build_model(meta["model_name"], meta["model_config"])
    state = load_tensors(path / "model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path / 'model.safetensors'} does not fit model {meta['model_name']!r}: "
            f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    model.to(device).eval()
    tokenizer = load_run_tokenizer(path, meta)
    label_vocab = LabelVocab.from_dict(_read_json(path / "labels.json"))
    return model, tokenizer, label_vocab, meta


def load_run_tokenizer(directory: str | os.PathLike[str], meta: dict[str, Any]) -> Any:
    """The ``tokenizer.json`` of a run.

    attnkit's own tokenizers must map ``[PAD]`` to 0 and ``[UNK]`` to 1; a
    pretrained BERT vocabulary (model ``"bert"``) keeps its own ids.
    """
    from attnkit.data.tokenization import load_tokenizer

    path = Path(directory) / "tokenizer.json"
    if meta.get("model_name") != "bert":
        return load_tokenizer(path)
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise ValueError(f"{path} is not a valid tokenizer.json ({exc})") from None


# --- resumable state ---------------------------------------------------------------------------


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


def save_train_state(directory: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write resumable training state under ``directory/train_state``.

    ``state`` holds ``model`` (state dict of the last weights), ``best``
    (state dict or None), ``optimizer`` (an optimizer), and JSON-ready
    ``progress`` (epoch, step, counters, history).
    """
    path = Path(directory) / STATE_DIR
    path.mkdir(parents=True, exist_ok=True)
    save_tensors(path / "last.safetensors", state["model"])
    if state.get("best") is not None:
        save_tensors(path / "best.safetensors", state["best"])
    opt_tensors, opt_rest = optimizer_to_tensors(state["optimizer"])
    save_tensors(path / "optimizer.safetensors", opt_tensors)
    rng_tensors, rng_rest = capture_rng()
    save_tensors(path / "rng.safetensors", rng_tensors)
    progress = dict(state["progress"], optimizer=opt_rest, rng=rng_rest)
    # state.json last: it names a complete, consistent set of files.
    atomic_write_json(path / "state.json", progress)


def load_train_state(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Read what :func:`save_train_state` wrote (``None`` when there is no saved state).

    Returns ``model`` and ``best`` state dicts, ``optimizer`` (tensors, rest),
    ``rng`` (tensors, rest) and ``progress``; the caller applies them.
    """
    path = Path(directory) / STATE_DIR
    if not (path / "state.json").is_file():
        return None
    progress = _read_json(path / "state.json")
    best = path / "best.safetensors"
    return {
        "model": load_tensors(path / "last.safetensors"),
        "best": load_tensors(best) if best.is_file() else None,
        "optimizer": (load_tensors(path / "optimizer.safetensors"), progress.pop("optimizer")),
        "rng": (load_tensors(path / "rng.safetensors"), progress.pop("rng")),
        "progress": progress,
    }
