"""The searches over a step function: greedy and beam search (see :mod:`attnkit.decoding`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from attnkit._checks import positive_int

__all__ = ["Hypothesis", "StepFunction", "greedy_over_steps", "beam_search_over_steps", "n_best_over_steps",
           "reorder_state", "gnmt_length_penalty", "ensemble_steps", "check_search"]

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
        score: ``log_prob / gnmt_length_penalty(length, alpha) + length_bonus * length`` (greedy: ``log_prob``).
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


def ensemble_steps(steps: Sequence[StepFunction[Any]]) -> StepFunction[tuple[Any, ...]]:
    """One step function from several that score the same vocabulary: an ensemble.

    The next-token distribution is the mean of the members' probabilities
    (``log mean_m exp(log_probs_m)``); the weights are the mean of the members'
    when every member gives weights of one shape, else None; the state is the
    tuple of the members' states (reordered part by part by :func:`reorder_state`).
    Start it with ``tuple(start_state_m for each member)``.

    Shape:
        each member maps last tokens ``(N,)`` to ``(N, V)`` with one ``V``; so does the ensemble.
    """
    members = list(steps)
    if not members or not all(callable(s) for s in members):
        raise ValueError(f"ensemble_steps needs one or more step functions, got {steps!r}")
    log_m = math.log(len(members))

    def step(prev: Tensor, state: tuple[Any, ...]) -> tuple[Tensor, Tensor | None, tuple[Any, ...]]:
        if not isinstance(state, tuple) or len(state) != len(members):
            raise ValueError(f"an ensemble of {len(members)} steps needs a tuple of {len(members)} states, "
                             f"got {type(state).__name__}")
        outs = [member(prev, part) for member, part in zip(members, state, strict=True)]
        shapes = {tuple(o[0].shape) for o in outs}
        if len(shapes) != 1:
            raise ValueError(f"ensemble members must score one vocabulary: they gave log-probabilities of "
                             f"shapes {sorted(shapes)}")
        logp = torch.logsumexp(torch.stack([o[0] for o in outs]), dim=0) - log_m  # (N, V)
        rows = [o[1] for o in outs]
        same = all(r is not None for r in rows) and len({tuple(r.shape) for r in rows if r is not None}) == 1
        weights = torch.stack([r for r in rows if r is not None]).mean(dim=0) if same else None  # (N, X)
        return logp, weights, tuple(o[2] for o in outs)
    return step


def check_search(max_len: object, beam_size: object = 1, length_penalty: object = 0.0,
                 length_bonus: object = 0.0, min_len: object = 0) -> float:
    """Check the settings of a search (a ValueError names the bad one); returns ``length_penalty`` as a float.
    ``max_len`` may be one limit per input (a sequence); ``min_len`` must be below each."""
    if isinstance(max_len, list | tuple):
        if not max_len:
            raise ValueError("max_len must give one limit per input, got an empty sequence")
        for i, limit in enumerate(max_len):
            positive_int(f"max_len[{i}]", limit)
        max_len = min(max_len)
    positive_int("max_len", max_len)
    positive_int("beam_size", beam_size)
    for name, value in (("length_penalty", length_penalty), ("length_bonus", length_bonus)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    if isinstance(min_len, bool) or not isinstance(min_len, int) or not 0 <= min_len < max_len:  # type: ignore[operator]
        raise ValueError(f"min_len must be an int in [0, max_len) = [0, {max_len}), got {min_len!r}")
    return float(length_penalty)  # type: ignore[arg-type]


@torch.no_grad()
def greedy_over_steps(step: StepFunction[State], state: State, *, batch_size: int, bos_id: int, eos_id: int,
                      max_len: int | Sequence[int], device: torch.device | str = "cpu") -> list[Hypothesis]:
    """The most probable token at every step until ``[EOS]`` or ``max_len`` tokens (one limit, or one per
    input: an input then decodes as it would alone), for B inputs.

    ``state`` holds the B inputs along dim 0. Scores are summed log-probabilities
    (no length penalty: each hypothesis is the only one of its input).

    Shape:
        ``step`` maps last tokens ``(B,)`` to log-probabilities ``(B, V)`` and
        weights ``(B, X)`` or None; returns B hypotheses with weights ``(length, X)``.
    """
    limits = _limits(max_len, batch_size)
    prev = torch.full((batch_size,), bos_id, dtype=torch.long, device=device)  # (B,)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    scores = torch.zeros(batch_size, device=device)
    out: list[Tensor] = []  # (B,) per step
    rows: list[Tensor] = []  # (B, X) per step
    for t in range(max(limits)):
        finished = finished | torch.tensor([t >= n for n in limits], device=device)  # out of length
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
        seq = seq[: limits[i]]
        ended = eos_id in seq
        n = seq.index(eos_id) + 1 if ended else len(seq)  # generated steps, [EOS] included
        result.append(Hypothesis(seq[: n - 1] if ended else seq, score, score, n, ended,
                                 None if stacked is None else stacked[i, :n]))
    return result


@torch.no_grad()
def beam_search_over_steps(
    step: StepFunction[State], state: State, *, batch_size: int, bos_id: int, eos_id: int, max_len: int,
    beam_size: int, length_penalty: float = 0.0, length_bonus: float = 0.0, min_len: int = 0,
    block_repeats: bool = False, device: torch.device | str = "cpu",
    reorder: Callable[[State, Tensor], State] = reorder_state,
) -> list[Hypothesis]:
    """Beam search (see the module docstring) for B inputs at once; the best hypothesis of each.

    The arguments are those of :func:`n_best_over_steps`, which this is with ``n_best=1``.

    Shape:
        returns B hypotheses with weights ``(length, X)``.
    """
    return [hyps[0] for hyps in n_best_over_steps(
        step, state, batch_size=batch_size, bos_id=bos_id, eos_id=eos_id, max_len=max_len, beam_size=beam_size,
        length_penalty=length_penalty, length_bonus=length_bonus, min_len=min_len, block_repeats=block_repeats,
        device=device, reorder=reorder, n_best=1)]


@torch.no_grad()
def n_best_over_steps(
    step: StepFunction[State], state: State, *, batch_size: int, bos_id: int, eos_id: int,
    max_len: int | Sequence[int], beam_size: int, length_penalty: float = 0.0, length_bonus: float = 0.0,
    min_len: int = 0, block_repeats: bool = False, device: torch.device | str = "cpu",
    reorder: Callable[[State, Tensor], State] = reorder_state, n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Beam search (see the module docstring) for B inputs at once; the ``n_best`` best finished
    hypotheses of each, best first (fewer when the search finished fewer; at least one).

    A beam of ``K`` usually finishes ``K`` or more hypotheses per input, so
    ``n_best <= beam_size`` lists are nearly always full; the list is what a
    re-ranker (:func:`attnkit.decoding.rerank.consensus_pick`) chooses from.

    Args:
        step: the step function; it sees the ``B·K`` hypotheses as one batch,
            input ``b``'s beams at rows ``b·K ... b·K + K − 1``.
        state: the state of the B inputs; it is first expanded to ``B·K`` rows
            with ``reorder`` and reordered the same way after every step.
        batch_size: B.
        bos_id: the start token, fed first.
        eos_id: the token that ends a hypothesis.
        max_len: most tokens generated per hypothesis (``[EOS]`` included); one limit, or one per input
            (an input then decodes as it would alone).
        beam_size: K.
        length_penalty: the GNMT exponent ``alpha`` (0: rank by log-probability).
        length_bonus: ``beta``, added per generated token to a finished hypothesis' score.
        min_len: no ``[EOS]`` among the first ``min_len`` generated tokens.
        block_repeats: forbid generating the token just generated.
        device: where the token and score tensors live.
        reorder: ``reorder(state, index) -> state``; :func:`reorder_state` by default.
        n_best: how many finished hypotheses to return per input.

    Shape:
        ``step`` maps last tokens ``(B·K,)`` to log-probabilities ``(B·K, V)`` and
        weights ``(B·K, X)`` or None; returns B lists of hypotheses with weights ``(length, X)``.
    """
    alpha = check_search(max_len, beam_size, length_penalty, length_bonus, min_len)
    limits = _limits(max_len, batch_size)
    positive_int("n_best", n_best)
    bonus = float(length_bonus)
    b, k = batch_size, beam_size
    state = reorder(state, torch.arange(b, device=device).repeat_interleave(k))  # (B*K, ...)
    tokens = torch.full((b * k, 1), bos_id, dtype=torch.long, device=device)  # (B*K, t)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # only the first beam is live at the start, so the K beams do not duplicate it
    weights: Tensor | None = None  # (B*K, t, X)
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    done = [False] * b
    for t in range(1, max(limits) + 1):
        logp, row, state = step(tokens[:, -1], state)
        if row is not None:
            weights = row[:, None, :] if weights is None else torch.cat([weights, row[:, None, :]], dim=1)
        logp = _constrain(logp, tokens[:, -1], t, eos_id=eos_id, min_len=min_len, block_repeats=block_repeats)
        keep_beam, keep_token, scores = _advance(scores, logp.view(b, k, -1), tokens, weights, finished, done,
                                                 step=t, eos_id=eos_id, scoring=(alpha, bonus))
        for i, live in enumerate(scores.max(dim=1).values.tolist()):  # the best live one, as if it ended now
            done[i] = done[i] or live == float("-inf") or (len(finished[i]) >= k and max(
                h.score for h in finished[i]) >= live / gnmt_length_penalty(t, alpha) + bonus * t)
        if all(done):
            break
        index = (torch.arange(b, device=device)[:, None] * k + keep_beam).view(-1)  # (B*K,)
        state = reorder(state, index)
        weights = None if weights is None else weights.index_select(0, index)
        tokens = torch.cat([tokens.index_select(0, index), keep_token.view(-1, 1)], dim=1)  # (B*K, t+1)
        ending = [i for i in range(b) if limits[i] == t and not done[i]]
        if ending:  # out of length: the live hypotheses finish as they are
            _finish_live(scores, tokens, weights, finished, done, length=t, scoring=(alpha, bonus), rows=ending)
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def _constrain(logp: Tensor, last: Tensor, step: int, *, eos_id: int, min_len: int, block_repeats: bool) -> Tensor:
    """``[EOS]`` forbidden while ``step <= min_len``; with ``block_repeats`` the last token too (not at step 1).

    Shape: logp ``(N, V)``, last ``(N,)``; returns ``(N, V)``.
    """
    if step > min_len and not (block_repeats and step > 1):
        return logp
    logp = logp.clone()
    if step <= min_len:
        logp[:, eos_id] = float("-inf")
    if block_repeats and step > 1:
        logp.scatter_(1, last[:, None], float("-inf"))
    return logp


