"""Greedy decoding and beam search for encoder–decoder models with a KV cache.

Works with any model that offers the incremental interface of
:class:`attnkit.models.seq2seq.Seq2SeqTransformer` (see :class:`IncrementalDecoder`)::

    encoded = model.encode(src_ids, src_lengths)        # memory, reorderable by index_select
    cache = model.init_cache()
    logits, weights = model.decode_step(tokens_new, encoded, cache, return_weights=True)
    cache.reorder(index); encoded = encoded.index_select(index)

Each step feeds only the newest token; earlier keys and values come from the
cache, so a step costs ``O(t)`` instead of recomputing the whole prefix.

**Beam search** keeps the ``K`` best partial translations of each source by
summed log-probability. A hypothesis that emits ``[EOS]`` is finished and
scored with the GNMT length penalty (Wu et al., 2016, eq. 14)::

    score(Y) = log P(Y | X) / lp(Y),      lp(Y) = ((5 + |Y|) / 6) ** alpha

(``alpha = 0`` is the raw log-probability, which favours short outputs;
``|Y|`` counts the ``[EOS]``). At each step the ``2K`` best continuations are
ranked; ``[EOS]`` among the first ``K`` finish a hypothesis, and the first
``K`` others live on. A source is done once ``K`` hypotheses are finished (or
``max_len`` tokens were generated: the live ones are then finished as they are).
With ``K = 1`` this is exactly greedy decoding.

**Alignments.** On request, the cross-attention of the chosen layer (the last
by default), averaged over heads, is returned for the best hypothesis: one row
per generated token over the real source tokens; each row sums to 1.

Shape legend: B batch, K beam size, Ts source length, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from attnkit._checks import positive_int

__all__ = ["IncrementalDecoder", "DecodeResult", "greedy_decode", "beam_search", "gnmt_length_penalty"]


class IncrementalDecoder(Protocol):
    """What :func:`greedy_decode` and :func:`beam_search` need from a model.

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


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (Wu et al., 2016)."""
    return ((5.0 + length) / 6.0) ** alpha


def _check_args(src_ids: object, src_lengths: object, max_len: object) -> tuple[Tensor, Tensor, int]:
    if not isinstance(src_ids, Tensor) or not isinstance(src_lengths, Tensor):
        raise TypeError("src_ids and src_lengths must be torch.Tensors")
    if src_ids.dim() != 2 or src_ids.shape[0] == 0:
        raise ValueError(f"src_ids must be a non-empty (B, Ts) batch, got shape {tuple(src_ids.shape)}")
    if src_lengths.shape != (src_ids.shape[0],):
        raise ValueError(f"src_lengths must be (B,) = ({src_ids.shape[0]},), got {tuple(src_lengths.shape)}")
    if int(src_lengths.min()) < 1:
        raise ValueError("src_lengths must be >= 1: an empty source cannot be translated")
    return src_ids, src_lengths, positive_int("max_len", max_len)


def _alignment_row(weights: list[Any], layer: int) -> Tensor:
    """Head-averaged cross-attention of ``layer`` for the newest position: ``(B, Ts)``."""
    return weights[layer].cross_attn[:, :, -1, :].float().mean(dim=1)  # (B, Ts)


def _step(model: IncrementalDecoder, tokens: Tensor, encoded: Any, cache: Any,
          want_alignment: bool, layer: int) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of the next token ``(B, V)`` and, on request, the alignment row ``(B, Ts)``."""
    if want_alignment:
        logits, weights = model.decode_step(tokens, encoded, cache, return_weights=True)
        row: Tensor | None = _alignment_row(weights, layer)
    else:
        logits, row = model.decode_step(tokens, encoded, cache), None
    logp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)  # (B, V)
    # [PAD] and [BOS] are inputs, never outputs.
    logp[:, [model.config.pad_id, model.config.bos_id]] = float("-inf")
    return logp, row


@torch.no_grad()
def greedy_decode(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, max_len: int,
    return_alignment: bool = False, alignment_layer: int = -1,
) -> DecodeResult:
    """Pick the most probable token at every step until ``[EOS]`` or ``max_len`` tokens.

    The model should be in eval mode (dropout off).

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``.
    """
    src_ids, src_lengths, max_len = _check_args(src_ids, src_lengths, max_len)
    bos, eos = model.config.bos_id, model.config.eos_id
    b = src_ids.shape[0]
    encoded = model.encode(src_ids, src_lengths)
    cache = model.init_cache()
    tokens = torch.full((b, 1), bos, dtype=torch.long, device=src_ids.device)  # (B, 1)
    finished = torch.zeros(b, dtype=torch.bool, device=src_ids.device)
    scores = torch.zeros(b, device=src_ids.device)
    out: list[Tensor] = []
    rows: list[Tensor] = []
    for _ in range(max_len):
        logp, row = _step(model, tokens[:, -1:], encoded, cache, return_alignment, alignment_layer)
        best_logp, best = logp.max(dim=-1)  # (B,)
        scores = scores + torch.where(finished, torch.zeros_like(best_logp), best_logp)
        best = torch.where(finished, torch.full_like(best, eos), best)
        out.append(best)
        if row is not None:
            rows.append(row)
        tokens = torch.cat([tokens, best[:, None]], dim=1)  # (B, t + 1)
        finished = finished | (best == eos)
        if bool(finished.all()):
            break
    generated = torch.stack(out, dim=1).tolist()  # (B, Tt)
    result_tokens: list[list[int]] = []
    alignments: list[Tensor] | None = [] if return_alignment else None
    stacked = torch.stack(rows, dim=1) if rows else None  # (B, Tt, Ts)
    for i, seq in enumerate(generated):
        n = seq.index(eos) + 1 if eos in seq else len(seq)  # generated steps, EOS included
        result_tokens.append(seq[: n - 1] if eos in seq else seq)
        if alignments is not None and stacked is not None:
            alignments.append(stacked[i, :n, : int(src_lengths[i])].cpu())
    return DecodeResult(result_tokens, [float(s) for s in scores], alignments)


