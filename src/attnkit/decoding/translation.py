"""Greedy decoding and beam search for the translation model (:class:`IncrementalDecoder`: a KV
cache, each step feeds only the newest token), through the searches of :mod:`attnkit.decoding.search`.

Shape legend: B batch (sources), Ts source length, Tt generated length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from attnkit.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY
from attnkit.decoding.search import (
    Hypothesis,
    StepFunction,
    beam_search_over_steps,
    check_search,
    greedy_over_steps,
    n_best_over_steps,
)

__all__ = ["IncrementalDecoder", "DecodeResult", "greedy_decode", "beam_search", "beam_alternatives"]


class IncrementalDecoder(Protocol):
    """What :func:`greedy_decode` and :func:`beam_search` need from a model: ``encode`` (its output
    reorderable with ``index_select``), ``init_cache`` (reorderable in place with ``reorder``) and
    ``decode_step(newest_ids, encoded, cache, return_weights=...)``.

    Shape:
        src_ids ``(B, Ts)`` and src_lengths ``(B,)`` for ``encode``; ``decode_step``
        takes the newest target ids ``(B, Tnew)`` and returns logits ``(B, Tnew, V)``.
    """

    config: Any  # provides pad_id, bos_id and eos_id

    def encode(self, src_ids: Tensor, src_lengths: Tensor) -> Any: ...
    def init_cache(self) -> Any: ...
    def decode_step(self, tgt_ids: Tensor, encoded: Any, cache: Any, *, return_weights: bool = ...) -> Any: ...


@dataclass
class DecodeResult:
    """Decoded token ids (no ``[BOS]``, no ``[EOS]``) per source, best first.

    Attributes:
        tokens: one list of ids per source.
        scores: the hypothesis score per source (summed log-probability for greedy,
            length-normalised for beam search with ``alpha > 0``).
        alignments: per source, a ``(Tt, Ts_b)`` tensor (``Tt`` = generated tokens
            including ``[EOS]`` when emitted, ``Ts_b`` = that source's length), or None.

    Shape:
        alignments: one ``(Tt, Ts_b)`` tensor per source.
    """

    tokens: list[list[int]]
    scores: list[float]
    alignments: list[Tensor] | None = None


def _check_source(src_ids: object, src_lengths: object) -> tuple[Tensor, Tensor]:
    if not isinstance(src_ids, Tensor) or not isinstance(src_lengths, Tensor):
        raise TypeError("src_ids and src_lengths must be torch.Tensors")
    if src_ids.dim() != 2 or src_ids.shape[0] == 0:
        raise ValueError(f"src_ids must be a non-empty (B, Ts) batch, got shape {tuple(src_ids.shape)}")
    if src_lengths.shape != (src_ids.shape[0],):
        raise ValueError(f"src_lengths must be (B,) = ({src_ids.shape[0]},), got {tuple(src_lengths.shape)}")
    if int(src_lengths.min()) < 1:
        raise ValueError("src_lengths must be >= 1: an empty source cannot be translated")
    return src_ids, src_lengths


def _translation_step(model: IncrementalDecoder, want_alignment: bool, layer: int) -> StepFunction[Any]:
    """The model's step function; its weights: the head-averaged cross-attention of ``layer``, ``(N, Ts)``."""
    blocked = [model.config.pad_id, model.config.bos_id]

    def step(last: Tensor, state: tuple[Any, Any]) -> tuple[Tensor, Tensor | None, tuple[Any, Any]]:
        encoded, cache = state
        row: Tensor | None = None
        if want_alignment:
            logits, weights = model.decode_step(last[:, None], encoded, cache, return_weights=True)
            row = weights[layer].cross_attn[:, :, -1, :].float().mean(dim=1)  # (N, Ts)
        else:
            logits = model.decode_step(last[:, None], encoded, cache)
        logp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)  # (N, V)
        logp[:, blocked] = float("-inf")  # [PAD] and [BOS] are inputs, never outputs
        return logp, row, state

    return step


