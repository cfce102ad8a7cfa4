"""The call that every attnkit text classifier shares: :class:`TextClassifier`.

::

    logits            = model(ids, lengths)                              (B, C)
    logits, weights   = model(ids, lengths, return_weights=True)         every weight the model has
    logits, weights   = model(ids, lengths, return_weights="pooling")    only weights["pooling"]
    logits, weights   = model(ids, lengths, return_weights=("pooling", "encoder.1"))

``return_weights`` names what to return, and the model computes only that:
``True`` asks for every weight (as it always has), a name or a collection of
names for those alone. A name selects the key equal to it and the keys below
it: ``"encoder"`` selects ``"encoder.0"``, ``"encoder.1"``, ... An unknown
name raises ValueError listing the model's :attr:`TextClassifier.WEIGHTS`.
``weights["pooling"]`` ``(B, T)`` -- how much each token counts for the
answer, what ``attnkit predict --explain`` ranks -- is what every classifier
returns; asking for it alone spares the attention maps of the layers below.
The fused kernel never forms those maps, so each one requested costs a second
pass over its layer's ``(B, H, T, T)`` scores; the pooling weights come
with the pooled vector at no extra cost.

**Masks once, at the model boundary.** :meth:`TextClassifier.forward`
validates the batch and turns ``lengths`` into one
:class:`~attnkit.core.masks.AttentionMask` (the key-padding mask
``(B, 1, 1, T)`` of :func:`attnkit.masks.from_lengths` and its rows with a
key) once; the model's :meth:`~TextClassifier.classify` carries that one
object down unchanged to every layer that needs it (attention, pooling, mean
pooling), and none of them rebuilds it.

**Packed rows.** ``model(ids, segment_ids=seg, positions=pos)`` takes
several documents per row (:mod:`attnkit.data.packing`): ``ids (R, T)``,
``segment_ids (R, T)`` numbering the documents ``0 .. N-1`` (negative =
padding), ``positions`` optional. It returns one row of logits per document,
``(N, C)`` in document order, equal to what each document gets alone;
``weights["pooling"]`` comes back in the packed layout ``(R, T)``. Models
that can share a row override :meth:`~TextClassifier.classify_packed`; the
others run each document on its own (:meth:`PackedBatch.unpack`).

Shape legend: B batch, T tokens, C classes, R packed rows, N documents.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, overload

import torch
from torch import Tensor, nn

from attnkit.core.masks import AttentionMask
from attnkit.models.config import token_batch
from attnkit.models.packed import PackedBatch, packed_batch

__all__ = ["TextClassifier", "WeightRequest", "WeightSelection", "select_weights"]

WeightRequest = bool | str | Collection[str]
"""What ``return_weights`` takes: False, True (everything), a name, or a collection of names."""


@dataclass(frozen=True)
class WeightSelection:
    """The weights one call asks for; ``names=None`` means all of them.

    ``key in selection`` says whether the weight ``key`` (e.g. ``"encoder.1"``)
    is wanted: when it, or the group above it (``"encoder"``), was named.
    """

    names: frozenset[str] | None = None

    def __contains__(self, key: object) -> bool:
        if self.names is None:
            return True
        if not isinstance(key, str):
            return False
        return key in self.names or key.split(".", 1)[0] in self.names

    def wants_group(self, group: str) -> bool:
        """Whether any weight of ``group`` (``group`` itself or ``group.*``) is wanted."""
        if self.names is None:
            return True
        return any(name == group or name.startswith(group + ".") for name in self.names)


def select_weights(request: object, valid: Collection[str]) -> WeightSelection | None:
    """Read a ``return_weights`` argument: None for no weights, else the :class:`WeightSelection`.

    ``valid`` are the top-level names a model returns (its :attr:`TextClassifier.WEIGHTS`).
    """
    if request is False:
        return None
    if request is True:
        return WeightSelection()
    names = (request,) if isinstance(request, str) else request
    if not isinstance(names, Collection) or not names or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"return_weights must be a bool, a weight name or a collection of names from "
            f"{list(valid)}, got {request!r}"
        )
    unknown = sorted(n for n in names if n.split(".", 1)[0] not in valid)
    if unknown:
        raise ValueError(f"unknown weight name(s) {unknown}; this model returns {list(valid)}")
    return WeightSelection(frozenset(names))


class TextClassifier(nn.Module):
    """Base of the text classifiers: the typed call, the input checks and the one mask.

    A subclass sets :attr:`WEIGHTS` and ``config`` (with ``vocab_size``) and
    implements :meth:`classify`; it may override :meth:`prepare` to accept
    other input layouts.
    """

    WEIGHTS: ClassVar[tuple[str, ...]] = ("pooling",)
    """Top-level names of the weights the model returns (keys of its weights dict, or their groups)."""

    config: Any

    @overload
    def forward(self, ids: Tensor, lengths: Tensor | None = ..., *, return_weights: Literal[False] = ...,
                segment_ids: Tensor | None = ..., positions: Tensor | None = ...) -> Tensor: ...
    @overload
    def forward(
        self, ids: Tensor, lengths: Tensor | None = ..., *, return_weights: Literal[True] | str | Collection[str],
        segment_ids: Tensor | None = ..., positions: Tensor | None = ...,
    ) -> tuple[Tensor, dict[str, Tensor]]: ...
    def forward(
        self, ids: Tensor, lengths: Tensor | None = None, *, return_weights: WeightRequest = False,
        segment_ids: Tensor | None = None, positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Logits for each document and, on request, the weights named by ``return_weights``.

        Give ``lengths`` for a padded batch, or ``segment_ids`` (and optionally
        ``positions``) for packed rows (see the module docstring).

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns ``(B, C)`` [and a dict of weights].
            Packed: ids, segment_ids, positions ``(R, T)``; returns ``(N, C)``
            [and ``{"pooling": (R, T)}``].
        """
        selection = select_weights(return_weights, self.WEIGHTS)
        if segment_ids is not None or positions is not None:
            return self._forward_packed(ids, lengths, segment_ids, positions, selection)
        if lengths is None:
            raise TypeError(f"{type(self).__name__} needs lengths (B,) for a padded batch, "
                            "or segment_ids (R, T) for packed rows")
        ids, lengths, mask = self.prepare(ids, lengths)
        logits, weights = self.classify(ids, lengths, mask, selection)
        if selection is None:
            return logits
        return logits, {key: w for key, w in weights.items() if key in selection}

    def _forward_packed(self, ids: Tensor, lengths: object, segment_ids: Tensor | None,
                        positions: Tensor | None, selection: WeightSelection | None
                        ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        name = type(self).__name__
        if lengths is not None:
            raise ValueError(f"{name}: pass lengths (padded batch) or segment_ids (packed rows), not both")
        if segment_ids is None:
            raise ValueError(f"{name}: positions need segment_ids (packed rows)")
        if selection is not None and selection.names != frozenset({"pooling"}):
            raise ValueError(f"{name}: packed rows return only the pooling weights; "
                             f"ask for return_weights='pooling' or nothing")
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise ValueError(f"packed ids must be an integer (R, T) tensor, got "
                             f"{getattr(ids, 'dtype', type(ids).__name__)} {tuple(getattr(ids, 'shape', ()))}")
        packed = packed_batch(ids.long(), segment_ids, positions, self.config.vocab_size)
        logits, pooling = self.classify_packed(packed, selection is not None)
        if selection is None:
            return logits
        assert pooling is not None
        return logits, {"pooling": pooling}

    def classify_packed(self, packed: PackedBatch, want_pooling: bool) -> tuple[Tensor, Tensor | None]:
        """Logits ``(N, C)`` of packed documents and, if wanted, the pooling weights ``(R, T)``.

        This default runs each document on its own row (:meth:`PackedBatch.unpack`),
        which is exact for any model; a model whose layers can share a row
        (masked attention, per-document pooling) overrides it to save the padding.

        Shape:
            returns ``(N, C)`` and ``(R, T)`` or None.
        """
        ids = packed.unpack(packed.ids)  # (N, L)
        ids, lengths, mask = self.prepare(ids, packed.lengths)
        logits, weights = self.classify(ids, lengths, mask, WeightSelection(frozenset({"pooling"}))
                                        if want_pooling else None)
        if not want_pooling:
            return logits, None
        return logits, packed.to_token_positions(weights["pooling"])

    def prepare(self, ids: object, lengths: object) -> tuple[Tensor, Tensor, AttentionMask]:
        """Validate the batch and build its mask: the one place ``lengths`` become a mask.

        Shape:
            ids ``(B, T)``, lengths ``(B,)``; returns them as int64 and the
            :class:`~attnkit.core.masks.AttentionMask` of allowed ``(B, 1, 1, T)``.
        """
        return token_batch(ids, lengths, self.config.vocab_size)

    def classify(
        self, ids: Tensor, lengths: Tensor, mask: AttentionMask, weights: WeightSelection | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Logits and the weights in ``weights`` (None: none are needed) for a prepared batch."""
        raise NotImplementedError
