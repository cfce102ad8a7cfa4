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
feeds only the newest token), :class:`~attnkit.models.captioning.ImageCaptioner`
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

**Length bonus** (a word-insertion bonus, as in phrase-based MT): ``length_bonus
= beta`` adds ``beta · |Y|`` to that score. Live hypotheses all have the same
length at a step, so the bonus changes only which *finished* one wins; the
stopping rule scores the best live one as if it ended now, bonus included
(with ``beta > 0`` a longer continuation could still win: this rule, like the
GNMT one with ``alpha > 0``, is the usual heuristic, not a bound).

**Constraints.** ``min_len = m`` forbids ``[EOS]`` among the first ``m``
generated tokens (each hypothesis gets at least ``m`` tokens before it);
``block_repeats=True`` forbids a token equal to the one just generated
("a dog dog"), never ``[BOS]``'s successor.

**Ensembles.** :func:`ensemble_steps` turns the step functions of several
models over one vocabulary into one: the mean of their next-token
probabilities, their states kept side by side; both searches run it as they
run one model (:class:`~attnkit.models.captioning.ensemble.CaptionEnsemble`).

**Re-ranking.** :func:`n_best_over_steps` is the beam search returning each
input's ``n`` best finished hypotheses; :mod:`attnkit.decoding.rerank` chooses
among them by consensus with references (the captions of similar training
images: :class:`~attnkit.models.captioning.consensus.Consensus`).

Shape legend: B batch (inputs), K beam size, N = B·K hypotheses, V vocabulary,
Ts source length, X attended positions.
"""

from typing import TYPE_CHECKING

from attnkit._lazy import lazy_exports
from attnkit.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Hypothesis", "StepFunction", "beam_search_over_steps", "ensemble_steps", "gnmt_length_penalty",
                     "greedy_over_steps", "n_best_over_steps", "reorder_state"), "attnkit.decoding.search"),
    **dict.fromkeys(("DecodeResult", "IncrementalDecoder", "beam_alternatives", "beam_search", "greedy_decode"),
                    "attnkit.decoding.translation"),
}

if TYPE_CHECKING:
    from attnkit.decoding.search import (
        Hypothesis,
        StepFunction,
        beam_search_over_steps,
        ensemble_steps,
        gnmt_length_penalty,
        greedy_over_steps,
        n_best_over_steps,
        reorder_state,
    )
    from attnkit.decoding.translation import (
        DecodeResult,
        IncrementalDecoder,
        beam_alternatives,
        beam_search,
        greedy_decode,
    )

__all__ = ["IncrementalDecoder", "DecodeResult", "Hypothesis", "StepFunction", "greedy_decode", "beam_search",
           "beam_alternatives", "greedy_over_steps", "beam_search_over_steps", "n_best_over_steps", "reorder_state",
           "gnmt_length_penalty", "ensemble_steps", "BEAM_SIZE", "LENGTH_PENALTY"]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
