"""attnkit: attention mechanisms, correct, fast and visible.

The core: :func:`attention` (one mask rule, safe numerics, fused when
possible), :mod:`attnkit.masks`, and one ``nn.Module`` per attention variant.
"""

from attnkit import masks
from attnkit.functional import BackendChoice, attention, attention_weights, choose_backend, last_backend

__version__ = "0.1.0"

__all__ = [
    "masks",
    "attention",
    "attention_weights",
    "choose_backend",
    "last_backend",
    "BackendChoice",
    "__version__",
]
