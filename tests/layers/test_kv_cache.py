"""Incremental decoding with KV caches equals full recomputation.

A decoder fed one position at a time, with a :class:`~attnkit.blocks.DecoderCache`,
must give at each step exactly what the full causal decoder gives at that
position — through causal self-attention (growing cache) and cross-attention
(static cache filled once from the memory), with grouped-query heads and with
padded memory.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnkit import masks
from attnkit.blocks import (
    DecoderCache,
    DecoderLayerCache,
    SelfAttentionCache,
    TransformerDecoder,
    TransformerEncoder,
    TransformerLayerConfig,
)
from attnkit.layers.kv_cache import KVCache
from attnkit.positional import SinusoidalPositionalEncoding

D, H, FF, B, T, S = 16, 4, 32, 3, 7, 5
TOL = 1e-5


def _decoder(norm_first: bool = False, kv_heads: int | None = None, activation: str = "relu") -> TransformerDecoder:
    config = TransformerLayerConfig(
        D, H, FF, dropout=0.1, activation=activation, norm_first=norm_first, kv_heads=kv_heads,
    )
    return TransformerDecoder(config, 2).eval()


def _max_diff(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- KVCache itself


def test_kv_cache_appends_and_reorders() -> None:
    cache = KVCache()
    assert len(cache) == 0 and not cache.filled
    k1, v1 = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 5)
    k2, v2 = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 5)
    cache.update(k1, v1)
    keys, values = cache.update(k2, v2)
    assert len(cache) == 4 and keys.shape == (2, 2, 4, 4) and values.shape == (2, 2, 4, 5)
    torch.testing.assert_close(keys, torch.cat([k1, k2], dim=2))
    cache.reorder(torch.tensor([1, 1]))
    torch.testing.assert_close(cache.values, torch.cat([v1, v2], dim=2)[[1, 1]])
    with pytest.raises(ValueError, match="do not match the cached keys"):
        cache.update(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 5))


def test_static_kv_cache_keeps_the_memory() -> None:
    cache = KVCache(static=True)
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    cache.update(k, v)
    assert cache.filled and len(cache) == 5


# --------------------------------------------------------------------------- decoding equals recomputation


@pytest.mark.parametrize(
    ("norm_first", "kv_heads", "activation"),
    [(False, None, "relu"), (True, None, "gelu"), (False, 2, "swiglu"), (True, 1, "relu")],
)
def test_step_by_step_decoding_equals_full_recomputation(
    norm_first: bool, kv_heads: int | None, activation: str
) -> None:
    decoder = _decoder(norm_first, kv_heads, activation)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = masks.from_lengths([S, 3, 1], S)  # padded memory
    with torch.no_grad():
        full = decoder(x, memory, memory_mask=memory_mask)
        cache = decoder.init_cache()
        steps = []
        for t in range(T):
            assert cache.offset == t
            steps.append(decoder(x[:, t : t + 1], memory, memory_mask=memory_mask, cache=cache))
    stepped = torch.cat(steps, dim=1)  # (B, T, D)
    assert _max_diff(stepped, full) <= TOL
    # The caches hold Hkv heads only (GQA shrinks them), one entry per decoded position.
    hkv = kv_heads or H
    for layer_cache in cache:
        assert layer_cache.self_attn.keys is not None and layer_cache.cross_attn.keys is not None
        assert layer_cache.self_attn.keys.shape == (B, hkv, T, D // H)
        assert layer_cache.cross_attn.keys.shape == (B, hkv, S, D // H)


def test_padded_memory_is_really_ignored_when_decoding() -> None:
    """Changing padded memory positions changes nothing, step by step (a check that can fail)."""
    decoder = _decoder(kv_heads=2)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    lengths = [S, 3, 2]
    memory_mask = masks.from_lengths(lengths, S)
    noisy = memory.clone()
    for b, n in enumerate(lengths):
        noisy[b, n:] = 100 * torch.randn(S - n, D)
    with torch.no_grad():
        outs = []
        for mem in (memory, noisy):
            cache = decoder.init_cache()
            outs.append(torch.cat([
                decoder(x[:, t : t + 1], mem, memory_mask=memory_mask, cache=cache) for t in range(T)
            ], dim=1))
        unmasked = decoder(x, noisy)
    assert _max_diff(outs[0], outs[1]) <= TOL
    assert _max_diff(unmasked, outs[0]) > 1e-2  # without the mask the noise does leak in


def test_prompt_then_steps_without_memory_after_first_call() -> None:
    decoder = _decoder(norm_first=True)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = masks.from_lengths([S, 4, 2], S)
    with torch.no_grad():
        full = decoder(x, memory, memory_mask=memory_mask)
        cache = decoder.init_cache()
        prompt = decoder(x[:, :3], memory, memory_mask=memory_mask, cache=cache)
        rest = [decoder(x[:, t : t + 1], memory_mask=memory_mask, cache=cache) for t in range(3, T)]
    assert cache.offset == T
    assert _max_diff(torch.cat([prompt, *rest], dim=1), full) <= TOL


def test_positions_from_cache_offset() -> None:
    """The documented loop: positions come from ``cache.offset`` read before each step."""
    decoder = _decoder()
    positional = SinusoidalPositionalEncoding(D)
    tokens, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        full = decoder(positional(tokens), memory)
        cache = decoder.init_cache()
        steps = [
            decoder(positional(tokens[:, t : t + 1], offset=cache.offset), memory, cache=cache)
            for t in range(T)
        ]
        forgetful = decoder.init_cache()  # negative control: every step placed at position 0
        wrong = [decoder(positional(tokens[:, t : t + 1]), memory, cache=forgetful) for t in range(T)]
    assert _max_diff(torch.cat(steps, dim=1), full) <= TOL
    assert _max_diff(torch.cat(wrong, dim=1)[:, 1:], full[:, 1:]) > 1e-3


def test_cached_weights_are_rows_of_the_full_weights() -> None:
    decoder = _decoder(kv_heads=2)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = masks.from_lengths([S, 2, 4], S)
    with torch.no_grad():
        _, full = decoder(x, memory, memory_mask=memory_mask, return_weights=True)
        cache = decoder.init_cache()
        for t in range(T):
            _, step = decoder(x[:, t : t + 1], memory, memory_mask=memory_mask, cache=cache, return_weights=True)
            for layer in range(2):
                assert step[layer].self_attn.shape == (B, H, 1, t + 1)
                assert step[layer].cross_attn.shape == (B, H, 1, S)
                assert _max_diff(step[layer].self_attn[:, :, 0], full[layer].self_attn[:, :, t, : t + 1]) <= TOL
                assert _max_diff(step[layer].cross_attn[:, :, 0], full[layer].cross_attn[:, :, t]) <= TOL


def test_reorder_follows_beam_selection() -> None:
    decoder = _decoder(norm_first=True, kv_heads=2)
    x, memory = torch.randn(2, T, D), torch.randn(2, S, D)
    memory_mask = masks.from_lengths([S, 3], S)
    swap = torch.tensor([1, 0])
    with torch.no_grad():
        full = decoder(x[swap], memory[swap], memory_mask=memory_mask[swap])
        cache = decoder.init_cache()
        for t in range(4):
            decoder(x[:, t : t + 1], memory, memory_mask=memory_mask, cache=cache)
        cache.reorder(swap)
        rest = [decoder(x[swap, t : t + 1], memory_mask=memory_mask[swap], cache=cache) for t in range(4, T)]
    assert _max_diff(torch.cat(rest, dim=1), full[:, 4:]) <= TOL


def test_cache_errors() -> None:
    decoder = _decoder()
    x, memory = torch.randn(B, 1, D), torch.randn(B, S, D)
    with pytest.raises(ValueError, match="memory is required"):
        decoder(x, cache=decoder.init_cache())
    with pytest.raises(ValueError, match="cache has 3 layers, the decoder has 2"):
        decoder(x, memory, cache=DecoderCache(3))
    with pytest.raises(TypeError, match="cache must be a DecoderCache"):
        decoder(x, memory, cache=[KVCache(), KVCache()])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cache must be a DecoderLayerCache"):
        decoder.layers[0](x, memory, cache=KVCache())
    with pytest.raises(ValueError, match="num_layers must be a positive int"):
        DecoderCache(0)
    layer_cache = DecoderLayerCache()
    assert not layer_cache.self_attn.static and layer_cache.cross_attn.static


# --------------------------------------------------------------------------- decoder-only stacks


@pytest.mark.parametrize(("norm_first", "kv_heads"), [(False, None), (True, 2)])
def test_causal_encoder_stack_decodes_with_cache(norm_first: bool, kv_heads: int | None) -> None:
    """A causal TransformerEncoder is a decoder-only model; its cached steps equal the full pass."""
    config = TransformerLayerConfig(D, H, FF, dropout=0.1, norm_first=norm_first, kv_heads=kv_heads)
    stack = TransformerEncoder(config, 2).eval()
    x = torch.randn(B, T, D)
    with torch.no_grad():
        full, full_weights = stack(x, causal=True, return_weights=True)
        cache = stack.init_cache()
        prompt = stack(x[:, :2], causal=True, cache=cache)
        steps = []
        for t in range(2, T):
            out, weights = stack(x[:, t : t + 1], causal=True, cache=cache, return_weights=True)
            assert weights[1].shape == (B, H, 1, t + 1)
            assert _max_diff(weights[1][:, :, 0], full_weights[1][:, :, t, : t + 1]) <= TOL
            steps.append(out)
        # Negative control: without causal masking the full pass sees the future.
        non_causal = stack(x)
    assert cache.offset == T and cache.layers[0].keys is not None
    assert cache.layers[0].keys.shape == (B, kv_heads or H, T, D // H)
    assert _max_diff(torch.cat([prompt, *steps], dim=1), full) <= TOL
    assert _max_diff(non_causal[:, :-1], full[:, :-1]) > 1e-3


def test_self_attention_cache_errors() -> None:
    stack = TransformerEncoder(TransformerLayerConfig(D, H, FF), 2)
    x = torch.randn(B, 1, D)
    with pytest.raises(ValueError, match="cache has 1 layers, the encoder has 2"):
        stack(x, causal=True, cache=SelfAttentionCache(1))
    with pytest.raises(TypeError, match="cache must be a SelfAttentionCache"):
        stack(x, causal=True, cache=DecoderCache(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="growing"):
        stack.layers[0](x, cache=KVCache(static=True))
