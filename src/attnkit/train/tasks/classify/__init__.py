"""Text classification: the pipeline from labelled texts to a run (``pipeline``, ``plan``), the default recipe
(``recipe``), the TF-IDF baseline (``baseline``), what it is trained for (``objective``), BERT fine-tuning
(``finetune``), the trained classifier served (``predictor``, ``inference``) and its commands (``command``). The
NumPy twin's classifiers (``train/tasks/numpy``) are a backend of this task: its runs are claimed and served here."""

from __future__ import annotations

from typing import Any

from attnkit.train.registry import Task, TaskCommand, register_task

__all__ = ["TASK", "SHRINKS"]


def _claims(config: dict[str, Any]) -> bool:
    if config.get("backend") == "numpy" or "data_settings" in config:  # a NumPy run is claimed without torch
        return True
    from attnkit.models import MODELS

    return config.get("model_name") in MODELS


SHRINKS = "the n-gram half keeps fewer bigram rows, and says so"
"""How a classification run shrinks to fit ``--max-memory`` (:mod:`.memory`)."""

TASK = register_task(Task(
    "classify", "text classification", _claims,
    "attnkit.train.tasks.classify.predictor:Predictor.from_pretrained", "attnkit predict",
    settings="attnkit.train.tasks.classify.settings:ClassifyCommand",
    train="attnkit.train.tasks.classify.training:train_from_flags", grows=(), takes_flags=True, shrinks=SHRINKS,
    after="its reports (report.txt, report.html) were not all written; write them with: attnkit report {out}",
    default=True, needs_torch=lambda values: values.get("backend") != "numpy",  # the NumPy twin trains without it
    commands={**{name: TaskCommand(f"attnkit.train.tasks.classify.command:{name.title()}Command",
                                   f"attnkit.train.tasks.classify.command:{name}_command")
                 for name in ("predict", "evaluate", "report", "baseline", "demo")},
              "cv": TaskCommand("attnkit.train.tasks.classify.settings:CvCommand",
                                "attnkit.train.tasks.classify.command:cv_command", takes_flags=True)}))
