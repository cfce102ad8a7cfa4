"""Greedy decoding and beam search: beam 1 = greedy, exact search on a tiny space, alignments, errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.decoding import beam_search, gnmt_length_penalty, greedy_decode
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def model_with(vocab: int, seed: int) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, num_heads=2, d_ff=32, encoder_layers=1,
        decoder_layers=2, dropout=0.0, shared_vocab=True))
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