@dataclass
class _Hypothesis:
    tokens: list[int]
    score: float
    alignment: Tensor | None


@torch.no_grad()
def beam_search(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, beam_size: int = 4,
    max_len: int, length_penalty: float = 0.6, return_alignment: bool = False, alignment_layer: int = -1,
) -> DecodeResult:
    """Beam search with the GNMT length penalty; ``beam_size=1`` equals :func:`greedy_decode`.

    Args:
        model: an :class:`IncrementalDecoder` in eval mode.
        src_ids: the padded source batch.
        src_lengths: the source lengths.
        beam_size: hypotheses kept per source (K).
        max_len: most tokens generated per hypothesis (``[EOS]`` included).
        length_penalty: the GNMT exponent alpha (0.6 in GNMT; 0 disables it).
        return_alignment: also return the best hypothesis' cross-attention.
        alignment_layer: decoder layer whose cross-attention is the alignment.

    Shape:
        src_ids ``(B, Ts)``, src_lengths ``(B,)``.
    """
    src_ids, src_lengths, max_len = _check_args(src_ids, src_lengths, max_len)
    positive_int("beam_size", beam_size)
    alpha = length_penalty
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
        raise ValueError(f"length_penalty must be a non-negative number (the GNMT alpha), got {alpha!r}")
    bos, eos = model.config.bos_id, model.config.eos_id
    b, k, device = src_ids.shape[0], beam_size, src_ids.device
    expand = torch.arange(b, device=device).repeat_interleave(k)  # (B*K,) source of each beam
    encoded = model.encode(src_ids, src_lengths).index_select(expand)
    cache = model.init_cache()
    tokens = torch.full((b * k, 1), bos, dtype=torch.long, device=device)  # (B*K, 1)
    # Only the first beam of each source is live at the start, so the K beams do not duplicate it.
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    align: Tensor | None = None  # (B*K, t, Ts)
    finished: list[list[_Hypothesis]] = [[] for _ in range(b)]
    done = [False] * b
    for step in range(1, max_len + 1):
        logp, row = _step(model, tokens[:, -1:], encoded, cache, return_alignment, alignment_layer)
        if row is not None:
            align = row[:, None, :] if align is None else torch.cat([align, row[:, None, :]], dim=1)
        vocab = logp.shape[-1]
        total = (scores[:, :, None] + logp.view(b, k, vocab)).view(b, k * vocab)  # (B, K*V)
        top_scores, top_index = total.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K)
        top_beam, top_token = top_index // vocab, top_index % vocab
        keep_beam = torch.zeros(b, k, dtype=torch.long, device=device)
        keep_token = torch.full((b, k), eos, dtype=torch.long, device=device)
        new_scores = torch.full((b, k), float("-inf"), device=device)
        # Python lists: the bookkeeping below reads single entries, far cheaper than tensor indexing.
        cand_scores, cand_beams, cand_tokens = top_scores.tolist(), top_beam.tolist(), top_token.tolist()
        for i in range(b):
            if done[i]:
                continue
            live = 0
            for rank, (score, beam, token) in enumerate(zip(cand_scores[i], cand_beams[i], cand_tokens[i],
                                                            strict=True)):
                if score == float("-inf"):
                    break
                flat = i * k + beam
                if token == eos:
                    if rank < k:
                        hyp_align = None if align is None else align[flat, :, : int(src_lengths[i])].cpu()
                        finished[i].append(_Hypothesis(tokens[flat, 1:].tolist(),
                                                       score / gnmt_length_penalty(step, alpha), hyp_align))
                    continue
                keep_beam[i, live], keep_token[i, live], new_scores[i, live] = beam, token, score
                live += 1
                if live == k:
                    break
            if len(finished[i]) >= k:
                done[i] = True
        if all(done):
            break
        index = (torch.arange(b, device=device)[:, None] * k + keep_beam).view(-1)  # (B*K,)
        cache.reorder(index)
        encoded = encoded.index_select(index)
        if align is not None:
            align = align.index_select(0, index)
        tokens = torch.cat([tokens.index_select(0, index), keep_token.view(-1, 1)], dim=1)  # (B*K, t+1)
        scores = new_scores
        if step == max_len:  # out of length: the live hypotheses finish as they are
            for i in range(b):
                if done[i]:
                    continue
                for beam in range(k):
                    score = float(scores[i, beam])
                    if score == float("-inf"):
                        continue
                    flat = i * k + beam
                    hyp_align = None if align is None else align[flat, :, : int(src_lengths[i])].cpu()
                    finished[i].append(_Hypothesis(tokens[flat, 1:].tolist(),
                                                   score / gnmt_length_penalty(step, alpha), hyp_align))
    best = [max(hyps, key=lambda h: h.score) for hyps in finished]
    alignments = [h.alignment for h in best] if return_alignment else None
    return DecodeResult([h.tokens for h in best], [h.score for h in best],
                        alignments)  # type: ignore[arg-type]
