"""Greedy decoding and beam search, once, for every generator in attnkit.

The search never sees a model. It drives a **step function**::

    log_probs, weights, state = step(last_tokens, state)
        last_tokens (N,)   the newest token of each of N hypotheses ([BOS] at the start)
        log_probs   (N, V) log-probabilities of the next token
        weights     (N, X) attention weights used for that token (e.g. over source tokens
                           or image regions), or None
        state              whatever the model carries from step to step

and reorders ``state`` (:func:`reorder_state`) when beams are kept, dropped or
duplicated. :func:`greedy_over_steps` and :func:`beam_search_over_steps` are
the two searches; :func:`greedy_decode` and :func:`beam_search` wrap them for
the translation model (:class:`IncrementalDecoder`: a KV cache, each step
feeds only the newest token), :class:`~attnkit.models.captioner.ImageCaptioner`
for its attending LSTM.

**Beam search** keeps the ``K`` best partial hypotheses of each input by
summed log-probability. At each step the ``2K`` best continuations are
ranked; an ``[EOS]`` among the first ``K`` finishes a hypothesis, and the
first ``K`` others live on. An input is done once it has ``K`` finished
hypotheses and none of its live ones, scored as if it ended now, beats the
best of them (with ``alpha = 0`` no live one can then win: log-probabilities
only fall), or once ``max_len`` tokens were generated (the live ones then
finish as they are). With ``K = 1`` this is exactly greedy decoding.

**Length penalty.** A finished hypothesis ``Y`` is ranked by the GNMT score
(Wu et al., 2016, eq. 14)::

    score(Y) = log P(Y | X) / lp(Y),      lp(Y) = ((5 + |Y|) / 6) ** alpha

where ``|Y|`` is the number of generated tokens **including the** ``[EOS]``
when one was emitted (a hypothesis cut at ``max_len`` has ``|Y| = max_len``),
and ``log P(Y | X)`` sums the log-probabilities of the same ``|Y|`` tokens.
``alpha = 0`` ranks by the raw log-probability, which favours short outputs;
GNMT used 0.6. :func:`gnmt_length_penalty` is ``lp``.

Shape legend: B batch (inputs), K beam size, N = B·K hypotheses, V vocabulary,
Ts source length, X attended positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from attnkit._checks import positive_int

__all__ = ["IncrementalDecoder", "DecodeResult", "Hypothesis", "StepFunction", "greedy_decode", "beam_search",
           "greedy_over_steps", "beam_search_over_steps", "reorder_state", "gnmt_length_penalty"]

State = TypeVar("State")
StepFunction = Callable[[Tensor, State], tuple[Tensor, Tensor | None, State]]
"""``step(last_tokens (N,), state) -> (log_probs (N, V), weights (N, X) or None, new state)``."""


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + length) / 6) ** alpha``; ``length`` = ``|Y|``, ``[EOS]`` included."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    """One finished hypothesis of :func:`greedy_over_steps` or :func:`beam_search_over_steps`.

    Attributes:
        tokens: the generated ids, ``[BOS]`` and ``[EOS]`` left out.
        log_prob: ``log P(Y | X)``, summed over the ``length`` generated tokens.
        score: ``log_prob / gnmt_length_penalty(length, alpha)`` (greedy: ``log_prob``).
        length: ``|Y|``, generated tokens including the ``[EOS]`` when ``ended``.
        ended: whether it ended with ``[EOS]`` (False: cut at ``max_len``).
        weights: the step function's weights, a row per generated token (``[EOS]`` too), or None.

    Shape:
        weights ``(length, X)``.
    """

    tokens: list[int]
    log_prob: float
    score: float
    length: int
    ended: bool
    weights: Tensor | None = None


def reorder_state(state: Any, index: Tensor) -> Any:
    """Keep (or repeat) hypotheses ``index`` of a decoding state, recursively.

    An object with a ``reorder(index)`` method is reordered in place, one with
    ``index_select(index)`` is replaced by its result (both are asked first,
    so a named tuple may define its own); tensors are indexed along dim 0;
    tuples, lists and dicts element by element; ``None`` stays.

    Shape:
        index ``(N',)`` of positions in the current ``(N, ...)`` state.
    """
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.index_select(0, index)
    if callable(getattr(state, "reorder", None)):
        state.reorder(index)
        return state
    if callable(getattr(state, "index_select", None)):
        return state.index_select(index)
    if isinstance(state, dict):
        return {key: reorder_state(part, index) for key, part in state.items()}
    if isinstance(state, tuple | list):
        parts = [reorder_state(part, index) for part in state]
        return type(state)(*parts) if hasattr(state, "_fields") else type(state)(parts)  # named tuples too
    raise TypeError(f"cannot reorder a decoding state of type {type(state).__name__}: give tensors, "
                    "tuples, lists, dicts, or objects with reorder(index) or index_select(index)")


def _check_search(max_len: object, beam_size: object = 1, length_penalty: object = 0.0) -> float:
    positive_int("max_len", max_len)
    positive_int("beam_size", beam_size)
    alpha = length_penalty
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha < 0:
        raise ValueError(f"length_penalty must be a non-negative number (the GNMT alpha), got {alpha!r}")
    return float(alpha)


@torch.no_grad()
def greedy_over_steps(step: StepFunction[State], state: State, *, batch_size: int, bos_id: int, eos_id: int,
                      max_len: int, device: torch.device | str = "cpu") -> list[Hypothesis]:
    """The most probable token at every step until ``[EOS]`` or ``max_len`` tokens, for B inputs.

    ``state`` holds the B inputs along dim 0. Scores are summed log-probabilities
    (no length penalty: each hypothesis is the only one of its input).

    Shape:
        ``step`` maps last tokens ``(B,)`` to log-probabilities ``(B, V)`` and
        weights ``(B, X)`` or None; returns B hypotheses with weights ``(length, X)``.
    """
    _check_search(max_len)
    prev = torch.full((batch_size,), bos_id, dtype=torch.long, device=device)  # (B,)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    scores = torch.zeros(batch_size, device=device)
    out: list[Tensor] = []  # (B,) per step
    rows: list[Tensor] = []  # (B, X) per step
    for _ in range(max_len):
        logp, row, state = step(prev, state)
        best_logp, best = logp.max(dim=-1)  # (B,)
        scores = scores + torch.where(finished, torch.zeros_like(best_logp), best_logp)
        prev = torch.where(finished, torch.full_like(best, eos_id), best)
        out.append(prev)
        if row is not None:
            rows.append(row)
        finished = finished | (prev == eos_id)
        if bool(finished.all()):
            break
    stacked = torch.stack(rows, dim=1) if rows else None  # (B, L, X)
    result = []
    for i, (seq, score) in enumerate(zip(torch.stack(out, dim=1).tolist(), scores.tolist(), strict=True)):  # (B, L)
        ended = eos_id in seq
        n = seq.index(eos_id) + 1 if ended else len(seq)  # generated steps, [EOS] included
        result.append(Hypothesis(seq[: n - 1] if ended else seq, score, score, n, ended,
                                 None if stacked is None else stacked[i, :n]))
    return result


@torch.no_grad()
def beam_search_over_steps(
    step: StepFunction[State], state: State, *, batch_size: int, bos_id: int, eos_id: int, max_len: int,
    beam_size: int = 4, length_penalty: float = 0.0, device: torch.device | str = "cpu",
    reorder: Callable[[State, Tensor], State] = reorder_state,
) -> list[Hypothesis]:
    """Beam search (see the module docstring) for B inputs at once; the best hypothesis of each.

    Args:
        step: the step function; it sees the ``B·K`` hypotheses as one batch,
            input ``b``'s beams at rows ``b·K ... b·K + K − 1``.
        state: the state of the B inputs; it is first expanded to ``B·K`` rows
            with ``reorder`` and reordered the same way after every step.
        batch_size: B.
        bos_id, eos_id: the start token fed first, and the token that ends a hypothesis.
        max_len: most tokens generated per hypothesis (``[EOS]`` included).
        beam_size: K.
        length_penalty: the GNMT exponent ``alpha`` (0: rank by log-probability).
        device: where the token and score tensors live.
        reorder: ``reorder(state, index) -> state``; :func:`reorder_state` by default.

    Shape:
        ``step`` maps last tokens ``(B·K,)`` to log-probabilities ``(B·K, V)`` and
        weights ``(B·K, X)`` or None; returns B hypotheses with weights ``(length, X)``.
    """
    alpha = _check_search(max_len, beam_size, length_penalty)
    b, k = batch_size, beam_size
    state = reorder(state, torch.arange(b, device=device).repeat_interleave(k))  # (B*K, ...)
    tokens = torch.full((b * k, 1), bos_id, dtype=torch.long, device=device)  # (B*K, t)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # only the first beam is live at the start, so the K beams do not duplicate it
    weights: Tensor | None = None  # (B*K, t, X)
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    done = [False] * b
    for t in range(1, max_len + 1):
        logp, row, state = step(tokens[:, -1], state)
        if row is not None:
            weights = row[:, None, :] if weights is None else torch.cat([weights, row[:, None, :]], dim=1)
        keep_beam, keep_token, scores = _advance(scores, logp.view(b, k, -1), tokens, weights, finished, done,
                                                 step=t, eos_id=eos_id, alpha=alpha)
        for i, live in enumerate(scores.max(dim=1).values.tolist()):  # the best live one, as if it ended now
            done[i] = done[i] or live == float("-inf") or (
                len(finished[i]) >= k and max(h.score for h in finished[i]) >= live / gnmt_length_penalty(t, alpha))
        if all(done):
            break
        index = (torch.arange(b, device=device)[:, None] * k + keep_beam).view(-1)  # (B*K,)
        state = reorder(state, index)
        weights = None if weights is None else weights.index_select(0, index)
        tokens = torch.cat([tokens.index_select(0, index), keep_token.view(-1, 1)], dim=1)  # (B*K, t+1)
        if t == max_len:  # out of length: the live hypotheses finish as they are
            _finish_live(scores, tokens, weights, finished, done, length=t, alpha=alpha)
    return [max(hyps, key=lambda h: h.score) for hyps in finished]


def _advance(scores: Tensor, logp: Tensor, tokens: Tensor, weights: Tensor | None,
             finished: list[list[Hypothesis]], done: list[bool], *, step: int, eos_id: int,
             alpha: float) -> tuple[Tensor, Tensor, Tensor]:
    """Finish the ``[EOS]`` continuations among each input's K best, keep the K best others.

    Shape: scores ``(B, K)``, logp ``(B, K, V)``; returns the kept beams, tokens and scores, ``(B, K)`` each.
    """
    b, k, vocab = logp.shape
    total = (scores[:, :, None] + logp).view(b, k * vocab)  # (B, K*V)
    top_scores, top_index = total.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K)
    keep_beam = torch.zeros(b, k, dtype=torch.long, device=scores.device)
    keep_token = torch.full((b, k), eos_id, dtype=torch.long, device=scores.device)
    new_scores = torch.full((b, k), float("-inf"), device=scores.device)
    # Python lists: the bookkeeping below reads single entries, far cheaper than tensor indexing.
    cand_scores, cand_beams = top_scores.tolist(), (top_index // vocab).tolist()
    cand_tokens = (top_index % vocab).tolist()
    for i in range(b):
        if done[i]:
            continue
        live = 0
        for rank, (score, beam, token) in enumerate(zip(cand_scores[i], cand_beams[i], cand_tokens[i], strict=True)):
            if score == float("-inf"):
                break
            flat = i * k + beam
            if token == eos_id:
                if rank < k:
                    finished[i].append(_hypothesis(tokens[flat, 1:].tolist(), score, step, True,
                                                   None if weights is None else weights[flat], alpha))
                continue
            keep_beam[i, live], keep_token[i, live], new_scores[i, live] = beam, token, score
            live += 1
            if live == k:
                break
    return keep_beam, keep_token, new_scores


def _finish_live(scores: Tensor, tokens: Tensor, weights: Tensor | None, finished: list[list[Hypothesis]],
                 done: list[bool], *, length: int, alpha: float) -> None:
    """Finish every live hypothesis of the inputs not yet done (``max_len`` reached, no ``[EOS]``)."""
    k = scores.shape[1]
    for i, row in enumerate(scores.tolist()):
        if not done[i]:
            finished[i] += [_hypothesis(tokens[i * k + j, 1:].tolist(), score, length, False,
                                        None if weights is None else weights[i * k + j], alpha)
                            for j, score in enumerate(row) if score != float("-inf")]


def _hypothesis(tokens: list[int], log_prob: float, length: int, ended: bool, weights: Tensor | None,
                alpha: float) -> Hypothesis:
    return Hypothesis(tokens, log_prob, log_prob / gnmt_length_penalty(length, alpha), length, ended, weights)


# --- the translation model: an encoder-decoder with a KV cache ----------------------------------------


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
    _check_search(options["max_len"], options.get("beam_size", 1), options.get("length_penalty", 0.0))
    state = (model.encode(src_ids, src_lengths), model.init_cache())
    hyps = search(_translation_step(model, return_alignment, layer), state, batch_size=src_ids.shape[0],
                  bos_id=model.config.bos_id, eos_id=model.config.eos_id, device=src_ids.device, **options)
    # (Tt, Ts_b) each: the generated tokens over that source's real tokens
    alignments = [h.weights[:, : int(n)].cpu() for h, n in zip(hyps, src_lengths.tolist(), strict=True)
                  if h.weights is not None] if return_alignment else None
    return DecodeResult([h.tokens for h in hyps], [h.score for h in hyps], alignments)


@torch.no_grad()
def greedy_decode(
    model: IncrementalDecoder, src_ids: Tensor, src_lengths: Tensor, *, max_len: int,
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
    return _translate(beam_search_over_steps, model, src_ids, src_lengths, return_alignment, alignment_layer,
                      max_len=max_len, beam_size=beam_size, length_penalty=length_penalty)
