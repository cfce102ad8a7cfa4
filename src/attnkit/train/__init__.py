"""Training: one explicit loop, metrics, checkpoints and data-parallel runs.

``Trainer`` and ``TrainConfig`` are the entry points for classification;
``translation`` and ``captioning`` train and run the sequence-to-sequence and
image-captioning models; ``checkpoint`` saves and loads runs, ``distributed``
joins a torchrun process group. Names load on first
use, so ``attnkit.train.tasks.numpy.numpy_backend`` runs without torch.
"""

from typing import TYPE_CHECKING

from attnkit._lazy import lazy_exports

_EXPORTS = {
    "Trainer": "attnkit.train.loop.trainer",
    "TrainConfig": "attnkit.train.config",
    "accuracy": "attnkit.train.metrics",
    "macro_f1": "attnkit.train.metrics",
    "confusion_matrix": "attnkit.train.metrics",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from attnkit.train.config import TrainConfig
    from attnkit.train.loop.trainer import Trainer
    from attnkit.train.metrics import accuracy, confusion_matrix, macro_f1
