"""``attnkit serve --hf FOLDER`` with a causal language model: ``/v1/generate`` continues prompts and
``/v1/explain`` explains each generated token by the prompt's tokens, with every method's faithfulness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve import ServerProcess, post_json, serving

transformers = pytest.importorskip("transformers")

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat ran to the dog"]


def write_tiny_causal_lm(folder: Path) -> Path:
    """A 2-layer GPT-2 fitted to three sentences (a second), with its word-level tokenizer, saved as
    transformers does."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]",
                                                     eos_token="[EOS]")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=2, eos_token_id=2,
        bos_token_id=2, pad_token_id=0))
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(60):
        for text in TEXTS:
            ids = torch.tensor([tokenizer(text)["input_ids"] + [2]])
            loss = model(input_ids=ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_causal_lm(tmp_path_factory.mktemp("hf-lm") / "lm")


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[ServerProcess]:
    yield from serving("--hf", str(folder), "--max-new-tokens", "8")


def test_the_library_explains_a_continuation(folder: Path) -> None:
    from attnkit.attribution.generation import HF_METHODS, explain_causal_lm

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    got = explain_causal_lm(model, tokenizer, "the cat sat", max_new_tokens=3)
    assert got["generated"] == "on the mat" and got["target_tokens"] == ["on", "the", "mat"]
    assert got["source_tokens"] == ["the", "cat", "sat"] and len(got["scores"]) == 3
    assert all(len(row) == 3 for row in got["scores"])
    assert set(got["faithfulness"]["methods"]) == set(HF_METHODS)
    attention = explain_causal_lm(model, tokenizer, "the cat sat", max_new_tokens=3, method="cross_attention")
    assert all(0 < sum(row) <= 1 + 1e-6 for row in attention["scores"])  # the prompt's share of each row
    with pytest.raises(ValueError, match="prompt is empty"):
        explain_causal_lm(model, tokenizer, "", max_new_tokens=3)


def test_generate_and_explain_over_http(server: ServerProcess, folder: Path) -> None:
    from attnkit.attribution.generation import explain_causal_lm

    (info,) = [m for m in httpx.get(server.url + "/v1/models").json()["models"] if m["name"] == "lm"]
    assert (info["kind"], info["routes"]) == ("generate", ["generate", "explain"])
    reply = post_json(server, "/v1/generate", {"model": "lm", "texts": ["the cat sat", "a cat"],
                                               "max_new_tokens": 8})
    assert reply.status_code == 200, reply.text
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    expected = [explain_causal_lm(model, tokenizer, t, max_new_tokens=8, explain=False)["generated"]
                for t in ("the cat sat", "a cat")]
    assert reply.json() == {"model": "lm", "generations": expected}
    over = post_json(server, "/v1/generate", {"model": "lm", "texts": ["a"], "max_new_tokens": 9})
    assert over.status_code == 422 and over.json()["error"] == \
        "max_new_tokens: 9, more than the limit of 8 (--max-new-tokens)"
    explained = post_json(server, "/v1/explain", {"model": "lm", "text": "the dog sat"})
    assert explained.status_code == 200, explained.text
    got = explained.json()
    assert got["model"] == "lm" and got["method"] == got["faithfulness"]["shown_first"]
    assert got["source_tokens"] == ["the", "dog", "sat"] and "random" in got["faithfulness"]
    from click.testing import CliRunner

    from attnkit.cli import cli

    nothing = CliRunner().invoke(cli, ["serve"])
    assert nothing.exit_code == 2 and "give at least one RUN directory or --hf FOLDER to serve" in nothing.output
    wrong = post_json(server, "/v1/predict", {"model": "lm", "texts": ["a"]})
    assert wrong.status_code == 422 and "lm is a generate model" in wrong.json()["error"]


def test_a_sequence_to_sequence_model_is_explained_and_served(tmp_path: Path) -> None:
    """A BART folder: its output explained by its source tokens (cross-attention and gradients), and served."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from attnkit.attribution.generation import HF_METHODS, explain_causal_lm

    words = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]", "[BOS]"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]",
                                                     eos_token="[EOS]", bos_token="[BOS]")
    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=0, eos_token_id=2,
                                     bos_token_id=3, decoder_start_token_id=3, forced_eos_token_id=None)
    folder = tmp_path / "bart"
    transformers.BartForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager")
    got = explain_causal_lm(model, tokenizer, "the cat sat", max_new_tokens=4)
    assert got["source_tokens"] == ["the", "cat", "sat"] and 1 <= len(got["target_tokens"]) <= 4
    assert [len(row) for row in got["scores"]] == [3] * len(got["target_tokens"])
    assert set(got["faithfulness"]["methods"]) == set(HF_METHODS)
    attention = explain_causal_lm(model, tokenizer, "the cat sat", max_new_tokens=4, method="cross_attention")
    assert all(abs(sum(row) - 1) < 1e-4 for row in attention["scores"])  # cross-attention rows sum to 1
    for proc in serving("--hf", str(folder), "--max-new-tokens", "4"):
        (info,) = httpx.get(proc.url + "/v1/models").json()["models"]
        assert (info["kind"], info["routes"]) == ("generate", ["generate", "explain"])
        reply = post_json(proc, "/v1/generate", {"texts": ["the cat sat"], "max_new_tokens": 4})
        assert reply.status_code == 200 and reply.json()["generations"] == [got["generated"]], reply.text
