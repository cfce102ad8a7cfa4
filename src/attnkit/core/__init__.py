"""The attention core: one entry, the masks, the score mods, and the kernels beside each other.

* :mod:`~attnkit.core.functional` — :func:`attention`, :func:`attention_weights`, heads split and merged;
* :mod:`~attnkit.core.dispatch` — the one dispatcher: :func:`~attnkit.core.dispatch.plan`
  returns a :class:`BackendChoice` (path, reason, kernel) and
  :func:`~attnkit.core.dispatch.run` runs it;
* :mod:`~attnkit.core.masks` and :mod:`~attnkit.core.block_mask` — boolean masks by the one
  rule (True = may attend), block masks that let attention skip work, and
  :class:`~attnkit.core.masks.AttentionMask`, the one object a model builds at its entry;
* :mod:`~attnkit.core.rows` — which query rows have any key (the rule behind "no key, zero output");
* :mod:`~attnkit.core.score_mods` — ``score_mod`` functions (ALiBi, soft-capping, additive biases);
* :mod:`~attnkit.core.types` — ``MaskMod``, ``ScoreMod``, ``BiasFn``;
* :mod:`~attnkit.core.kernels` — dense (fused and readable), contiguous runs, gathered blocks, tiles.

Users import these as ``from attnkit import attention, masks`` and ``attnkit.score_mods``;
``attnkit.attention`` the *name* is the function, this package is reached by its modules'
full paths (``from attnkit.core.dispatch import plan``).

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key length, Dh head width.
"""

from __future__ import annotations

from attnkit.core.dispatch import BackendChoice, choose_backend, last_backend
from attnkit.core.functional import (
           attention,
           attention_weights,
           merge_heads,
           safe_softmax,
           split_heads,
)

__all__ = ["attention", "attention_weights", "safe_softmax", "choose_backend", "BackendChoice", "last_backend",
           "split_heads", "merge_heads"]