def _advance(scores: Tensor, logp: Tensor, tokens: Tensor, weights: Tensor | None,
             finished: list[list[Hypothesis]], done: list[bool], *, step: int, eos_id: int,
             scoring: tuple[float, float]) -> tuple[Tensor, Tensor, Tensor]:
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
                                                   None if weights is None else weights[flat], scoring))
                continue
            keep_beam[i, live], keep_token[i, live], new_scores[i, live] = beam, token, score
            live += 1
            if live == k:
                break
    return keep_beam, keep_token, new_scores


def _finish_live(scores: Tensor, tokens: Tensor, weights: Tensor | None, finished: list[list[Hypothesis]],
                 done: list[bool], *, length: int, scoring: tuple[float, float], rows: Sequence[int]) -> None:
    """Finish every live hypothesis of the inputs ``rows`` (their ``max_len`` reached, no ``[EOS]``)."""
    k = scores.shape[1]
    table = scores.tolist()
    for i in rows:
        finished[i] += [_hypothesis(tokens[i * k + j, 1:].tolist(), score, length, False,
                                    None if weights is None else weights[i * k + j], scoring)
                        for j, score in enumerate(table[i]) if score != float("-inf")]
        done[i] = True


def _limits(max_len: int | Sequence[int], batch_size: int) -> list[int]:
    """One output limit per input (checked by :func:`check_search`)."""
    check_search(max_len)
    limits = [max_len] * batch_size if isinstance(max_len, int) else list(max_len)
    if len(limits) != batch_size:
        raise ValueError(f"max_len must give one limit per input: {batch_size} inputs, {len(limits)} limits")
    return limits


def _hypothesis(tokens: list[int], log_prob: float, length: int, ended: bool, weights: Tensor | None,
                scoring: tuple[float, float]) -> Hypothesis:
    """``scoring`` = (alpha, beta): score = ``log_prob / lp(length) + beta * length``."""
    alpha, bonus = scoring
    score = log_prob / gnmt_length_penalty(length, alpha) + bonus * length
    return Hypothesis(tokens, log_prob, score, length, ended, weights)
