"""A trained run from Python: load it, classify texts, save it again.

::

    import attnkit

    run = attnkit.load_run("runs/reviews")
    run.predict(["a wonderful film"])          # ['positive']
    run.predict_proba(["a wonderful film"])    # (1, C) array, columns in run.labels order

:func:`load_run` serves every kind of run through one registry
(:mod:`attnkit.train.registry`: classification, the NumPy backend, translation,
captioning); :meth:`Predictor.from_pretrained` reads a classification
run directory, written by ``attnkit train`` or ``attnkit demo``, through the
same loader as the commands (:func:`attnkit.train.runs.checkpoint.load_checkpoint`
for torch runs, :func:`attnkit.train.tasks.numpy.numpy_backend.load_numpy_run` for
``--backend numpy`` runs): every file is checked, the weights must be finite,
labels and tokenizer must agree with the model, and a run whose training did
not finish is refused unless ``allow_unfinished=True``. The run's own
settings (its ``max_len``, its tokenizer) are used, so the predictions are the
ones ``attnkit predict`` prints.
"""

from __future__ import annotations

import os
from typing import Any

from attnkit.train.tasks.classify.predictor import Predictor

__all__ = ["Predictor", "load_run"]


def load_run(path: str | os.PathLike[str], *, allow_unfinished: bool = False, device: str = "cpu") -> Any:
    """The trained model in run directory ``path``, served by the kind of run that owns it
    (:mod:`attnkit.train.registry`): a :class:`Predictor` for a classification run (torch or numpy
    backend), a :class:`~attnkit.train.tasks.translate.translation_run.Translator` for a translation run, a
    :class:`~attnkit.train.tasks.caption.captioning.CaptionRun` for a captioning run.

    Raises :class:`attnkit.train.runs.checkpoint.RunFileError` naming the file when
    the folder is not a complete, sound attnkit run, and
    :class:`attnkit.train.runs.rundir.UnfinishedRunError` for a run whose training
    did not finish (unless ``allow_unfinished``: then ``notice`` says which
    weights are served).
    """
    from attnkit.train.registry import load_run as load_registered

    return load_registered(path, allow_unfinished=allow_unfinished, device=device)
