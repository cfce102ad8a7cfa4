"""attnkit: attention mechanisms, correct, fast and visible.

The core: :func:`attention` (one mask rule, safe numerics, fused when
possible), :mod:`attnkit.masks`, and one ``nn.Module`` per attention variant.

Names are imported on first use, so ``import attnkit.reference`` (the NumPy
twin) never loads torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "attention": "attnkit.functional",
    "attention_weights": "attnkit.functional",
    "choose_backend": "attnkit.functional",
    "last_backend": "attnkit.functional",
    "BackendChoice": "attnkit.functional",
    "KVCache": "attnkit.layers.kv_cache",
    "MultiHeadAttention": "attnkit.layers.multi_head",
}
_SUBMODULES = {"masks", "functional", "layers", "reference"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])

if TYPE_CHECKING:
    from attnkit import functional, layers, masks
    from attnkit.functional import (
        BackendChoice,
        attention,
        attention_weights,
        choose_backend,
        last_backend,
    )
    from attnkit.layers.kv_cache import KVCache
    from attnkit.layers.multi_head import MultiHeadAttention


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"attnkit.{name}")
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
