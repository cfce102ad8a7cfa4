"""Rolling (sliding-window) and attention-sink KV caches: equal to full recomputation under their mask."""

from __future__ import annotations

import pytest
import torch

from attnkit import masks
from attnkit.blocks import TransformerDecoder, TransformerEncoder, TransformerLayerConfig
from attnkit.layers import MultiHeadAttention
from attnkit.layers.kv_cache import AttentionSinkCache, KVCache, RollingKVCache
from attnkit.positional import SinusoidalPositionalEncoding

D, H = 16, 4


def _dense(mod, t: int) -> torch.Tensor:
    return masks.create_block_mask(mod, None, None, t, t, block_size=8).to_dense()  # (1, 1, T, T)


def _stack(kv_heads: int | None = None) -> TransformerEncoder:
    torch.manual_seed(0)
    layer = TransformerLayerConfig(D, H, 32, dropout=0.0, norm_first=True, kv_heads=kv_heads)
    return TransformerEncoder(layer, 2).eval()


@pytest.mark.parametrize("make", [lambda: RollingKVCache(3), lambda: AttentionSinkCache(2, 3)],
                         ids=["rolling", "sinks"])
def test_layer_cache_equals_full_attention_under_its_mask(make) -> None:
    torch.manual_seed(1)
    attn = MultiHeadAttention(D, H).eval()
    x = torch.randn(2, 13, D)
    cache = make()
    full = attn(x, mask=_dense(cache.mask_mod(), 13))
    steps, start = [], 0
    for size in (4, 1, 1, 3, 1, 1, 1, 1):  # a prompt, then single tokens and a short burst
        steps.append(attn(x[:, start : start + size], cache=cache))
        start += size
        assert len(cache) <= getattr(cache, "sinks", 0) + cache.window  # memory stays bounded
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert cache.offset == 13 and cache.key_positions.tolist()[-1] == 12


@pytest.mark.parametrize(("window", "sinks"), [(4, 0), (3, 2)])
@pytest.mark.parametrize("kv_heads", [None, 2])
def test_decoder_only_stack_decodes_like_recomputation(window: int, sinks: int, kv_heads: int | None) -> None:
    stack, pe = _stack(kv_heads), SinusoidalPositionalEncoding(D)
    x = torch.randn(3, 12, D)
    cache = stack.init_cache(window=window, sinks=sinks)
    mod = cache.layers[0].mask_mod()
    full = stack(pe(x), mask=_dense(mod, 12), causal=True)
    out = [stack(pe(x[:, :5]), causal=True, cache=cache)]
    for t in range(5, 12):
        offset = cache.offset
        assert offset == t  # original positions, not cache slots
        out.append(stack(pe(x[:, t : t + 1], offset=offset), causal=True, cache=cache))
    assert torch.allclose(torch.cat(out, 1), full, atol=1e-5)
    # And the bounded cache really forgets: the full cache sees more, and differs.
    plain = stack(pe(x), causal=True)
    assert not torch.allclose(plain[:, -1], full[:, -1], atol=1e-3)


def test_block_mask_recomputation_and_beam_reorder() -> None:
    stack, pe = _stack(), SinusoidalPositionalEncoding(D)
    x = torch.randn(2, 10, D)
    cache = stack.init_cache(window=3, sinks=1)
    block = masks.create_block_mask(cache.layers[0].mask_mod(), None, None, 10, 10, block_size=4)
    full = stack(pe(x), mask=block)
    stack(pe(x[:, :6]), causal=True, cache=cache)
    cache.reorder(torch.tensor([1, 0]))
    rest = stack(pe(x[[1, 0], 6:], offset=6), causal=True, cache=cache)
    assert torch.allclose(rest, full[[1, 0], 6:], atol=1e-5)


