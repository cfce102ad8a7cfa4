"""Checkpoints and resumable training state, committed as generations and never pickled.

A run directory (see :mod:`attnkit.train.rundir` for the transaction) holds,
in its committed generation ``RUN/checkpoints/NNNNNN/``::

    config.json        model name and config, train config, data settings, run id, status,
                       progress, metrics
    model.safetensors  the weights to serve: the final model, or while training the best so far
    tokenizer.json     the tokenizer (Hugging Face ``tokenizers`` JSON)
    labels.json        the label vocabulary
    history.jsonl      one JSON line per finished epoch
    train_state/       what exact resumption needs: last and best weights,
                       optimizer moments (safetensors), step, epoch, RNG states,
                       early-stopping counters (state.json)

A generation appears whole or not at all; ``status`` in its config.json says
whether training finished, and readers refuse an unfinished run unless asked
(:func:`load_checkpoint` ``allow_unfinished``). A directory that holds a
*different* run (another ``run_id``) is never written into unless the caller
asks to overwrite it, and even then the old run stays until the new one's
first commit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from attnkit.train.rundir import (
    RunExistsError,
    RunFileError,
    RunWriter,
    UnfinishedRunError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_run_dir,
    check_unlocked,
    committed_dir,
    read_json,
    read_run_config,
    remove_legacy_files,
    require_finished,
    run_status,
)

__all__ = [
    "RunExistsError",
    "RunFileError",
    "UnfinishedRunError",
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
    "RunCheckpointer",
    "load_weights_into",
    "RunWriter",
    "committed_dir",
    "check_unlocked",
    "read_json",
    "run_status",
]

STATE_DIR = "train_state"
STATE_FILES = ("state.json", "last.safetensors", "best.safetensors", "optimizer.safetensors",
               "rng.safetensors")
MODEL_FILES = ("tokenizer.json", "labels.json")


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


def clear_run(directory: str | os.PathLike[str]) -> None:
    """Delete the files attnkit writes in a run directory (and nothing else)."""
    from attnkit.train.rundir import GENERATIONS, LOCK, MANIFEST, fs

    path = Path(directory)
    remove_legacy_files(path)
    fs.remove(path / MANIFEST)
    fs.remove_tree(path / GENERATIONS)
    fs.remove(path / LOCK)


def _config_dict(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    raise TypeError(f"model_config must be a dataclass instance or a dict, got {type(config).__name__}")


class RunCheckpointer:
    """Commits the generations of one classification run through an open :class:`RunWriter`.

    Each :meth:`commit` writes a complete generation: ``config.json`` (the
    model's name and config, ``meta``, status and progress), the weights to
    serve, the tokenizer and labels (linked from the previous generation once
    written), ``history.jsonl`` and, when given, the resumable train state.

    Args:
        writer: the run's writer, opened (it holds the lock).
        model_name: the registered model name.
        model_config: its config (a dataclass or dict).
        tokenizer: a ``tokenizers.Tokenizer``.
        label_vocab: a ``LabelVocab``.
        meta: the other entries of config.json (train config, data settings...).
    """

    def __init__(self, writer: RunWriter, model_name: str, model_config: Any, tokenizer: Any,
                 label_vocab: Any, meta: dict[str, Any] | None = None) -> None:
        self.writer = writer
        self.model_name = model_name
        self.model_config = _config_dict(model_config)
        self.tokenizer, self.label_vocab = tokenizer, label_vocab
        self.meta = dict(meta or {})

    def commit(self, weights: dict[str, torch.Tensor], *, status: str, history: list[dict[str, Any]],
               train_state: dict[str, Any] | None = None, progress: dict[str, Any] | None = None,
               meta: dict[str, Any] | None = None) -> Path:
        """Write and commit one generation; ``train_state`` None keeps the previous one's."""
        carry = list(MODEL_FILES)
        if train_state is None:
            carry += [f"{STATE_DIR}/{name}" for name in STATE_FILES]
        staging = self.writer.stage(carry=carry)
        save_tensors(staging / "model.safetensors", weights, metadata={"format": "pt"})
        if not (staging / "tokenizer.json").is_file():
            atomic_write_text(staging / "tokenizer.json", self.tokenizer.to_str())
        if not (staging / "labels.json").is_file():
            atomic_write_json(staging / "labels.json", self.label_vocab.to_dict())
        atomic_write_text(staging / "history.jsonl",
                          "".join(json.dumps(h, sort_keys=True) + "\n" for h in history))
        if train_state is not None:
            save_train_state(staging, train_state)
        self.meta.update(meta or {})
        config: dict[str, Any] = {"run_id": self.writer.run_id, "model_name": self.model_name,
                                  "model_config": self.model_config, **self.meta, "status": status}
        if progress is not None:
            config["progress"] = progress
        try:
            from attnkit import __version__
            config["attnkit_version"] = __version__
        except ImportError:  # pragma: no cover - the package always has a version
            pass
        atomic_write_json(staging / "config.json", config)
        epoch = progress.get("epoch") if progress else None
        return self.writer.commit(staging, status=status, epoch=epoch)

    def epoch_hook(self) -> Callable[[dict[str, Any]], None]:
        """The :class:`~attnkit.train.trainer.Trainer` ``checkpoint`` callback: one generation per epoch,
        serving the best weights so far (the last ones without validation)."""
        def save_epoch(state: dict[str, Any]) -> None:
            weights = state["best"] if state.get("best") is not None else state["model"]
            self.commit(weights, status="training", history=state["progress"]["history"], train_state=state,
                        progress=state["summary"])
        return save_epoch


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
    """Write a loadable checkpoint of ``model`` into ``directory`` as one committed generation.

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
            settings, metrics, ``status``: ``"done"`` unless given).
    """
    meta = dict(extra or {})
    status = str(meta.pop("status", "done"))
    history = meta.pop("history", [])
    with RunWriter(directory, run_id, overwrite=overwrite) as writer:
        run = RunCheckpointer(writer, model_name, model_config, tokenizer, label_vocab, meta)
        return run.commit(unwrap(model).state_dict(), status=status, history=history, train_state=train_state)


def load_checkpoint(
    directory: str | os.PathLike[str], *, device: str | torch.device = "cpu", allow_unfinished: bool = False,
) -> tuple[nn.Module, Any, Any, dict[str, Any]]:
    """Load ``(model, tokenizer, label_vocab, meta)`` from a run directory.

    ``meta`` is the whole config.json. The model is built from its registered
    name and config, gets its saved weights (every name and shape must match)
    and is put in eval mode. A run whose training did not finish raises
    :class:`UnfinishedRunError` unless ``allow_unfinished`` (then
    ``meta["notice"]`` says which weights are served). Every missing, damaged
    or foreign file raises :class:`RunFileError` naming it.
    """
    from attnkit.data.batching import LabelVocab
    from attnkit.models import MODELS, build_model

    folder = committed_dir(directory)
    meta = read_run_config(directory)
    for key in ("model_name", "model_config", "data_settings"):
        if key not in meta:
            raise RunFileError(f"{folder / 'config.json'} lacks {key!r}: not a classification run of attnkit")
    if meta["model_name"] not in MODELS:
        raise RunFileError(f"{folder / 'config.json'} names model {meta['model_name']!r}, which this attnkit "
                           f"does not know (known: {sorted(MODELS)})")
    notice = require_finished(directory, meta, allow_unfinished=allow_unfinished)
    if notice:
        meta["notice"] = notice
    for name in ("model.safetensors", "tokenizer.json", "labels.json"):
        if not (folder / name).is_file():
            raise RunFileError(f"run directory {directory} is incomplete: {folder / name} is missing")
    try:
        model = build_model(meta["model_name"], meta["model_config"])
    except (TypeError, ValueError) as err:
        raise RunFileError(f"{folder / 'config.json'} holds a model config that does not build: {err}") from None
    weights = folder / "model.safetensors"
    load_weights_into(model, load_tensors(weights), weights, f"model {meta['model_name']!r}")
    model.to(device).eval()
    tokenizer = load_run_tokenizer(directory, meta)
    try:
        label_vocab = LabelVocab.from_dict(read_json(folder / "labels.json"))
    except (KeyError, TypeError, ValueError) as err:
        raise RunFileError(f"{folder / 'labels.json'} is not a label vocabulary: {err}") from None
    return model, tokenizer, label_vocab, meta


def load_run_tokenizer(directory: str | os.PathLike[str], meta: dict[str, Any]) -> Any:
    """The committed ``tokenizer.json`` of a run.

    attnkit's own tokenizers must map ``[PAD]`` to 0 and ``[UNK]`` to 1; a
    pretrained BERT vocabulary (model ``"bert"``) keeps its own ids.
    """
    from attnkit.data.tokenization import load_tokenizer

    path = committed_dir(directory) / "tokenizer.json"
    if not path.is_file():
        raise RunFileError(f"{path} is missing")
    if meta.get("model_name") != "bert":
        try:
            return load_tokenizer(path)
        except ValueError as err:
            raise RunFileError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise RunFileError(f"{path} is not a valid tokenizer.json ({exc})") from None


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
    except RunFileError:
        return None
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
