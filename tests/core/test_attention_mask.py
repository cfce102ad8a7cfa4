"""One mask object, made once: AttentionMask carries the allowed pairs and the rows that have a key.

Every layer takes it as it is and gives the same numbers as with the plain mask;
no layer recomputes its rows; every layer gives a query with no key a zero
attention output (no projection bias), BERT's sub-layer and the encoder and
decoder layers included.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from attnkit import (
    AdditiveAttention,
    AttentionPooling,
    LinearAttention,
    MultiHeadAttention,
    RelativePositionAttention,
    attention,
)
from attnkit.blocks import TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer
from attnkit.core import masks  # the core's module: the tests patch its helpers
from attnkit.layers.bert import BertAttention
from attnkit.layers.image import SelfAttention2d

D, NH = 16, 4


def _no_key_mask(t_q: int, t_k: int) -> Tensor:
    """(2, 1, Tq, Tk): example 1 has no key at all, query 2 of example 0 neither."""
    m = torch.ones(2, 1, t_q, t_k, dtype=torch.bool)
    m[1] = False
    m[0, 0, 2] = False
    return m


def _randomise_biases(module: torch.nn.Module) -> None:
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.normal_(p)


# ---- the object -----------------------------------------------------------------------------------

def test_rows_are_found_once_at_construction_and_read_by_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    original = masks._query_rows

    def counting(*args: Any) -> Any:
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(masks, "_query_rows", counting)
    torch.manual_seed(0)
    stack = TransformerEncoder(TransformerEncoderLayer(D, NH, 32, dropout=0.0), 3).eval()
    x = torch.randn(2, 6, D)
    plain = _no_key_mask(6, 6)
    with torch.no_grad():
        expected = stack(x, mask=plain)
    assert len(calls) == 3  # a plain tensor: every layer finds the rows again
    calls.clear()
    built = masks.AttentionMask(plain)
    assert len(calls) == 1
    with torch.no_grad():
        out = stack(x, mask=built)
    assert len(calls) == 1  # the layers read the rows the object carries
    assert torch.equal(out, expected)


def test_attention_mask_rows_and_key_mask() -> None:
    m = masks.AttentionMask(_no_key_mask(6, 6))
    assert m.rows is not None and m.rows.shape == (2, 6, 1)
    assert m.rows[1].sum() == 0 and m.rows[0, :, 0].tolist() == [True, True, False, True, True, True]
    keys = masks.AttentionMask.from_lengths(torch.tensor([3, 0, 5]), 5)
    assert keys.allowed.shape == (3, 1, 1, 5) and keys.rows is not None
    assert keys.rows[:, 0, 0].tolist() == [True, False, True]
    assert torch.equal(keys.key_mask(), torch.arange(5)[None] < torch.tensor([3, 0, 5])[:, None])
    picked = keys.index_select(torch.tensor([2, 2, 1]))
    assert picked.rows is not None and picked.rows[:, 0, 0].tolist() == [True, True, False]
    assert torch.equal(picked.allowed, keys.allowed[[2, 2, 1]])
    # causal rows: bottom-right, 4 queries over 2 keys, the first two queries have none
    causal = masks.AttentionMask(torch.ones(1, 1, 1, 2, dtype=torch.bool))
    rows = causal.query_rows(4, 2, causal=True)
    assert rows is not None and rows[0, :, 0].tolist() == [False, False, True, True]
    assert causal.query_rows(4, 2, causal=True) is rows  # kept, not recomputed


def test_attention_mask_refuses_what_is_not_a_mask() -> None:
    with pytest.raises(TypeError, match="mask must be a boolean tensor.*got dtype torch.float32"):
        masks.AttentionMask(torch.zeros(2, 1, 1, 4))
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor, got list"):
        masks.AttentionMask([[True]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"a mask of shape \(2, 4\) could mean more than one thing.*as_attention_mask"):
        masks.AttentionMask(torch.ones(2, 4, dtype=torch.bool))  # (B, Tk) or (Tq, Tk): no call to tell
    built = masks.AttentionMask(torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="already an AttentionMask"):
        masks.AttentionMask(built)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"key_mask\(\) needs a key-padding mask \(B, 1, 1, Tk\), got shape \(1, 4\)"):
        built.key_mask()


def test_block_mask_rows_are_computed_once_and_agree_with_the_dense_rule() -> None:
    table = _no_key_mask(6, 6)[:, 0]
    bm = masks.create_block_mask(lambda b, h, qi, ki: table[b, qi, ki], 2, None, 6, 6, block_size=4)
    rows = bm.rows_with_keys()
    assert rows is not None and bm.rows_with_keys() is rows
    assert torch.equal(rows, masks.rows_with_keys(bm.to_dense()))
    wrapped = masks.AttentionMask(bm)
    assert wrapped.is_block and wrapped.rows is not None
    assert torch.equal(wrapped.rows, masks.rows_with_keys(table))


def test_attention_takes_the_object_as_the_mask_it_holds() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, NH, 6, 8, generator=g) for _ in range(3))
    plain = _no_key_mask(6, 6)
    out, w = attention(q, k, v, mask=masks.AttentionMask(plain), return_weights=True)
    ref, ref_w = attention(q, k, v, mask=plain, return_weights=True)
    assert torch.equal(out, ref) and torch.equal(w, ref_w)


# ---- every layer: the same numbers with the object, zeros for a query with no key -----------------

def test_every_layer_gives_the_same_output_and_gradients_with_the_object() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 6, D, requires_grad=True)
    plain = _no_key_mask(6, 6)
    keys = masks.from_lengths([6, 4], 6)
    layers: list[tuple[torch.nn.Module, Tensor]] = [
        (MultiHeadAttention(D, NH), plain), (RelativePositionAttention(D, NH, 3), plain),
        (LinearAttention(D, NH), keys), (AttentionPooling(D, hidden_dim=8), keys),
        (BertAttention(D, NH, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0), plain),
        (TransformerEncoderLayer(D, NH, 32, dropout=0.0), plain),
    ]
    for layer, m in layers:
        layer.eval()
        expected = layer(x, mask=m)
        (grad_expected,) = torch.autograd.grad(expected.sum(), x)
        out = layer(x, mask=masks.AttentionMask(m))
        (grad,) = torch.autograd.grad(out.sum(), x)
        assert torch.equal(out, expected) and torch.equal(grad, grad_expected), type(layer).__name__
    add = AdditiveAttention(D, D, 8)
    context, w = add(x[:, :3], x, mask=masks.AttentionMask(plain[:, :, :3]), return_weights=True)
    ref_context, ref_w = add(x[:, :3], x, mask=plain[:, :, :3], return_weights=True)
    assert torch.equal(context, ref_context) and torch.equal(w, ref_w)
    dec = TransformerDecoderLayer(D, NH, 32, dropout=0.0).eval()
    memory = torch.randn(2, 5, D)
    mem_mask = masks.from_lengths([5, 2], 5)
    assert torch.equal(dec(x, memory, memory_mask=masks.AttentionMask(mem_mask)),
                       dec(x, memory, memory_mask=mem_mask))


def test_bert_attention_adds_no_output_bias_to_a_query_without_key() -> None:
    torch.manual_seed(0)
    layer = BertAttention(D, NH, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).eval()
    _randomise_biases(layer)
    x = torch.randn(2, 6, D)
    m = _no_key_mask(6, 6)
    for mask in (m, masks.AttentionMask(m)):
        out = layer(x, mask=mask)
        alone = layer.output.LayerNorm(x)  # no attention, no bias: only the residual, normalised
        torch.testing.assert_close(out[1], alone[1], rtol=0, atol=1e-6)
        torch.testing.assert_close(out[0, 2], alone[0, 2], rtol=0, atol=1e-6)
        assert (out[0, 0] - alone[0, 0]).abs().max() > 1e-3


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_and_decoder_layers_add_nothing_from_attention_to_a_query_without_key(norm_first: bool) -> None:
    torch.manual_seed(0)
    enc = TransformerEncoderLayer(D, NH, 32, dropout=0.0, norm_first=norm_first).eval()
    _randomise_biases(enc)
    x = torch.randn(2, 6, D)
    m = masks.AttentionMask(_no_key_mask(6, 6))
    out = enc(x, mask=m)
    if norm_first:  # x + 0, then the feed-forward block
        alone = x + enc.ff(enc.norm2(x))
    else:  # LN1(x + 0), then the feed-forward block
        h = enc.norm1(x)
        alone = enc.norm2(h + enc.ff(h))
    torch.testing.assert_close(out[1], alone[1], rtol=0, atol=1e-6)
    torch.testing.assert_close(out[0, 2], alone[0, 2], rtol=0, atol=1e-6)
    assert (out[0, 0] - alone[0, 0]).abs().max() > 1e-3

    dec = TransformerDecoderLayer(D, NH, 32, dropout=0.0, norm_first=norm_first).eval()
    _randomise_biases(dec)
    memory = torch.randn(2, 5, D)
    no_memory = masks.AttentionMask.from_lengths([5, 0], 5)  # example 1 may attend no memory position
    out = dec(x, memory, memory_mask=no_memory)
    with torch.no_grad():
        if norm_first:
            h = x + dec.self_attn(dec.norm1(x), causal=True)
            alone = h + dec.ff(dec.norm3(h))
        else:
            h = dec.norm1(x + dec.self_attn(x, causal=True))
            h = dec.norm2(h)
            alone = dec.norm3(h + dec.ff(h))
    torch.testing.assert_close(out[1], alone[1], rtol=0, atol=1e-5)
    assert (out[0] - alone[0]).abs().max() > 1e-3


def test_image_attention_leaves_a_position_without_key_unchanged() -> None:
    torch.manual_seed(0)
    layer = SelfAttention2d(8, reduction=2).eval()
    torch.nn.init.constant_(layer.gamma, 1.0)
    _randomise_biases(layer)
    x = torch.randn(2, 8, 2, 3)
    allowed = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    allowed[1] = False
    out = layer(x, mask=masks.AttentionMask(allowed))
    assert torch.equal(out[1], x[1]) and (out[0] - x[0]).abs().max() > 1e-3


def test_packed_batch_carries_one_mask_whose_padding_rows_have_no_key() -> None:
    from attnkit.models.packed import packed_batch

    ids = torch.randint(1, 9, (1, 6))
    seg = torch.tensor([[0, 0, 0, 1, 1, -1]])
    batch = packed_batch(ids, seg, None, 10)
    assert isinstance(batch.mask, masks.AttentionMask)
    assert batch.mask.rows is not None and batch.mask.rows[0, :, 0].tolist() == [True] * 5 + [False]
