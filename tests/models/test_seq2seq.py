"""Seq2SeqTransformer: shapes, alignments, cache equivalence, padding, gradients, learning."""

from __future__ import annotations

import json
import random

import pytest
import torch

from attnkit.blocks import TransformerLayerConfig
from attnkit.data.parallel import collate_pairs
from attnkit.decoding import greedy_decode
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def tiny(**overrides: object) -> Seq2SeqTransformer:
    options: dict[str, object] = dict(src_vocab_size=17, tgt_vocab_size=13,
                                      layer=TransformerLayerConfig(16, 4, 32, norm_first=True),
                                      encoder_layers=2, decoder_layers=2)
    options.update(overrides)
    return Seq2SeqTransformer(Seq2SeqConfig(**options)).eval()  # type: ignore[arg-type]


def batch(b: int = 3, ts: int = 7, tt: int = 5, src_vocab: int = 17, tgt_vocab: int = 13) -> tuple[torch.Tensor, ...]:
    src = torch.randint(4, src_vocab, (b, ts))
    lengths = torch.tensor([ts, max(1, ts - 3), 1][:b])
    tgt = torch.randint(4, tgt_vocab, (b, tt))
    tgt[:, 0] = 2
    return src, lengths, tgt


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="shared_vocab"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=11, shared_vocab=True)
    with pytest.raises(ValueError, match="must differ"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, bos_id=0)
    with pytest.raises(ValueError, match=r"^Seq2SeqConfig field layer: d_model=10 must be divisible by num_heads=4$"):
        Seq2SeqConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "layer": {"d_model": 10, "num_heads": 4}})
    with pytest.raises(ValueError, match="unknown Seq2SeqConfig field"):
        Seq2SeqConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "layers": 2})
    with pytest.raises(ValueError, match=r"unknown Seq2SeqConfig field\(s\) \['d_ff'\]"):  # the layer's field
        Seq2SeqConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "d_ff": 64})
    with pytest.raises(ValueError, match=r"^Seq2SeqConfig field layer\.attention_dropout must be a float in \[0, 1\)"):
        Seq2SeqConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "layer": {"attention_dropout": 1.0}})
    config = Seq2SeqConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 12,
                                      "layer": {"norm_first": False, "activation_dropout": 0.0}})
    assert config.layer == TransformerLayerConfig(256, 8, 1024, dropout=0.1, norm_first=False, activation_dropout=0.0)
    saved = json.loads(json.dumps(config.to_dict()))
    assert saved["layer"]["d_ff"] == 1024 and "d_ff" not in saved  # the layer's fields live in the layer only
    assert Seq2SeqConfig.from_dict(saved) == config
    model = Seq2SeqTransformer(config)
    assert model.decoder.layers[0].ff.dropout.p == 0.0 and model.decoder.layers[0].self_attn.dropout == 0.1


def test_forward_shapes_and_cross_attention_alignments() -> None:
    model = tiny()
    src, lengths, tgt = batch()
    logits, weights = model(src, lengths, tgt, return_weights=True)
    assert logits.shape == (3, 5, 13)
    assert len(weights.encoder) == 2 and len(weights.cross) == 2 and len(weights.decoder_self) == 2
    for cross in weights.cross:
        assert cross.shape == (3, 4, 5, 7)
        torch.testing.assert_close(cross.sum(-1), torch.ones(3, 4, 5))
        for b, n in enumerate(lengths.tolist()):
            assert torch.all(cross[b, :, :, n:] == 0)  # padding gets exactly zero weight
    torch.testing.assert_close(model(src, lengths, tgt), logits)  # weights never change the output


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_cached_decoding_equals_full_recomputation(norm_first: bool, shared: bool) -> None:
    vocab = 17 if shared else 13
    model = tiny(layer=TransformerLayerConfig(16, 4, 32, norm_first=norm_first), shared_vocab=shared,
                 tgt_vocab_size=vocab, tie_embeddings=shared)
    src, lengths, tgt = batch(tt=6, tgt_vocab=vocab)
    full = model(src, lengths, tgt)  # (B, Tt, V)
    encoded, cache = model.encode(src, lengths), model.init_cache()
    for t in range(tgt.shape[1]):
        assert cache.offset == t
        step = model.decode_step(tgt[:, t : t + 1], encoded, cache)
        assert (step[:, 0] - full[:, t]).abs().max() <= 1e-5
    # Several positions at once (a prompt) give the same logits too.
    cache = model.init_cache()
    prompt = model.decode_step(tgt[:, :4], encoded, cache)
    rest = model.decode_step(tgt[:, 4:], encoded, cache)
    assert (torch.cat([prompt, rest], dim=1) - full).abs().max() <= 1e-5