def _translate(search: Callable[..., list[Hypothesis]], model: IncrementalDecoder, src_ids: Tensor,
               src_lengths: Tensor, return_alignment: bool, layer: int, **options: Any) -> DecodeResult:
    """Run ``search`` with the model's step function from state ``(encoded, cache)``."""
    src_ids, src_lengths = _check_source(src_ids, src_lengths)
    check_search(options["max_len"], options.get("beam_size", 1), options.get("length_penalty", 0.0))
    state = (model.encode(src_ids, src_lengths), model.init_cache())
    hyps = search(_translation_step(model, return_alignment, layer), state, batch_size=src_ids.shape[0],
                  bos_id=model.config.bos_id, eos_id=model.config.eos_id, device=src_ids.device, **options)
    # (Tt, Ts_b) each: the generated tokens over that source's real tokens
    alignments = [h.weights[:, : int(n)].cpu() for h, n in zip(hyps, src_lengths.tolist(), strict=True)
                  if h.weights is not None] if return_alignment else None
    return DecodeResult([h.tokens for h in hyps], [h.score for h in hyps], alignments)


@torch.no_grad()
def greedy_decode(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, max_len: int | Sequence[int],
    return_alignment: bool = False, alignment_layer: int = -1,
) -> DecodeResult:
    """Pick the most probable token at every step until ``[EOS]`` or ``max_len`` tokens.

    The model should be in eval mode (dropout off). On request, the alignment
    of each source is the cross-attention of ``alignment_layer`` (the last by
    default), averaged over heads: one row per generated token (``[EOS]``
    included) over the real source tokens; each row sums to 1.

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``.
    """
    return _translate(greedy_over_steps, model, src_ids, src_lengths, return_alignment, alignment_layer,
                      max_len=max_len)


@torch.no_grad()
def beam_search(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, beam_size: int = BEAM_SIZE,
    max_len: int | Sequence[int], length_penalty: float = LENGTH_PENALTY, return_alignment: bool = False,
    alignment_layer: int = -1,
) -> DecodeResult:
    """Beam search with the GNMT length penalty; ``beam_size=1`` equals :func:`greedy_decode`.

    Args:
        model: an :class:`IncrementalDecoder` in eval mode.
        src_ids: the padded source batch.
        src_lengths: the source lengths.
        beam_size: hypotheses kept per source (K).
        max_len: most tokens generated per hypothesis (``[EOS]`` included); or one limit per source, so
            that each decodes as it would alone.
        length_penalty: the GNMT exponent alpha (0.6 in GNMT; 0 disables it).
        return_alignment: also return the best hypothesis' cross-attention.
        alignment_layer: decoder layer whose cross-attention is the alignment.

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``.
    """
    return _translate(beam_search_over_steps, model, src_ids, src_lengths, return_alignment, alignment_layer,
                      max_len=max_len, beam_size=beam_size, length_penalty=length_penalty)


@torch.no_grad()
def beam_alternatives(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, beam_size: int = BEAM_SIZE,
    max_len: int | Sequence[int], length_penalty: float = LENGTH_PENALTY, n_best: int | None = None,
) -> list[list[Hypothesis]]:
    """The beam's finished hypotheses of each source, best first: :func:`beam_search`'s search with
    ``n_best`` (default ``beam_size``) answers per source instead of one; the first is :func:`beam_search`'s.

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``; returns B lists of hypotheses.
    """
    src_ids, src_lengths = _check_source(src_ids, src_lengths)
    check_search(max_len, beam_size, length_penalty)
    state = (model.encode(src_ids, src_lengths), model.init_cache())
    return n_best_over_steps(_translation_step(model, False, -1), state, batch_size=src_ids.shape[0],
                             bos_id=model.config.bos_id, eos_id=model.config.eos_id, device=src_ids.device,
                             max_len=max_len, beam_size=beam_size, length_penalty=length_penalty,
                             n_best=n_best or beam_size)
