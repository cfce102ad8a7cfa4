"""Consensus re-ranking: sentence BLEU, the n-best beam search, the neighbour index and the captioner's
re-ranked decoding (decoding.rerank, decoding.search.n_best_over_steps, models.captioning.consensus)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.data.shapes import shapes_vocab
from attnkit.decoding import beam_search_over_steps, n_best_over_steps
from attnkit.decoding.rerank import consensus_pick, consensus_scores, ngram_counts, sentence_bleu
from attnkit.models.captioning import CaptionEnsemble, CaptionerConfig, ImageCaptioner
from attnkit.models.captioning.consensus import Consensus, NeighbourIndex

VOCAB = shapes_vocab()
TINY = {"image_size": 32, "channels": (4, 8, 8), "embed_dim": 8, "hidden_dim": 16, "attention_dim": 8,
        "dropout": 0.0, "max_len": 6}


def _tiny(seed: int) -> ImageCaptioner:
    torch.manual_seed(seed)
    return ImageCaptioner(CaptionerConfig(vocab_size=len(VOCAB), **TINY)).eval()  # type: ignore[arg-type]


@pytest.mark.parametrize(("hyp", "ref"), [
    ("a dog runs on the grass", "a brown dog runs through the grass"),
    ("a man", "a man in a red shirt is climbing a rock"),
    ("the cat sat on the mat the cat", "the cat is on the mat"),
    ("a b c d e", "a b c d e"),
    ("x y", "a b c"),
])
def test_sentence_bleu_is_sacrebleus_add_one_sentence_bleu(hyp: str, ref: str) -> None:
    from sacrebleu.metrics import BLEU

    expected = BLEU(smooth_method="add-k", smooth_value=1, tokenize="none").sentence_score(hyp, [ref]).score / 100
    assert sentence_bleu(hyp.split(), ref.split()) == pytest.approx(expected, abs=1e-12)
    # counted once, the same reference gives the same score
    assert sentence_bleu(hyp.split(), ngram_counts(ref.split()), ref_len=len(ref.split())) == pytest.approx(expected)


def test_sentence_bleu_edges() -> None:
    assert sentence_bleu([], [1, 2]) == 0.0
    assert sentence_bleu([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="needs ref_len"):
        sentence_bleu([1], ngram_counts([1]))


def test_consensus_prefers_what_the_references_say_unless_the_model_weighs_more() -> None:
    refs = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6, 4]]
    candidates = [[1, 2, 9, 9, 9], [1, 2, 3, 4]]  # the second agrees with the references
    scores = consensus_scores(candidates, refs)
    assert scores[1] > scores[0] > 0
    assert consensus_scores(candidates, []) == [0.0, 0.0]
    assert consensus_pick(candidates, [-1.0, -5.0], refs, weight=0.0) == 1
    assert consensus_pick(candidates, [-1.0, -5.0], refs, weight=10.0) == 0  # the model's order returns
    assert consensus_pick([[7], [7]], [-1.0, -1.0], refs, weight=0.0) == 0  # the first on ties
    with pytest.raises(ValueError, match="at least one candidate"):
        consensus_pick([], [], refs, weight=0.0)
    with pytest.raises(ValueError, match="2 candidates but 1 log-probabilities"):
        consensus_pick(candidates, [-1.0], refs, weight=0.0)
    with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
        consensus_pick(candidates, [-1.0, -2.0], refs, weight=-1.0)


def _markov_step(seed: int, vocab: int = 7):  # type: ignore[no-untyped-def]
    """A step function whose next-token distribution depends on the last token (a random bigram table)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.log_softmax(torch.randn(vocab, vocab, generator=g) * 2, dim=-1)

    def step(prev: torch.Tensor, state: torch.Tensor):  # type: ignore[no-untyped-def]
        return table[prev], None, state
    return step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_n_best_lists_are_sorted_and_start_with_the_beam_search_result(seed: int) -> None:
    kw = {"batch_size": 3, "bos_id": 0, "eos_id": 1, "max_len": 6, "beam_size": 4, "length_bonus": 0.3}
    best = beam_search_over_steps(_markov_step(seed), torch.zeros(3), **kw)  # type: ignore[arg-type]
    lists = n_best_over_steps(_markov_step(seed), torch.zeros(3), n_best=4, **kw)  # type: ignore[arg-type]
    assert len(lists) == 3
    for one, hyps in zip(best, lists, strict=True):
        assert 1 <= len(hyps) <= 4
        assert hyps[0].tokens == one.tokens and hyps[0].score == one.score
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)  # no hypothesis twice
    with pytest.raises(ValueError, match="n_best"):
        n_best_over_steps(_markov_step(seed), torch.zeros(3), n_best=0, **kw)  # type: ignore[arg-type]


