"""A Hugging Face transformers model under context parallelism: its attention layers through the ring.

:func:`context_parallel` registers ``"attnkit_ring"`` with transformers'
``AttentionInterface`` (and a mask function that builds no mask: the local
``(Tl, Tl)`` mask transformers would make is not the sequence's), switches the
model to it for the ``with`` block and back after. Inside, call the model with
this process's slice of ``input_ids`` (:func:`~attnkit.parallel.shard_sequence`)
and ``position_ids = local_positions(T)`` (rotary embeddings need the global
positions); every attention layer then computes its rows of the unsharded
layer's with :func:`~attnkit.parallel.ring_attention`: causal for a decoder
(``module.is_causal``), and ``mask`` -- the **full** sequence's padding or
document mask, if any -- for every layer.

The loss of a causal LM must be the sequence's: shift the labels over the
whole sequence first, shard the shifted labels, sum the local token losses
and divide by the number of tokens of the whole batch; the sum over the
processes is then the unsharded loss, and the parameters' gradients summed
over the processes (``all_reduce``) are its gradients::

    shifted = torch.cat([labels[:, 1:], labels.new_full((B, 1), -100)], 1)
    with context_parallel(model):
        logits = model(input_ids=shard_sequence(ids, 1), position_ids=local_positions(T)[None],
                       use_cache=False).logits                                  # (B, Tl, V)
    loss = F.cross_entropy(logits.flatten(0, 1), shard_sequence(shifted, 1).flatten(),
                           ignore_index=-100, reduction="sum") / (shifted != -100).sum()

Shape legend: B batch, H heads, T full length, Tl = T / world.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from attnkit.core.masks import MaskLike
from attnkit.core.score_mods import soft_cap_mod
from attnkit.parallel.comm import resolve_group
from attnkit.parallel.layout import Layout
from attnkit.parallel.ring import ring_attention

__all__ = ["context_parallel", "NAME"]

NAME = "attnkit_ring"
"""The name registered with transformers' attention and mask interfaces."""


@dataclass(frozen=True)
class _Setting:
    group: Any
    layout: Layout
    mask: MaskLike
    timeout: float | None


_ACTIVE: list[_Setting] = []  # the settings of the context_parallel blocks entered, innermost last


def ring_attention_forward(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                           dropout: float = 0.0, scaling: float | None = None, softcap: float | None = None,
                           is_causal: bool | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """The ``AttentionInterface`` entry: one attention layer through :func:`~attnkit.parallel.ring_attention`.

    ``attention_mask`` is ignored (the mask function built none); the full sequence's mask comes from
    :func:`context_parallel`.

    Shape:
        query ``(B, H, Tl, Dh)``, key ``(B, Hkv, Tl, Dh)``, value ``(B, Hkv, Tl, Dv)``; returns ``(B, Tl, H, Dv)``.
    """
    if not _ACTIVE:
        raise RuntimeError(f"attn_implementation={NAME!r} runs only inside "
                           "attnkit.integrations.context_parallel.context_parallel(model)")
    s = _ACTIVE[-1]
    if dropout and module.training:
        raise ValueError("context_parallel takes no attention dropout: set the model's attention_dropout to 0")
    refused = sorted(k for k in ("s_aux", "position_bias") if kwargs.get(k) is not None)
    if refused or kwargs.get("output_attentions"):
        raise ValueError(f"context_parallel does not run attention with {refused or 'output_attentions'}")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", False))
    out = ring_attention(query, key, value, mask=s.mask, causal=causal, scale=scaling,
                         score_mod=soft_cap_mod(softcap) if softcap else None, group=s.group, layout=s.layout,
                         timeout=s.timeout)
    return out.transpose(1, 2).contiguous(), None  # (B, Tl, H, Dv)


def no_mask(*args: Any, **kwargs: Any) -> None:
    """The mask function: none (the ring reads the full sequence's mask itself)."""
    return None


@contextmanager
def context_parallel(model: Any, *, group: Any = None, layout: Layout = "balanced", mask: MaskLike = None,
                     timeout: float | None = None) -> Iterator[Any]:
    """Run a transformers model's attention with :func:`~attnkit.parallel.ring_attention` inside the block.

    ``mask`` is the full sequence's mask as :func:`attnkit.attention` reads it (e.g.
    ``masks.from_hf_attention_mask(attention_mask)`` of the whole batch, or a BlockMask of packed
    documents); decoders add causality themselves. The model's attention implementation is put back
    when the block ends, also on an exception.

    Shape:
        inside, ``input_ids`` and ``position_ids`` are ``(B, Tl)`` slices; ``mask`` is for ``(B, H, T, T)``.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    resolve_group(group, timeout)  # no process group: refused here, by name
    AttentionInterface.register(NAME, ring_attention_forward)
    AttentionMaskInterface.register(NAME, no_mask)
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    _ACTIVE.append(_Setting(group, layout, mask, timeout))
    try:
        yield model
    finally:
        _ACTIVE.pop()
        model.set_attn_implementation(previous)
