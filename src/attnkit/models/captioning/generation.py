"""Caption generation, once for a captioner and an ensemble of captioners.

:class:`CaptionGenerator` is a mixin: a class that has ``config`` (a
:class:`~attnkit.models.captioning.config.CaptionerConfig`), ``grid``,
``encode(images)`` and the two hooks ``_step_function()`` and
``_start_state(features)`` gets greedy decoding and beam search from
:mod:`attnkit.decoding` (the one search shared with translation), from region
features or from images, and :meth:`~CaptionGenerator.attention_maps`.

Shape legend: B batch, S image side, R = h·w regions, C region width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from attnkit.decoding import Hypothesis, StepFunction, greedy_over_steps
from attnkit.decoding.rerank import consensus_pick
from attnkit.decoding.search import n_best_over_steps
from attnkit.models.config import check_positive_int

if TYPE_CHECKING:
    from attnkit.models.captioning.config import CaptionerConfig
    from attnkit.models.captioning.consensus import Consensus

__all__ = ["CaptionGenerator", "GeneratedCaption"]


@dataclass
class GeneratedCaption:
    """One generated caption: word ``ids`` (no ``<bos>``/``<eos>``), its total log-probability
    ``score`` (``<eos>`` included), and the attention used to produce each word.

    Shape:
        weights ``(len(ids), R)`` over the R regions.
    """

    ids: list[int]
    score: float
    weights: Tensor


class CaptionGenerator:
    """Greedy and beam-search captions through the hooks ``_step_function`` and ``_start_state``.

    Shape:
        ``encode`` takes images ``(B, 3, S, S)`` and gives region features ``(B, R, C)``, which every
        ``generate_*`` method takes; each caption's weights are ``(n_words, R)``.
    """

    config: CaptionerConfig
    grid: tuple[int, int]

    def encode(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def _step_function(self) -> StepFunction[Any]:
        raise NotImplementedError

    def _start_state(self, features: Tensor) -> Any:
        raise NotImplementedError

    @staticmethod
    def _captions(hyps: list[Hypothesis]) -> list[GeneratedCaption]:
        """Score = log-probability with ``<eos>``; weights only for the words (no ``<eos>`` row)."""
        out = []
        for hyp in hyps:
            assert hyp.weights is not None  # the step function always returns the attention
            out.append(GeneratedCaption(hyp.tokens, hyp.log_prob, hyp.weights[: len(hyp.tokens)]))
        return out

    @torch.no_grad()
    def generate_greedy(self, features: Tensor, max_len: int) -> list[GeneratedCaption]:
        """The most likely word at every step until ``<eos>`` or ``max_len`` words (``<eos>`` included).

        Shape:
            features ``(B, R, C)``; returns B captions with weights ``(n_words, R)``.
        """
        cfg = self.config
        hyps = greedy_over_steps(self._step_function(), self._start_state(features), batch_size=features.shape[0],
                                 bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=max_len, device=features.device)
        return self._captions(hyps)

    @torch.no_grad()
    def generate_beam(self, features: Tensor, max_len: int, beam_size: int, length_penalty: float,
                      **constraints: Any) -> list[GeneratedCaption]:
        """Beam search of :func:`attnkit.decoding.beam_search_over_steps` (GNMT length penalty ``alpha``;
        ``constraints``: its ``length_bonus``, ``min_len`` and ``block_repeats``).

        Shape:
            features ``(B, R, C)``; returns B captions with weights ``(n_words, R)``.
        """
        return [best[0] for best in self.generate_n_best(features, max_len, beam_size, length_penalty, 1,
                                                         **constraints)]

    @torch.no_grad()
    def generate_n_best(self, features: Tensor, max_len: int, beam_size: int, length_penalty: float, n_best: int,
                        **constraints: Any) -> list[list[GeneratedCaption]]:
        """The ``n_best`` best finished captions of the beam search of each image, best first
        (:func:`attnkit.decoding.search.n_best_over_steps`; arguments as for :meth:`generate_beam`).

        Shape:
            features ``(B, R, C)``; returns B lists of captions with weights ``(n_words, R)``.
        """
        cfg = self.config
        lists = n_best_over_steps(self._step_function(), self._start_state(features), batch_size=features.shape[0],
                                  bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=max_len, beam_size=beam_size,
                                  length_penalty=length_penalty, n_best=n_best, **constraints,
                                  device=features.device)
        return [self._captions(hyps) for hyps in lists]

    @torch.no_grad()
    def generate_consensus(self, features: Tensor, max_len: int, beam_size: int, length_penalty: float,
                           consensus: Consensus, **constraints: Any) -> list[GeneratedCaption]:
        """Beam search, then consensus re-ranking of each image's ``beam_size`` best captions
        (:mod:`~attnkit.models.captioning.consensus`): the references are the training captions of
        the ``consensus.neighbours`` nearest training images, the log-probability weighs ``consensus.weight``.

        Shape:
            features ``(B, R, C)``; returns B captions with weights ``(n_words, R)``.
        """
        references = consensus.index.references(features, consensus.neighbours)
        lists = self.generate_n_best(features, max_len, beam_size, length_penalty, beam_size, **constraints)
        return [found[consensus_pick([c.ids for c in found], [c.score for c in found], refs, weight=consensus.weight)]
                for found, refs in zip(lists, references, strict=True)]

    # --- from images ------------------------------------------------------------------------------

    def _max_len(self, max_len: int | None) -> int:
        return self.config.max_len if max_len is None else check_positive_int("max_len", max_len)

    @torch.no_grad()
    def greedy(self, images: Tensor, *, max_len: int | None = None) -> list[GeneratedCaption]:
        """The most likely word at every step, for a batch of images.

        Stops each caption at ``<eos>`` or after ``max_len`` words (``<eos>`` included).

        Shape:
            images ``(B, 3, S, S)``; returns B captions with weights ``(n_words, R)``.
        """
        limit = self._max_len(max_len)
        return self.generate_greedy(self.encode(images), limit)

    @torch.no_grad()
    def beam_search(self, images: Tensor, *, beam_size: int, max_len: int | None = None,
                    length_penalty: float = 0.0, length_bonus: float = 0.0, min_len: int = 0,
                    block_repeats: bool = False) -> list[GeneratedCaption]:
        """Keep the ``beam_size`` best partial captions of each image at each step.

        The search is :func:`attnkit.decoding.beam_search_over_steps`, the one
        shared with translation: a caption that emits ``<eos>`` is finished,
        ``beam_size`` live ones go on until none of them can beat the best
        finished one (or for ``max_len`` steps). The best finished caption by
        the GNMT score ``log P / ((5 + |Y|) / 6) ** length_penalty`` wins,
        ``|Y|`` counting the ``<eos>`` (``length_penalty=0``: the plain sum of
        log-probabilities, so ``beam_size=1`` is exactly :meth:`greedy`). The
        returned ``score`` is the caption's log-probability, without the penalty.
        ``length_bonus`` adds that much per token to the ranking score,
        ``min_len`` forbids ``<eos>`` before that many words, ``block_repeats``
        forbids a word right after itself (see :mod:`attnkit.decoding`).

        Shape:
            images ``(B, 3, S, S)``; returns B captions with weights ``(n_words, R)``.
        """
        k = check_positive_int("beam_size", beam_size)
        limit = self._max_len(max_len)
        return self.generate_beam(self.encode(images), limit, k, length_penalty, length_bonus=length_bonus,
                                  min_len=min_len, block_repeats=block_repeats)

    def attention_maps(self, weights: Tensor) -> Tensor:
        """Per-word attention as image-shaped maps: ``(T, R) -> (T, h, w)`` (row-major regions)."""
        h, w = self.grid
        if weights.dim() != 2 or weights.shape[1] != h * w:
            raise ValueError(f"weights must be (T, R={h * w}), got shape {tuple(weights.shape)}")
        return weights.reshape(-1, h, w)  # (T, h, w)
