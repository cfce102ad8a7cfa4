"""Greedy decoding and beam search: beam 1 = greedy, exact search on a tiny space, alignments, errors;
the length penalty counted by hand on fixed log-probabilities; one search for every generator."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.blocks import TransformerLayerConfig
from attnkit.decoding import (
    Hypothesis,
    beam_search,
    beam_search_over_steps,
    gnmt_length_penalty,
    greedy_decode,
    greedy_over_steps,
    reorder_state,
)
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def model_with(vocab: int, seed: int) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, layer=TransformerLayerConfig(16, 2, 32, norm_first=True),
        encoder_layers=1, decoder_layers=2, shared_vocab=True))
    with torch.no_grad():  # sharper, more varied distributions than the initial near-uniform ones
        model.out_proj.weight.mul_(4.0)
    return model.eval()


def source(b: int = 3, ts: int = 6, vocab: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(4, vocab, (b, ts)), torch.tensor([ts, 3, 1][:b])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_of_one_equals_greedy(seed: int) -> None:
    model = model_with(12, seed)
    src, lengths = source()
    greedy = greedy_decode(model, src, lengths, max_len=8, return_alignment=True)
    beam = beam_search(model, src, lengths, beam_size=1, length_penalty=0.0, max_len=8, return_alignment=True)
    assert beam.tokens == greedy.tokens
    assert beam.scores == pytest.approx(greedy.scores, abs=1e-5)
    assert beam.alignments is not None and greedy.alignments is not None
    for a, g in zip(beam.alignments, greedy.alignments, strict=True):
        torch.testing.assert_close(a, g)
    assert beam_search(model, src, lengths, beam_size=1, length_penalty=1.0, max_len=8).tokens == greedy.tokens


def _sequence_log_prob(model: Seq2SeqTransformer, src: torch.Tensor, lengths: torch.Tensor, seq: list[int]) -> float:
    """log P(seq | src) the way the decoders score it ([PAD] and [BOS] never produced)."""
    tgt_in = torch.tensor([[2, *seq[:-1]]]) if seq else torch.tensor([[2]])
    with torch.no_grad():
        logp = torch.log_softmax(model(src, lengths, tgt_in)[0].float(), dim=-1)
    return float(sum(logp[t, tok] for t, tok in enumerate(seq)))


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_wide_beam_finds_the_best_hypothesis_of_a_tiny_space(alpha: float) -> None:
    model = model_with(7, 5)  # outputs: [UNK]=1, [EOS]=3, 4, 5, 6
    src, lengths = torch.tensor([[4, 5, 6]]), torch.tensor([3])
    max_len, outputs = 3, [1, 4, 5, 6]
    candidates = []
    for n in range(max_len):  # n tokens then [EOS]
        candidates += [list(c) + [3] for c in itertools.product(outputs, repeat=n)]
    candidates += [list(c) for c in itertools.product(outputs, repeat=max_len)]  # cut at max_len
    best_score, best = max(
        (_sequence_log_prob(model, src, lengths, c) / gnmt_length_penalty(len(c), alpha), c) for c in candidates)
    result = beam_search(model, src, lengths, beam_size=len(candidates), length_penalty=alpha, max_len=max_len)
    expected = best[:-1] if best[-1] == 3 else best
    assert result.tokens[0] == expected
    assert result.scores[0] == pytest.approx(best_score, abs=1e-4)


def test_beam_alignment_shapes_and_rows() -> None:
    model = model_with(12, 7)
    src, lengths = source()
    result = beam_search(model, src, lengths, beam_size=3, max_len=9, return_alignment=True)
    assert result.alignments is not None
    for tokens, align, n in zip(result.tokens, result.alignments, lengths.tolist(), strict=True):
        assert align.shape[1] == n
        assert align.shape[0] in (len(tokens), len(tokens) + 1)  # + the [EOS] row when emitted
        torch.testing.assert_close(align.sum(-1), torch.ones(align.shape[0]))


def test_batched_beam_search_equals_one_source_at_a_time() -> None:
    model = model_with(12, 11)
    src, lengths = source()
    together = beam_search(model, src, lengths, beam_size=3, max_len=7)
    for i in range(3):
        n = int(lengths[i])
        alone = beam_search(model, src[i : i + 1, :n], lengths[i : i + 1], beam_size=3, max_len=7)
        assert alone.tokens[0] == together.tokens[i]
        assert alone.scores[0] == pytest.approx(together.scores[i], abs=1e-5)


def test_length_penalty_and_bad_arguments() -> None:
    assert gnmt_length_penalty(1, 0.0) == 1.0
    assert gnmt_length_penalty(7, 1.0) == pytest.approx(2.0)
    model = model_with(12, 0)
    src, lengths = source()
    with pytest.raises(ValueError, match="empty source"):
        greedy_decode(model, src, torch.tensor([6, 0, 1]), max_len=5)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, lengths, beam_size=0, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, src, lengths, beam_size=2, max_len=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(model, src, lengths, beam_size=2, max_len=4, length_penalty=-1.0)


# --- the search itself, on a step function with fixed log-probabilities ---------------------------

PAD, BOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5
V = 6


def fixed_step(after_bos: dict[int, float], after_a: dict[int, float],
               others: dict[int, dict[int, float]] | None = None):  # type: ignore[no-untyped-def]
    """A step function whose next-token log-probabilities depend only on the last token
    (unlisted tokens: -inf); its weights say which token was read."""
    def table(entries: dict[int, float]) -> torch.Tensor:
        row = torch.full((V,), float("-inf"))
        for token, logp in entries.items():
            row[token] = logp
        return row

    rows = {last: table(entries) for last, entries in {**(others or {}), BOS: after_bos, A: after_a}.items()}

    def step(last: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logp = torch.stack([rows.get(int(t), table({EOS: 0.0})) for t in last])  # (N, V)
        return logp, torch.nn.functional.one_hot(last, V).float(), state + 1  # (N, V), (N, V)

    return step


def search(after_bos: dict[int, float], after_a: dict[int, float], *, alpha: float, beam: int = 2,
           max_len: int = 4, others: dict[int, dict[int, float]] | None = None) -> Hypothesis:
    (best,) = beam_search_over_steps(fixed_step(after_bos, after_a, others), torch.zeros(1, 1), batch_size=1,
                                     bos_id=BOS, eos_id=EOS, max_len=max_len, beam_size=beam, length_penalty=alpha)
    return best


# [EOS] at once: log P = -1.0, |Y| = 1.  "a [EOS]": log P = -0.08 - L, |Y| = 2.  With alpha = 1,
# lp(1) = 1 and lp(2) = 7/6, so "a [EOS]" wins iff (0.08 + L) * 6/7 < 1, i.e. L < 1.0867.
@pytest.mark.parametrize(("eos_after_a", "expected_tokens", "expected_score"), [
    (-1.10, [], -1.0),                          # -1.18 / (7/6) = -1.0114 < -1.0: [EOS] alone wins
    (-1.02, [A], -1.10 / (7 / 6)),              # -1.10 / (7/6) = -0.9429 > -1.0: "a [EOS]" wins
])
def test_gnmt_penalty_counts_the_eos_token(eos_after_a: float, expected_tokens: list[int],
                                           expected_score: float) -> None:
    best = search({EOS: -1.0, A: -0.08}, {EOS: eos_after_a, A: -5.0}, alpha=1.0)
    assert best.tokens == expected_tokens
    assert best.ended and best.length == len(expected_tokens) + 1
    assert best.score == pytest.approx(expected_score, abs=1e-6)
    assert best.log_prob == pytest.approx(expected_score * gnmt_length_penalty(best.length, 1.0), abs=1e-6)
    assert best.weights is not None and best.weights.shape == (best.length, V)  # one row per token, [EOS] too


def test_without_penalty_the_raw_log_probability_decides() -> None:
    best = search({EOS: -1.0, A: -0.08}, {EOS: -0.5, A: -5.0}, alpha=0.0)
    assert best.tokens == [A] and best.score == pytest.approx(-0.58)


def test_search_goes_on_while_a_live_hypothesis_can_still_win() -> None:
    # Step 1 finishes "" (-0.9), step 2 finishes "a" (-0.7): K = 2 are finished, but "a b" (-0.2) is live and
    # ends at step 3 with -0.25. Stopping once K are finished would return "a".
    best = search({A: -0.1, EOS: -0.9, C: -2.0}, {B: -0.1, EOS: -0.6}, alpha=0.0,
                  others={B: {EOS: -0.05, C: -5.0}, C: {EOS: -0.5, A: -6.0}})
    assert best.tokens == [A, B] and best.score == pytest.approx(-0.25)


def test_a_hypothesis_cut_at_max_len_counts_max_len_tokens() -> None:
    # Only "a a" survives max_len = 2 without [EOS]: |Y| = 2, no [EOS] to count.
    best = search({A: -0.5}, {A: -0.25}, alpha=1.0, beam=1, max_len=2)
    assert best.tokens == [A, A] and not best.ended and best.length == 2
    assert best.score == pytest.approx(-0.75 / gnmt_length_penalty(2, 1.0))


def test_greedy_over_steps_follows_the_best_token() -> None:
    step = fixed_step({EOS: -1.0, A: -0.08}, {EOS: -0.1, A: -5.0})
    (hyp,) = greedy_over_steps(step, torch.zeros(1, 1), batch_size=1, bos_id=BOS, eos_id=EOS, max_len=5)
    assert hyp.tokens == [A] and hyp.ended and hyp.length == 2
    assert hyp.score == pytest.approx(-0.18)
    assert hyp.weights is not None and hyp.weights.argmax(-1).tolist() == [BOS, A]


class _InPlace:
    def __init__(self, values: torch.Tensor) -> None:
        self.values = values

    def reorder(self, index: torch.Tensor) -> None:
        self.values = self.values.index_select(0, index)


def test_reorder_state_handles_nested_states() -> None:
    from attnkit import masks
    from attnkit.models.seq2seq import EncoderOutput

    index = torch.tensor([2, 0, 0])
    x = torch.arange(3.0)
    cache = _InPlace(torch.arange(3) * 10)
    encoded = EncoderOutput(torch.arange(3.0)[:, None, None],
                            masks.AttentionMask.from_lengths(torch.tensor([0, 1, 1]), 1))
    out = reorder_state({"h": (x, [x * 2, None]), "cache": cache, "enc": encoded}, index)
    assert out["h"][0].tolist() == [2.0, 0.0, 0.0] and out["h"][1][0].tolist() == [4.0, 0.0, 0.0]
    assert out["h"][1][1] is None
    assert out["cache"] is cache and cache.values.tolist() == [20, 0, 0]
    assert isinstance(out["enc"], EncoderOutput) and out["enc"].memory.flatten().tolist() == [2.0, 0.0, 0.0]
    rows = out["enc"].memory_mask.rows  # the rows travel with the mask they belong to
    assert rows is not None and rows.flatten().tolist() == [True, False, False]
    assert out["enc"].memory_mask.key_mask().flatten().tolist() == [True, False, False]
    with pytest.raises(TypeError, match="cannot reorder a decoding state of type str"):
        reorder_state("state", index)


def test_the_captioner_and_the_translation_model_share_one_beam_search(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnkit.decoding.search as search
    from attnkit.data.shapes import shapes_vocab
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
    from attnkit.models.captioning import generation as caption_generation

    calls: list[int] = []
    real = search.n_best_over_steps  # beam_search_over_steps (translation's search) is its first entry

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["beam_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "n_best_over_steps", counted)
    monkeypatch.setattr(caption_generation, "n_best_over_steps", counted)
    model = model_with(12, 0)
    src, lengths = source()
    beam_search(model, src, lengths, beam_size=3, max_len=4)
    captioner = ImageCaptioner(CaptionerConfig(vocab_size=len(shapes_vocab()), image_size=32,
                                               channels=(2, 2, 2), max_len=3)).eval()
    captioner.beam_search(torch.rand(2, 3, 32, 32), beam_size=2)
    assert calls == [3, 2]


# "[EOS]" at once: log P = -1.0, |Y| = 1. "a [EOS]": log P = -1.18, |Y| = 2. With alpha = 0 and a bonus
# beta per token, "a [EOS]" wins iff -1.18 + 2 beta > -1.0 + beta, i.e. beta > 0.18.
@pytest.mark.parametrize(("bonus", "expected_tokens"), [(0.17, []), (0.19, [A])])
def test_length_bonus_adds_beta_per_token(bonus: float, expected_tokens: list[int]) -> None:
    (best,) = beam_search_over_steps(fixed_step({EOS: -1.0, A: -0.08}, {EOS: -1.1, A: -5.0}), torch.zeros(1, 1),
                                     batch_size=1, bos_id=BOS, eos_id=EOS, max_len=4, beam_size=2,
                                     length_bonus=bonus)
    assert best.tokens == expected_tokens
    assert best.score == pytest.approx(best.log_prob + bonus * best.length)


def test_min_len_holds_back_the_eos() -> None:
    step = fixed_step({EOS: -1.0, A: -0.08}, {EOS: -1.1, A: -5.0})
    kwargs = {"batch_size": 1, "bos_id": BOS, "eos_id": EOS, "max_len": 5, "beam_size": 2}
    assert beam_search_over_steps(step, torch.zeros(1, 1), **kwargs)[0].tokens == []  # type: ignore[arg-type]
    (best,) = beam_search_over_steps(step, torch.zeros(1, 1), min_len=2, **kwargs)  # type: ignore[arg-type]
    assert best.tokens == [A, A] and best.ended and best.length == 3
    assert best.log_prob == pytest.approx(-0.08 - 5.0 - 1.1)


def test_block_repeats_forbids_the_token_just_generated() -> None:
    step = fixed_step({EOS: -1.0, A: -0.08}, {A: -0.1, B: -2.0, EOS: -3.0}, others={B: {EOS: -0.1, B: -0.01}})
    kwargs = {"batch_size": 1, "bos_id": BOS, "eos_id": EOS, "max_len": 4, "beam_size": 1}
    assert beam_search_over_steps(step, torch.zeros(1, 1), **kwargs)[0].tokens == [A, A, A, A]  # type: ignore[arg-type]
    (best,) = beam_search_over_steps(step, torch.zeros(1, 1), block_repeats=True, **kwargs)  # type: ignore[arg-type]
    assert best.tokens == [A, B] and best.ended  # "b b" (-0.01) is blocked too
    assert best.log_prob == pytest.approx(-0.08 - 2.0 - 0.1)


@pytest.mark.parametrize(("options", "message"), [
    ({"length_bonus": -0.5}, "length_bonus"), ({"length_bonus": float("nan")}, "length_bonus"),
    ({"min_len": 4}, "min_len"), ({"min_len": 1.5}, "min_len"),
])
def test_bad_search_constraints(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        beam_search_over_steps(fixed_step({EOS: -1.0}, {EOS: -1.0}), torch.zeros(1, 1), batch_size=1, bos_id=BOS,
                               eos_id=EOS, max_len=4, beam_size=4, **options)  # type: ignore[arg-type]


def test_the_captioner_never_generates_pad_or_bos() -> None:
    from attnkit.data.shapes import shapes_vocab
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner

    captioner = ImageCaptioner(CaptionerConfig(vocab_size=len(shapes_vocab()), image_size=32,
                                               channels=(2, 2, 2), max_len=4)).eval()
    cfg = captioner.config
    with torch.no_grad():  # without the block, <bos> and <pad> would be the most likely words
        captioner.out.bias[cfg.bos_id] = 50.0
        captioner.out.bias[cfg.pad_id] = 40.0
    images = torch.rand(2, 3, 32, 32)
    for caption in captioner.greedy(images) + captioner.beam_search(images, beam_size=2, block_repeats=True):
        assert caption.ids and not {cfg.pad_id, cfg.bos_id} & set(caption.ids)


@pytest.mark.parametrize("beam", [1, 3])
def test_one_output_limit_per_source_decodes_each_as_it_would_alone(beam: int) -> None:
    """``max_len`` per source: a batch gives each source what it gives alone, padding and all; one past a
    limit never happens."""
    model = model_with(12, 5)
    src, lengths = source()
    limits = [7, 2, 4]
    search = greedy_decode if beam == 1 else (lambda *a, **k: beam_search(*a, beam_size=beam, **k))
    together = search(model, src, lengths, max_len=limits)
    for i, limit in enumerate(limits):
        alone = search(model, src[i : i + 1, : int(lengths[i])], lengths[i : i + 1], max_len=limit)
        assert together.tokens[i] == alone.tokens[0]
        assert together.scores[i] == pytest.approx(alone.scores[0], abs=1e-5)
        assert len(together.tokens[i]) <= limit
    with pytest.raises(ValueError, match="one limit per input: 3 inputs, 2 limits"):
        search(model, src, lengths, max_len=[4, 4])
    with pytest.raises(ValueError, match=r"max_len\[1\]"):
        search(model, src, lengths, max_len=[4, 0, 4])


def test_translation_decodes_by_one_default_stated_once() -> None:
    """attnkit translate, ``load_run(RUN).translate``, the server and :func:`beam_search` take
    ``attnkit.decoding.BEAM_SIZE`` and ``LENGTH_PENALTY``, stated there once."""
    import inspect

    from attnkit.cli import command
    from attnkit.decoding import BEAM_SIZE, LENGTH_PENALTY, beam_alternatives
    from attnkit.train.tasks.translate.served import ServedTranslator
    from attnkit.train.tasks.translate.settings import DECODING
    from attnkit.train.tasks.translate.translation_run import Translator

    assert (BEAM_SIZE, LENGTH_PENALTY) == (4, 0.6)
    assert (DECODING.beam_size, DECODING.length_penalty) == (BEAM_SIZE, LENGTH_PENALTY)
    flags = {p.name: p.default for p in command("translate").params}
    assert (flags["beam_size"], flags["length_penalty"]) == (BEAM_SIZE, LENGTH_PENALTY)
    for f in (beam_search, beam_alternatives, Translator.translate, Translator.explain, Translator.alternatives,
              ServedTranslator.translate):
        params = inspect.signature(f).parameters
        assert params["beam_size"].default == BEAM_SIZE, f
        assert "length_penalty" not in params or params["length_penalty"].default == LENGTH_PENALTY, f
