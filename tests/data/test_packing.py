"""Packed rows: the collator, explicit positions, every classifier's per-document logits, training with --pack."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.data.batching import collate
from attnkit.data.packing import PackedCollator, collate_packed, pack_rows, packed_fraction
from attnkit.models import build_model, packed
from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig
from attnkit.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from attnkit.train.config import TrainConfig
from attnkit.train.loop.trainer import Trainer
from attnkit.train.tasks.classify.task import ClassificationTask
from tests.support.cli import TINY, write_keyword_csv

VOCAB = 60


def _items(n: int = 11, seed: int = 1, longest: int = 20) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, longest + 1, (n,), generator=g).tolist()
    return [{"ids": torch.randint(1, VOCAB, (s,), generator=g), "label": torch.tensor(i % 3)}
            for i, s in enumerate(sizes)]


def test_collator_lays_documents_end_to_end_with_segments_and_positions() -> None:
    items = _items()
    batch = collate_packed(items, 32)
    ids, seg, pos = batch["ids"], batch["segment_ids"], batch["positions"]
    assert ids.shape[1] <= 32 and ids.shape == seg.shape == pos.shape
    assert ids.shape[0] < len(items)  # several documents share a row
    assert torch.equal(batch["labels"], torch.stack([it["label"] for it in items]))
    for i, item in enumerate(items):
        where = seg == i
        assert int(where.sum()) == len(item["ids"]) and int(where.any(1).sum()) == 1  # one row
        assert torch.equal(ids[where], item["ids"])
        assert torch.equal(pos[where], torch.arange(len(item["ids"])))  # restarts at 0
    assert bool((ids[seg < 0] == 0).all()) and bool((pos[seg < 0] == 0).all())
    assert batch["lengths"].tolist() == [len(it["ids"]) for it in items]
    assert repr(PackedCollator(32)) == "PackedCollator(budget=32)"


def test_pack_rows_is_first_fit_decreasing_and_refuses_long_items() -> None:
    assert pack_rows([5, 3, 4, 2], 7) == [[0, 3], [2, 1]]
    assert packed_fraction([5, 3, 4, 2], [[0, 1, 2, 3]], 7) == 0.0
    with pytest.raises(ValueError, match=r"item 1 has 9 tokens, more than the packing budget of 8"):
        pack_rows([3, 9], 8)
    with pytest.raises(ValueError, match="budget must be a positive int"):
        collate_packed(_items(), 0)


def test_explicit_positions_equal_offsets() -> None:
    x = torch.randn(2, 5, 8)
    pos = torch.tensor([[0, 1, 2, 0, 1], [3, 4, 5, 6, 7]])
    for module in (SinusoidalPositionalEncoding(8, 6), LearnedPositionalEmbedding(16, 8)):
        out = module(x, positions=pos)
        assert torch.allclose(out[0, :3], module(x[:1, :3])[0])
        assert torch.allclose(out[0, 3:], module(x[:1, 3:])[0])
        assert torch.allclose(out[1], module(x[1:], offset=3)[0])
    # Past the precomputed table the sinusoidal encoding computes the rows it needs.
    assert torch.allclose(SinusoidalPositionalEncoding(8, 6)(x, positions=pos + 10)[1],
                          SinusoidalPositionalEncoding(8, 64)(x[1:], offset=13)[0], atol=1e-6)
    rope = RotaryEmbedding(8)
    q = torch.randn(2, 3, 5, 8)
    rotated = rope.rotate(q, positions=pos)
    assert torch.allclose(rotated[:1, :, 3:], rope.rotate(q[:1, :, 3:]), atol=1e-6)
    assert torch.allclose(rotated[1:], rope.rotate(q[1:], 3), atol=1e-6)
    with pytest.raises(ValueError, match=r"positions must be \(T,\) = \(5,\) or \(B, T\) = \(2, 5\)"):
        rope.rotate(q, positions=pos[:, :4])
    with pytest.raises(ValueError, match="max_len=16"):
        LearnedPositionalEmbedding(16, 8)(x, positions=pos + 12)
    with pytest.raises(TypeError, match="positions must hold integers"):
        SinusoidalPositionalEncoding(8)(x, positions=pos.float())


MODELS = {
    "document": {"layer": {"d_model": 16, "num_heads": 2, "d_ff": 32}, "num_layers": 2, "parameter_free_layers": 1},
    "document-learned-mean": {"layer": {"d_model": 16, "num_heads": 2, "d_ff": 32}, "num_layers": 1,
                              "positional": "learned", "pooling": "mean", "max_len": 32},
    "sentiment": {"embed_dim": 12, "hidden_size": 8, "attention_dim": 8},
    "han": {"embed_dim": 12, "word_hidden": 6, "sentence_hidden": 6, "attention_dim": 8,
            "sentence_end_ids": (5, 7), "sentence_len": 4},
    "han-ngrams": {"embed_dim": 12, "word_hidden": 6, "sentence_hidden": 6, "attention_dim": 8,
                   "sentence_end_ids": (5, 7), "sentence_len": 4, "ngram_rows": 64},
}


def _fit_ngram_half(model: torch.nn.Module) -> torch.nn.Module:
    """Fit the model's n-gram half, if it has one, on random documents: packed rows must add it too."""
    if getattr(model, "has_ngram_half", False):
        gen = torch.Generator().manual_seed(1)
        model.init_from_training_data([torch.randint(3, VOCAB, (6,), generator=gen).tolist() for _ in range(30)],
                                      [i % 3 for i in range(30)])
        assert float(model.wide.abs().sum()) > 0
    return model