def test_source_padding_never_changes_logits() -> None:
    model = tiny()
    src, lengths, tgt = batch()
    padded = torch.cat([src, torch.randint(0, 17, (3, 4))], dim=1)  # garbage past the lengths
    torch.testing.assert_close(model(padded, lengths, tgt), model(src, lengths, tgt), atol=1e-6, rtol=1e-5)


def test_every_parameter_gets_a_gradient_and_smoothing_changes_the_loss() -> None:
    model = tiny(label_smoothing=0.1).train()
    src, lengths, tgt = batch()
    out = torch.randint(4, 13, tgt.shape)
    out[0, -2:] = 0  # padding is ignored
    loss = model.loss(model(src, lengths, tgt), out)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    plain = torch.nn.functional.cross_entropy(model(src, lengths, tgt).reshape(-1, 13), out.reshape(-1), ignore_index=0)
    assert abs(loss.item() - plain.item()) > 1e-4
    with pytest.raises(ValueError, match="tgt_out_ids"):
        model.loss(model(src, lengths, tgt), out[:, :-1])


def test_tied_weights_are_saved_once_and_load_back() -> None:
    model = tiny(shared_vocab=True, tgt_vocab_size=17, tie_embeddings=True)
    assert model.out_proj.weight is model.tgt_embed.weight is model.src_embed.weight
    saved = model.tensors_to_save()
    assert "src_embed.weight" in saved and "tgt_embed.weight" not in saved and "out_proj.weight" not in saved
    other = tiny(shared_vocab=True, tgt_vocab_size=17, tie_embeddings=True)
    other.load_saved_tensors({k: v.clone() for k, v in saved.items()})
    src, lengths, tgt = batch(tgt_vocab=17)
    torch.testing.assert_close(other(src, lengths, tgt), model(src, lengths, tgt), rtol=0, atol=0)
    with pytest.raises(ValueError, match="missing"):
        other.load_saved_tensors({k: v for k, v in saved.items() if k != "src_embed.weight"})


def test_bad_inputs_are_named() -> None:
    model = tiny()
    src, lengths, tgt = batch()
    with pytest.raises(ValueError, match="lengths must lie"):
        model(src, torch.tensor([7, 0, 1]), tgt)  # an empty source
    with pytest.raises(ValueError, match="tgt_ids"):
        model(src, lengths, tgt[:2])
    with pytest.raises(ValueError, match="tgt_vocab_size"):
        model(src, lengths, tgt + 20)
    with pytest.raises(TypeError, match="Seq2SeqConfig"):
        Seq2SeqTransformer({"src_vocab_size": 3})  # type: ignore[arg-type]


def _copy_pairs(rng: random.Random, n: int) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for _ in range(n):
        seq = [rng.randint(4, 9) for _ in range(rng.randint(2, 5))]
        pairs.append((seq, list(seq)))
    return pairs


def test_tiny_model_learns_the_copy_task() -> None:
    rng = random.Random(0)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab_size=10, tgt_vocab_size=10, layer=TransformerLayerConfig(32, 4, 64, norm_first=True),
        encoder_layers=1, decoder_layers=1, shared_vocab=True, label_smoothing=0.0))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    first = None
    for _ in range(130):
        b = collate_pairs(_copy_pairs(rng, 64))
        loss = model.loss(model(b.src, b.src_lengths, b.tgt_in), b.tgt_out)
        first = loss.item() if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    assert first is not None and loss.item() < 0.2 * first
    model.eval()
    test = _copy_pairs(random.Random(1), 200)  # unseen draws
    b = collate_pairs(test)
    out = greedy_decode(model, b.src, b.src_lengths, max_len=10)
    accuracy = sum(o == t for o, (_, t) in zip(out.tokens, test, strict=True)) / len(test)
    assert accuracy >= 0.85, f"sequence accuracy {accuracy:.3f}"