def test_the_neighbour_index_finds_an_image_itself_and_round_trips(tmp_path: Path) -> None:
    features = torch.randn(5, 4, 6)  # 5 training images, 4 regions of width 6
    captions = [[[i, i + 1], [i]] for i in range(5)]
    index = NeighbourIndex.from_features(features, captions)
    assert index.width == 6 and torch.allclose(index.keys.norm(dim=1), torch.ones(5))
    assert index.nearest(features[[3, 1]] * 2.5, 2)[:, 0].tolist() == [3, 1]  # cosine: the scale does not matter
    assert index.references(features[[3]], 2)[0][:2] == [[3, 4], [3]]
    assert index.nearest(features[:1], 99).shape == (1, 5)
    index.save(tmp_path / "n.safetensors")
    again = NeighbourIndex.load(tmp_path / "n.safetensors")
    assert again.captions == captions and torch.allclose(again.keys, index.keys, atol=1e-3)
    with pytest.raises(ValueError, match="width 6; got features of shape \\(1, 4, 7\\)"):
        index.nearest(torch.randn(1, 4, 7), 2)
    from safetensors.torch import save_file

    save_file({"keys": torch.zeros(2, 3)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match="bad.safetensors is not a neighbour index"):
        NeighbourIndex.load(tmp_path / "bad.safetensors")
    (tmp_path / "torn.safetensors").write_bytes(b"\x10\x00 not a header")
    with pytest.raises(ValueError, match="torn.safetensors is not a neighbour index: it is not a readable"):
        NeighbourIndex.load(tmp_path / "torn.safetensors")
    with pytest.raises(ValueError, match="missing.safetensors does not exist"):
        NeighbourIndex.load(tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="got 5 keys but captions of 4 images"):
        NeighbourIndex(index.keys, captions[:4])
    with pytest.raises(ValueError, match="neighbours"):
        Consensus(index, neighbours=0)


@pytest.mark.parametrize("members", [1, 2])
def test_captioners_rerank_their_n_best_by_consensus(members: int) -> None:
    models = [_tiny(seed) for seed in range(members)]
    for m in models[1:]:
        m.encoder.load_state_dict(models[0].encoder.state_dict())
    model = models[0] if members == 1 else CaptionEnsemble(models).eval()
    features = model.encode(torch.rand(4, 3, 32, 32))
    beam = model.generate_beam(features, 6, 4, 0.0, length_bonus=0.5)
    lists = model.generate_n_best(features, 6, 4, 0.0, 4, length_bonus=0.5)
    assert [found[0].ids for found in lists] == [b.ids for b in beam]
    # the references: for each input, its last n-best caption; with weight 0 that caption is chosen
    train = torch.randn(4, *features.shape[1:])
    index = NeighbourIndex.from_features(train, [[found[-1].ids] for found in lists])
    index.keys = NeighbourIndex.pool(features)  # each input's nearest training image is itself
    chosen = model.generate_consensus(features, 6, 4, 0.0, Consensus(index, neighbours=1, weight=0.0),
                                      length_bonus=0.5)
    for found, pick in zip(lists, chosen, strict=True):
        expected = found[consensus_pick([c.ids for c in found], [c.score for c in found], [found[-1].ids],
                                        weight=0.0)]
        assert pick.ids == expected.ids and pick.weights.shape == expected.weights.shape
        assert consensus_scores([pick.ids], [found[-1].ids])[0] == max(consensus_scores([c.ids for c in found],
                                                                                        [found[-1].ids]))
    heavy = model.generate_consensus(features, 6, 4, 0.0, Consensus(index, neighbours=1, weight=1e6),
                                     length_bonus=0.5)
    assert [h.ids for h in heavy] == [max(f, key=lambda c: c.score).ids for f in lists]  # the likeliest one


def test_a_run_keeps_its_neighbour_index_across_commits(tmp_path: Path) -> None:
    from attnkit.train.runs.checkpoint import RunFileError
    from attnkit.train.runs.rundir import RunWriter, committed_dir
    from attnkit.train.tasks.caption.captioning import commit_caption_run, load_caption_neighbours

    model = _tiny(0)
    index = NeighbourIndex.from_features(torch.randn(3, 4, 8), [[[5, 6]], [[7]], [[8, 9, 10]]])
    with RunWriter(tmp_path / "run", "r1", resumable=False) as writer:
        first = commit_caption_run(writer, model, VOCAB, status="training", neighbours=index)
        second = commit_caption_run(writer, model, VOCAB, status="done")  # not given again: carried over
    assert first != second and committed_dir(tmp_path / "run") == second
    assert load_caption_neighbours(tmp_path / "run").captions == index.captions
    with RunWriter(tmp_path / "bare", "r2", resumable=False) as writer:
        commit_caption_run(writer, model, VOCAB, status="done")
    with pytest.raises(RunFileError, match="keeps no neighbour index"):
        load_caption_neighbours(tmp_path / "bare")