def _model(key: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if key == "bert":
        config = BertClassifierConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=24, num_classes=3,
                                      cls_token_id=1, sep_token_id=2, max_len=20, ngram_rows=64)
        return _fit_ngram_half(BertClassifier(config)).eval()
    name = key.split("-")[0]
    return _fit_ngram_half(build_model(name, {"vocab_size": VOCAB, "num_classes": 3, **MODELS[key]})).eval()


@pytest.mark.parametrize("key", [*MODELS, "bert"])
def test_packed_logits_equal_each_document_alone(key: str) -> None:
    model, items = _model(key), _items()
    batch = collate_packed(items, 32)
    with torch.no_grad():
        got = model(batch["ids"], segment_ids=batch["segment_ids"], positions=batch["positions"])
        alone = torch.cat([model(it["ids"][None], torch.tensor([len(it["ids"])])) for it in items])
        _, weights = model(batch["ids"], segment_ids=batch["segment_ids"], return_weights="pooling")
    assert got.shape == (len(items), 3)
    assert torch.allclose(got, alone, atol=1e-5, rtol=0), (got - alone).abs().max()
    pooling = weights["pooling"]  # (R, T): sums to 1 over each document
    sums = torch.zeros(len(items)).index_add_(0, batch["segment_ids"][batch["segment_ids"] >= 0],
                                               pooling[batch["segment_ids"] >= 0])
    assert torch.allclose(sums, torch.ones(len(items)), atol=1e-5)
    assert bool((pooling[batch["segment_ids"] < 0] == 0).all())


def test_long_rows_use_a_block_mask_with_the_same_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    model, items = _model("document"), _items(20, seed=4)
    batch = collate_packed(items, 64)
    args = (batch["ids"],)
    with torch.no_grad():
        dense = model(*args, segment_ids=batch["segment_ids"])
        monkeypatch.setattr(packed, "BLOCK_MASK_FROM", 8)
        sparse_batch = packed.packed_batch(batch["ids"], batch["segment_ids"], None, VOCAB)
        assert isinstance(sparse_batch.mask.allowed, packed.masks.BlockMask)
        sparse = model(*args, segment_ids=batch["segment_ids"])
    assert torch.allclose(dense, sparse, atol=1e-5)


def test_packed_gradients_equal_padded_gradients() -> None:
    model, items = _model("document"), _items(6)
    pb, p = collate_packed(items, 40), collate(items)
    model(pb["ids"], segment_ids=pb["segment_ids"]).sum().backward()
    packed_grads = {n: w.grad.clone() for n, w in model.named_parameters() if w.grad is not None}
    model.zero_grad()
    model(p["ids"], p["lengths"]).sum().backward()
    for name, w in model.named_parameters():
        if w.grad is not None:
            assert torch.allclose(packed_grads[name], w.grad, atol=1e-5), name


