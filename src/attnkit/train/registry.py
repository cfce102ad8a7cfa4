"""One registry of the kinds of run: which committed runs a task owns, and how it serves them.

Every run folder holds a committed ``config.json`` (:mod:`attnkit.train.runs.rundir`). Each task registers
one :class:`RunKind`: a name, a ``claims(config)`` test on that file and a ``load(path, *,
allow_unfinished, device)`` that returns what serves the run. :func:`load_run` (the Python API's
``attnkit.load_run``) asks the kinds in registration order and loads with the first that claims the
run, so one call serves every kind::

    attnkit.load_run("runs/reviews")        # Predictor (classification, torch or numpy backend)
    attnkit.load_run("runs/de-en")          # Translator: .translate(["ein haus"])
    attnkit.load_run("runs/captions")       # CaptionRun: .caption(images)

A new task adds one kind and nothing else: its ``task`` name and ``train`` command make
``attnkit train --task tagging ...`` run that command (:func:`train_commands`; the tasks attnkit ships
leave ``train`` empty and the command line keeps their commands, so this module names nothing above it),
its ``claims`` and ``load`` make ``load_run`` (and so the server and ``predict``-style commands) serve what it wrote::

    from attnkit.train.registry import RunKind, register_run_kind

    register_run_kind(RunKind("tagging", "token tagging", lambda config: config.get("model_name") == "tagger",
                              load_tagging_run, "attnkit tag", task="tagging",
                              train="attnkit.tasks.tagging.cli:train_tagging"))

Loaders import their task's modules when called, so reading the registry imports no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunKind", "RUN_KINDS", "register_run_kind", "train_commands", "run_kind", "load_run", "CaptionRun"]


@dataclass(frozen=True)
class RunKind:
    """One kind of run: ``claims(config)`` says whether a committed ``config.json`` is this kind's,
    ``load(path, allow_unfinished=..., device=...)`` returns the object that serves it."""

    name: str
    description: str
    claims: Callable[[dict[str, Any]], bool]
    load: Callable[..., Any]
    command: str = ""
    """The command that serves such a run from the command line (``"attnkit translate"``), for messages."""
    task: str = ""
    """The name ``attnkit train --task NAME`` trains this kind under (``""``: trained under another kind's
    task, as the NumPy backend's runs are under ``classify --backend numpy``)."""
    train: str = ""
    """``"module:attribute"`` of the click command that trains it (imported only when that task is asked for);
    ``""`` for the tasks attnkit ships, whose commands :mod:`attnkit.cli` finds by the task's name."""


RUN_KINDS: dict[str, RunKind] = {}


def register_run_kind(kind: RunKind) -> RunKind:
    """Add ``kind`` to the registry. A name registered twice is an error (one owner per kind), and so is a
    ``train`` command for a task another kind trains already (one owner per task: the second would never run)."""
    if kind.name in RUN_KINDS:
        raise ValueError(f"a run kind named {kind.name!r} is registered already")
    owner = next((k for k in RUN_KINDS.values() if k.task == kind.task), None)
    if kind.task and owner is not None:
        command = f" ({owner.train})" if owner.train else ""
        raise ValueError(f"run kind {kind.name!r} names task {kind.task!r}, which run kind {owner.name!r} trains "
                         f"already{command}: give it a task name of its own")
    RUN_KINDS[kind.name] = kind
    return kind


def train_commands() -> dict[str, str]:
    """Each ``attnkit train --task`` name and the ``"module:attribute"`` of the command that trains it
    (``""``: a task attnkit ships, whose command the command line keeps), in registration order (one kind
    trains each task: :func:`register_run_kind`)."""
    return {kind.task: kind.train for kind in RUN_KINDS.values() if kind.task}


def run_kind(path: str | os.PathLike[str]) -> RunKind:
    """The registered kind that claims run ``path`` (RunFileError naming the file when none does)."""
    from attnkit.train.runs.rundir import RunFileError, committed_dir, read_run_config

    config = read_run_config(path)
    for kind in RUN_KINDS.values():
        if kind.claims(config):
            return kind
    raise RunFileError(f"{committed_dir(path) / 'config.json'} names model {config.get('model_name')!r}, which no "
                       f"registered kind of run claims (kinds: {', '.join(RUN_KINDS)})")


def load_run(path: str | os.PathLike[str], *, allow_unfinished: bool = False, device: str = "cpu") -> Any:
    """Serve run ``path`` through the kind that claims it (see the module docstring)."""
    return run_kind(path).load(Path(path), allow_unfinished=allow_unfinished, device=device)


# --- the four kinds attnkit ships ------------------------------------------------------------------


def _is_numpy(config: dict[str, Any]) -> bool:
    from attnkit.train.tasks.numpy.numpy_backend import BACKEND

    return config.get("backend") == BACKEND


def _is_translation(config: dict[str, Any]) -> bool:
    from attnkit.train.tasks.translate.translation_run import MODEL_NAME

    return config.get("model_name") == MODEL_NAME


def _is_captioning(config: dict[str, Any]) -> bool:
    from attnkit.train.tasks.caption.captioning import MODEL_NAME

    return config.get("model_name") == MODEL_NAME


def _is_classification(config: dict[str, Any]) -> bool:
    from attnkit.models import MODELS

    return config.get("model_name") in MODELS or "data_settings" in config


def _load_classifier(path: Path, *, allow_unfinished: bool = False, device: str = "cpu") -> Any:
    from attnkit.train.tasks.classify.predictor import Predictor

    return Predictor.from_pretrained(path, allow_unfinished=allow_unfinished, device=device)


def _load_translation(path: Path, *, allow_unfinished: bool = False, device: str = "cpu") -> Any:
    from attnkit.train.tasks.translate.translation_run import load_translation_run

    return load_translation_run(path, allow_unfinished=allow_unfinished, device=device)


@dataclass
class CaptionRun:
    """A captioning run served: its model (eval mode), vocabulary and ``config.json``."""

    path: Path
    model: Any
    vocab: Any
    config: dict[str, Any]

    @property
    def notice(self) -> str | None:
        """For an unfinished run loaded with ``allow_unfinished``, which weights are served."""
        return self.config.get("notice")

    def caption(self, images: Any, *, beam_size: int = 1) -> list[str]:
        """One caption per image of ``images`` ``(N, 3, S, S)`` (floats in [0, 1], the run's image size)."""
        from attnkit.train.tasks.caption.captioning import generate

        return [" ".join(self.vocab.decode(result.ids)) for result in generate(self.model, images,
                                                                                beam_size=beam_size)]


def _load_captioning(path: Path, *, allow_unfinished: bool = False, device: str = "cpu") -> CaptionRun:
    from attnkit.train.tasks.caption.captioning import load_caption_run

    model, vocab, config = load_caption_run(path, allow_unfinished=allow_unfinished)
    return CaptionRun(path, model.to(device), vocab, config)


# Order matters: the numpy backend's runs carry classifier model names, so it is asked first.
for _kind in (
    RunKind("numpy", "text classification on the NumPy twin", _is_numpy, _load_classifier, "attnkit predict"),
    RunKind("translation", "sequence-to-sequence translation", _is_translation, _load_translation,
            "attnkit translate", task="translate"),
    RunKind("captioning", "image captioning", _is_captioning, _load_captioning, "attnkit caption",
            task="caption"),
    RunKind("classification", "text classification", _is_classification, _load_classifier, "attnkit predict",
            task="classify"),
):
    register_run_kind(_kind)
