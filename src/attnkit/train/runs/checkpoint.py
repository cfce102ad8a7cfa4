"""Checkpoints and resumable training state, committed as generations and never pickled.

A run directory (see :mod:`attnkit.train.runs.rundir` for the transaction) holds,
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit._finite import non_finite_names
from attnkit._memory import memory_budget
from attnkit.train.runs.run import commit_generation, save_run
from attnkit.train.runs.run_files import check_labels, check_tokenizer_fits, refuse_non_finite_file
from attnkit.train.runs.rundir import (
    RunExistsError,
    RunFileError,
    RunWriter,
    UnfinishedRunError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_run_dir,
    check_unlocked,
    clear_run,
    committed_dir,
    read_json,
    read_run_config,
    require_finished,
    run_status,
)
from attnkit.train.runs.tensors import check_tensors_fit, load_tensors, load_weights_into, save_tensors, unwrap
from attnkit.train.runs.train_state import (
    STATE_DIR,
    STATE_FILES,
    capture_rng,
    load_train_state,
    optimizer_from_tensors,
    optimizer_to_tensors,
    restore_rng,
    save_train_state,
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
    "load_run_vocabularies",
    "load_finite_tensors",
    "save_train_state",
    "load_train_state",
    "capture_rng",
    "restore_rng",
    "optimizer_to_tensors",
    "optimizer_from_tensors",
    "unwrap",
    "RunCheckpointer",
    "weights_file",
    "state_files",
    "load_weights_into",
    "committed_dir",
    "check_unlocked",
    "read_json",
    "run_status",
    "STATE_DIR",
    "STATE_FILES",
]

MODEL_FILES = ("tokenizer.json", "labels.json")


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
        self.meta.update(meta or {})
        files = {"model.safetensors": weights_file(weights), "tokenizer.json": self.tokenizer.to_str(),
                 "labels.json": self.label_vocab.to_dict(),
                 "history.jsonl": "".join(json.dumps(h, sort_keys=True) + "\n" for h in history),
                 **state_files(train_state)}
        return commit_generation(self.writer, {"model_name": self.model_name, "model_config": self.model_config,
                                               **self.meta}, status=status, files=files, progress=progress,
                                 carry=[*MODEL_FILES, *([] if train_state is not None else [f"{STATE_DIR}/"])])

    def epoch_hook(self) -> Callable[[dict[str, Any]], None]:
        """The :class:`~attnkit.train.loop.trainer.Trainer` ``checkpoint`` callback: one generation per epoch,
        serving the best weights so far (the last ones without validation)."""
        def save_epoch(state: dict[str, Any]) -> None:
            weights = state["best"] if state.get("best") is not None else state["model"]
            self.commit(weights, status="training", history=state["progress"]["history"], train_state=state,
                        progress=state["summary"])
        return save_epoch


def weights_file(weights: dict[str, torch.Tensor]) -> Callable[[Path], None]:
    """What writes ``weights`` as a generation's ``model.safetensors`` (a file of
    :func:`~attnkit.train.runs.run.commit_generation`)."""
    return lambda path: save_tensors(path, weights, metadata={"format": "pt"})


def state_files(state: dict[str, Any] | None) -> dict[str, Callable[[Path], None]]:
    """The resumable train ``state`` (:func:`save_train_state`) as files of
    :func:`~attnkit.train.runs.run.commit_generation` (none for None: the caller carries the previous one's)."""
    return {} if state is None else {STATE_DIR: lambda path: save_train_state(path.parent, state)}


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
    def commit(writer: RunWriter) -> Path:
        run = RunCheckpointer(writer, model_name, model_config, tokenizer, label_vocab, meta)
        return run.commit(unwrap(model).state_dict(), status=status, history=history, train_state=train_state)

    return save_run(directory, commit, run_id=run_id, overwrite=overwrite)


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
        config = meta["model_config"]
        if not isinstance(config, dict):
            raise TypeError(f"model_config must be a dict of fields, got {type(config).__name__}")
        check_model_size(meta["model_name"], config, folder / "config.json")
        model = build_model(meta["model_name"], config)
    except (TypeError, ValueError, RuntimeError, MemoryError) as err:
        if isinstance(err, RunFileError):
            raise
        raise RunFileError(f"{folder / 'config.json'} holds a model config that does not build: {err}") from None
    weights = folder / "model.safetensors"
    what = f"model {meta['model_name']!r}"
    load_weights_into(model, load_finite_tensors(weights, model.state_dict(), what), weights, what)
    model.to(device).eval()
    tokenizer, label_vocab = load_run_vocabularies(directory, meta)
    return model, tokenizer, label_vocab, meta


def load_run_vocabularies(directory: str | os.PathLike[str], meta: dict[str, Any]) -> tuple[Any, Any]:
    """The committed tokenizer and label vocabulary of a classification run, each checked against the model
    of its ``config.json`` (``meta``): the labels against ``num_classes``, every token id below ``vocab_size``."""
    from attnkit.data.batching import LabelVocab

    folder = committed_dir(directory)
    config = meta["model_config"]
    label_vocab = LabelVocab(check_labels(folder / "labels.json", read_json(folder / "labels.json"),
                                          config.get("num_classes")))
    tokenizer = load_run_tokenizer(directory, meta)
    check_tokenizer_fits(folder / "tokenizer.json", tokenizer, config.get("vocab_size"),
                         at_most=meta["model_name"] == "bert")
    return tokenizer, label_vocab


def check_model_size(model_name: str, config: dict[str, Any], source: Path) -> None:
    """Refuse a model config whose weights would not fit in the available memory, before allocating them.

    The model is built on torch's ``meta`` device (shapes without storage) to
    count its bytes; the refusal names the config's largest sizes.
    """
    from attnkit.models import build_model
    from attnkit.train.memory_budget import module_bytes

    try:
        nbytes = sum(module_bytes(lambda: build_model(model_name, config)))
    except RuntimeError as err:  # e.g. "Storage size calculation overflowed": sizes beyond any memory
        raise RunFileError(f"{source} holds a model config whose weights cannot be sized "
                           f"({_largest_sizes(config)}): {' '.join(str(err).split())[:200]}") from None
    budget = memory_budget()
    if budget.bytes is not None and nbytes > budget.bytes:
        raise RunFileError(f"{source} describes a model of {nbytes / 2**30:,.1f} GiB of weights, more than the "
                           f"{budget.bytes / 2**30:,.1f} GiB of memory {budget.source} ({_largest_sizes(config)})")


def _largest_sizes(config: dict[str, Any]) -> str:
    """The three largest int fields of ``config``, a nested config's named by their path (``layer.d_model``)."""
    return "largest fields: " + ", ".join(f"{k}={v}" for v, k in sorted(_int_fields(config), reverse=True)[:3])


def _int_fields(config: dict[str, Any], prefix: str = "") -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for key, value in config.items():
        if isinstance(value, dict):
            found += _int_fields(value, f"{prefix}{key}.")
        elif isinstance(value, int) and not isinstance(value, bool):
            found.append((value, prefix + str(key)))
    return found


def load_finite_tensors(path: Path, own: dict[str, torch.Tensor] | None = None,
                        what: str = "the model") -> dict[str, torch.Tensor]:
    """The tensors of the weights file ``path`` (:func:`load_tensors`), refused when one holds NaN or infinity.

    With ``own`` (the state dict of the model they are for) a tensor of another shape or dtype is refused
    first (:func:`check_tensors_fit`): int64 values relabelled float64 read as NaN, and are a damaged file,
    not a diverged training."""
    tensors = load_tensors(path)
    if own is not None:
        check_tensors_fit(own, tensors, path, what)
    refuse_non_finite_file(path, non_finite_names(tensors))
    return tensors


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