def test_bad_packed_input_is_named() -> None:
    model = _model("document")
    batch = collate_packed(_items(), 32)
    ids, seg = batch["ids"], batch["segment_ids"]
    with pytest.raises(ValueError, match=r"segment_ids must have the shape of ids \(R, T\)"):
        model(ids, segment_ids=seg[:, :-1])
    with pytest.raises(TypeError, match="segment_ids must hold integers"):
        model(ids, segment_ids=seg.float())
    split = seg.clone()
    split[0, 0], split[1, 0] = split[1, 0].item(), split[0, 0].item()
    with pytest.raises(ValueError, match="one contiguous run in one row"):
        model(ids, segment_ids=split)
    across = torch.tensor([[0, 0, 1, 1], [1, 2, 2, -1]])  # document 1 runs on into the next row
    with pytest.raises(ValueError, match="document 1 is split"):
        model(torch.ones(2, 4, dtype=torch.long), segment_ids=across)
    with pytest.raises(ValueError, match="do not occur"):
        model(ids, segment_ids=seg.masked_fill(seg == 0, -1))
    with pytest.raises(ValueError, match="positions must count 0, 1"):
        model(ids, segment_ids=seg, positions=batch["positions"] + 1)
    with pytest.raises(ValueError, match="not both"):
        model(ids, batch["lengths"], segment_ids=seg)
    with pytest.raises(ValueError, match="only the pooling weights"):
        model(ids, segment_ids=seg, return_weights=True)
    with pytest.raises(TypeError, match="needs lengths"):
        model(ids)


def test_trainer_learns_from_packed_batches() -> None:
    from attnkit.data.batching import LabelVocab, TextClassificationDataset
    from attnkit.data.synthetic import keyword_corpus
    from attnkit.data.tokenization import train_tokenizer

    examples = keyword_corpus(160, seed=2, length=(4, 14))
    tok = train_tokenizer([e.text for e in examples], kind="word", vocab_size=500)
    labels = LabelVocab.from_examples(examples)
    data = TextClassificationDataset(examples, tok, labels, 16)
    torch.manual_seed(0)
    model = build_model("document", {"vocab_size": tok.get_vocab_size(), "num_classes": len(labels),
                                     "layer": {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.0},
                                     "num_layers": 1})
    config = TrainConfig(epochs=4, batch_size=16, lr=1e-2, patience=0, device="cpu", pack=32)
    trainer = Trainer(model, config, data, data, quiet=True)
    assert isinstance(trainer.task, ClassificationTask) and isinstance(trainer.task.train_collate, PackedCollator)
    history = trainer.fit()
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_accuracy"] > 0.8


def test_cli_train_pack_and_numpy_refusal(tmp_path) -> None:
    data = write_keyword_csv(tmp_path / "reviews.csv", 120)
    out = tmp_path / "run"
    runner = CliRunner()
    result = runner.invoke(cli, ["train", "--data", str(data), "--out", str(out), "--pack", "64",
                                 "--max-len", "32", *TINY], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["train", "--data", str(data), "--out", str(tmp_path / "small"), "--pack", "16",
                                 "--max-len", "32", *TINY])
    assert result.exit_code != 0 and "--pack 16 tokens per row must hold the longest document" in result.output
    assert "raise --pack or lower --max-len" in result.output
    result = runner.invoke(cli, ["train", "--backend", "numpy", "--data", str(data), "--out",
                                 str(tmp_path / "np"), "--pack", "64"])
    assert result.exit_code != 0 and "--backend numpy does not support --pack" in result.output


def test_bert_model_takes_a_block_mask_and_position_ids() -> None:
    from attnkit import masks
    from attnkit.models.bert import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=8)).eval()
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 2, 2]])
    ids = torch.randint(1, VOCAB, (1, 10))
    block = masks.create_block_mask(masks.document_mod(seg), 1, None, 10, 10, block_size=4)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4, 0, 1]])
    with torch.no_grad():
        sparse = model(ids, mask=block, position_ids=pos).last_hidden_state
        dense = model(ids, mask=block.to_dense(), position_ids=pos).last_hidden_state
        alone = model(ids[:, 3:8]).last_hidden_state
    assert torch.allclose(sparse, dense, atol=1e-5) and torch.allclose(sparse[:, 3:8], alone, atol=1e-5)
    with pytest.raises(ValueError, match="BlockMask built for"):
        model(ids[:, :8], mask=block, position_ids=pos[:, :8])
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(ids)
