"""The attention core: one entry, the masks, the score mods, and the kernels beside each other.

* :mod:`~attnkit.attention.functional` — :func:`attention`, :func:`attention_weights`, heads split and merged;
* :mod:`~attnkit.attention.dispatch` — the one dispatcher: :func:`~attnkit.attention.dispatch.plan`
  returns a :class:`BackendChoice` (path, reason, kernel) and
  :func:`~attnkit.attention.dispatch.run` runs it;
* :mod:`~attnkit.attention.masks` and :mod:`~attnkit.attention.block_mask` — boolean masks by the one
  rule (True = may attend), block masks that let attention skip work, and
  :class:`~attnkit.attention.masks.AttentionMask`, the one object a model builds at its entry;
* :mod:`~attnkit.attention.rows` — which query rows have any key (the rule behind "no key, zero output");
* :mod:`~attnkit.attention.score_mods` — ``score_mod`` functions (ALiBi, soft-capping, additive biases);
* :mod:`~attnkit.attention.types` — ``MaskMod``, ``ScoreMod``, ``BiasFn``;
* :mod:`~attnkit.attention.kernels` — dense (fused and readable), contiguous runs, gathered blocks, tiles.

Users import these as ``from attnkit import attention, masks`` and ``attnkit.score_mods``;
``attnkit.attention`` the *name* is the function, this package is reached by its modules'
full paths (``from attnkit.attention.dispatch import plan``).

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key length, Dh head width.
"""

from __future__ import annotations

from attnkit.attention.dispatch import BackendChoice, choose_backend, last_backend
from attnkit.attention.functional import (
           attention,
           attention_weights,
           merge_heads,
           safe_softmax,
           split_heads,
)

__all__ = ["attention", "attention_weights", "safe_softmax", "choose_backend", "BackendChoice", "last_backend",
           "split_heads", "merge_heads"]
