"""A translation run's memory plan. A translation run
(:func:`attnkit.train.tasks.translate.translation.fit_translation`) cannot shrink: :func:`check_translation`
plans it (:func:`estimate_translation`: the model with Adam, the encoded pairs and the largest token-budget
batch's step, :func:`seq2seq_step_bytes`) against the limit every run has
(:func:`attnkit.train.memory_budget.limit_and_source`) and refuses it above."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnkit.train import memory_budget as plans
from attnkit.train.memory_budget import MemoryBudget, MemoryEstimate, MemoryLimitError, format_bytes

__all__ = ["seq2seq_step_bytes", "estimate_translation", "check_translation"]


def seq2seq_step_bytes(c: Any, batch: int, source: int, target: int) -> int:
    """A :class:`~attnkit.models.Seq2SeqTransformer` training step on ``batch`` pairs padded to ``source``
    and ``target`` tokens: per source token, the embeddings and each encoder layer's floats as a
    :class:`~attnkit.models.DocumentClassifier` layer's (as :mod:`attnkit.train.tasks.classify.memory` plans it); per
    target token, each decoder layer's 20 D + 3 d_ff floats (self- and cross-attention, feed-forward) and the
    logits, 4 V floats (the logits, their log-softmax, its gradient and the smoothed loss's); with attention dropout,
    the maps read in full (``B H`` times ``Ts^2`` a encoder layer, ``Tt^2 + Tt Ts`` a decoder layer: the
    self- and cross-attention), 3.4 a layer held and 1.3 in flight."""
    from attnkit.blocks.config import resolve_dropouts

    layer, enc, dec = c.layer, c.encoder_layers, c.decoder_layers
    d, d_ff = layer.d_model, layer.d_ff
    src_tokens, tgt_tokens = batch * source, batch * target
    acts = 4 * (src_tokens * (4 * d + enc * (14 * d + 3 * d_ff))
                + tgt_tokens * (4 * d + dec * (20 * d + 3 * d_ff) + 4 * c.tgt_vocab_size))
    if resolve_dropouts(layer.dropout, layer.attention_dropout, layer.activation_dropout)[1] > 0:
        squares = enc * source * source + dec * (target * target + target * source)
        acts += (34 * squares + 13 * max(source, target) ** 2) * layer.num_heads * batch * 4 // 10
    return acts


def estimate_translation(config: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
                         max_tokens: int) -> MemoryEstimate:
    """:class:`~attnkit.train.memory_budget.MemoryEstimate` of training a
    :class:`~attnkit.models.Seq2SeqTransformer` of ``config`` (a :class:`~attnkit.models.seq2seq.Seq2SeqConfig`)
    with Adam on the encoded ``pairs`` in batches of ``max_tokens`` (:func:`attnkit.data.parallel.token_groups`):
    the model four times (parameters, gradients, two moments), the encoded pairs (Python lists of ints: about
    32 bytes a token) and the largest batch's step (:func:`seq2seq_step_bytes`)."""
    from attnkit.data.parallel import token_groups
    from attnkit.models.seq2seq import Seq2SeqTransformer

    params, buffers = plans.module_bytes(lambda: Seq2SeqTransformer(config))
    step = 0
    for group in token_groups(pairs, max_tokens, shuffle=False):
        source = max(len(pairs[i][0]) for i in group)
        target = max(len(pairs[i][1]) for i in group) + 1  # [BOS] y, y [EOS]
        step = max(step, seq2seq_step_bytes(config, len(group), source, target))
    held = 32 * sum(len(s) + len(t) for s, t in pairs)
    return MemoryEstimate(params, buffers, 0, held, step, data_name="training pairs")


def check_translation(config: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, *,
                      limit: int | None = None, budget: MemoryBudget | None = None) -> MemoryEstimate:
    """:func:`estimate_translation` of a translation run, checked against
    :func:`~attnkit.train.memory_budget.limit_and_source` of ``limit`` (``max_memory``) and ``budget`` (None:
    :func:`attnkit._memory.memory_budget` now); above it a :class:`~attnkit.train.memory_budget.MemoryLimitError`
    names the plan, the limit that bound and the settings that lower it."""
    budget = budget if budget is not None else plans.memory_budget()  # looked up when called
    bound, source = plans.limit_and_source(limit, budget)
    need = estimate_translation(config, pairs, max_tokens)
    if bound is None or need.total <= bound:
        return need
    raise MemoryLimitError(
        f"translation with {config.src_vocab_size}/{config.tgt_vocab_size} words and "
        f"{len(pairs)} training pairs needs {need.describe()}, over the limit of {format_bytes(bound)} "
        f"({source}); raise {plans._raise_what(need.total, source, budget)}, or lower `max_tokens` or `max_len` "
        f"(one batch's activations: about {format_bytes(need.activations)}), `vocab_size` or the model's size")
