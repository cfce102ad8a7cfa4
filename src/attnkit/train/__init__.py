"""Training: one explicit loop, metrics, checkpoints and data-parallel runs.

``Trainer`` and ``TrainConfig`` are the entry points; ``checkpoint`` saves and
loads runs, ``distributed`` joins a torchrun process group.
"""

from attnkit.train.config import TrainConfig
from attnkit.train.metrics import accuracy, confusion_matrix, macro_f1
from attnkit.train.trainer import Trainer

__all__ = ["Trainer", "TrainConfig", "accuracy", "macro_f1", "confusion_matrix"]
