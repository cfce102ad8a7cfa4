"""One folder per task: ``classify`` (the text classifiers, their recipe, baseline and serving), ``translate``,
``caption`` and ``numpy`` (the NumPy twin's classifiers). Each registers its kind of run in
:mod:`attnkit.train.registry`; nothing outside these folders names a task but the registry and
:func:`default_task`."""

from __future__ import annotations

from typing import Any

__all__ = ["default_task"]


def default_task(*args: Any, **kwargs: Any) -> Any:
    """The task :class:`~attnkit.train.Trainer` trains when it is given data and no task: the text
    classifiers' (:class:`attnkit.train.tasks.classify.task.ClassificationTask`, called with these arguments)."""
    from attnkit.train.tasks.classify.task import ClassificationTask

    return ClassificationTask(*args, **kwargs)