def test_encoder_decoder_stack_with_a_rolling_cache() -> None:
    torch.manual_seed(2)
    decoder = TransformerDecoder(TransformerLayerConfig(D, H, 32, dropout=0.0), 2).eval()
    memory, x = torch.randn(2, 5, D), torch.randn(2, 9, D)
    cache = decoder.init_cache(window=2)
    full = decoder(x, memory, self_mask=_dense(cache.layers[0].self_attn.mask_mod(), 9), causal=False)
    steps = [decoder(x[:, t : t + 1], memory if t == 0 else None, cache=cache) for t in range(9)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert cache.offset == 9 and len(cache.layers[0]) == 2


def test_bad_cache_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        RollingKVCache(0)
    with pytest.raises(ValueError, match="sinks must be an int >= 1"):
        AttentionSinkCache(0, 4)
    with pytest.raises(ValueError, match="sinks=2 needs a window"):
        _stack().init_cache(sinks=2)
    attn = MultiHeadAttention(D, H)
    block = masks.create_block_mask(masks.causal_mod, None, None, 3, 3)
    with pytest.raises(TypeError, match="MultiHeadAttention cannot combine a BlockMask with a rolling"):
        attn(torch.randn(1, 3, D), mask=block, cache=RollingKVCache(2))
    assert KVCache().last_mask is None and KVCache().offset == 0


def test_rotary_and_alibi_use_original_positions_through_a_sink_cache() -> None:
    from attnkit import attention
    from attnkit.positional import RotaryEmbedding, alibi_slopes

    torch.manual_seed(3)
    rope, slopes = RotaryEmbedding(8), alibi_slopes(2)
    q, k, v = torch.randn(3, 1, 2, 11, 8).unbind(0)  # (B=1, H=2, T=11, Dh=8) each
    cache = AttentionSinkCache(2, 3)
    allowed = _dense(cache.mask_mod(), 11)
    dist = (torch.arange(11)[:, None] - torch.arange(11)[None, :]).float()
    full = attention(*rope(q, k), v, mask=allowed, bias=-slopes[:, None, None] * dist)
    out = []
    for t in range(11):
        offset = cache.offset  # the original position of the new token
        qt, kt = rope(q[:, :, t : t + 1], k[:, :, t : t + 1], offset)
        keys, values = cache.update(kt, v[:, :, t : t + 1])
        gap = (offset - cache.last_key_positions).float()  # sinks leave a gap: not bottom-right contiguous
        out.append(attention(qt, keys, values, mask=cache.last_mask, bias=-slopes[:, None, None] * gap))
    assert torch.allclose(torch.cat(out, 2), full, atol=1e-5)


@pytest.mark.parametrize(("window", "sinks"), [(2, 0), (2, 1)])
def test_translation_model_decodes_with_a_bounded_cache(window: int, sinks: int) -> None:
    from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    torch.manual_seed(3)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=12, tgt_vocab_size=12,
                                             layer=TransformerLayerConfig(D, H, 32, norm_first=True), encoder_layers=1,
                                             decoder_layers=2)).eval()
    src, tgt = torch.randint(4, 12, (2, 5)), torch.randint(4, 12, (2, 7))
    encoded = model.encode(src, torch.tensor([5, 3]))
    cache = model.init_cache(window=window, sinks=sinks)
    steps = torch.cat([model.decode_step(tgt[:, t : t + 1], encoded, cache) for t in range(7)], 1)
    allowed = _dense(cache.layers[0].self_attn.mask_mod(), 7)
    full = model.out_proj(model.decoder(model._embed_target(tgt, 0), encoded.memory,
                                        memory_mask=encoded.memory_mask, self_mask=allowed, causal=False))
    assert torch.allclose(steps, full, atol=1e-5)
    unbounded = model.init_cache()  # the full cache differs once the window drops a position
    whole = torch.cat([model.decode_step(tgt[:, t : t + 1], encoded, unbounded) for t in range(7)], 1)
    assert not torch.allclose(steps, whole, atol=1e-3)
    assert len(cache.layers[0].self_attn) == sinks + window
