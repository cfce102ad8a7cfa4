"""One mask rule at every layer: every layer given a mask in any accepted form answers as the core reads it.

Each layer (and :func:`attnkit.attention` itself) is called with every form
:func:`attnkit.masks.read_mask` accepts and compared with the same call given
the pairs that form means, written out as a four-axis tensor (which every
reader takes by broadcasting alone). A form a layer cannot use gets a named
refusal; a 2-D mask with ``B == Tq`` is refused everywhere as ambiguous.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnkit import attention, masks
from attnkit.layers import (
    AdditiveAttention,
    AttentionPooling,
    BertAttention,
    BertSelfAttention,
    LinearAttention,
    MultiHeadAttention,
    RelativePositionAttention,
    SelfAttention2d,
)

D = 8
Call = Callable[[object], Tensor]


def _layer_call(name: str, b: int) -> tuple[Call, int, int, int]:
    """``(call(mask), H, Tq, Tk)`` of one layer on a batch of ``b``; the layer is seeded and in eval mode."""
    torch.manual_seed(0)
    query, key = torch.randn(b, 3, D), torch.randn(b, 4, D)
    if name == "attention":
        q, k, v = torch.randn(b, 2, 3, D), torch.randn(b, 2, 4, D), torch.randn(b, 2, 4, D)
        return (lambda m: attention(q, k, v, mask=m)), 2, 3, 4
    if name == "MultiHeadAttention":
        mha = MultiHeadAttention(D, 2).eval()
        return (lambda m: mha(query, key, key, mask=m)), 2, 3, 4
    if name == "AdditiveAttention":
        add = AdditiveAttention(D, D, 6).eval()
        return (lambda m: add(query, key, mask=m)), 1, 3, 4
    if name == "AttentionPooling":
        pool = AttentionPooling(D, hidden_dim=6, num_queries=3).eval()
        return (lambda m: pool(key, mask=m)), 1, 3, 4
    if name == "RelativePositionAttention":
        rel = RelativePositionAttention(D, 2, 2).eval()
        return (lambda m: rel(query, key, key, mask=m)), 2, 3, 4
    if name == "LinearAttention":
        lin = LinearAttention(D, 2).eval()
        return (lambda m: lin(query, key, key, mask=m)), 2, 3, 4
    if name == "SelfAttention2d":
        img = SelfAttention2d(D, reduction=2, num_heads=2).eval()
        with torch.no_grad():
            img.gamma.fill_(1.0)  # 0 at start: the attention would not show
        x = torch.randn(b, D, 2, 2)
        return (lambda m: img(x, mask=m)), 2, 4, 4
    if name == "BertSelfAttention":
        bert = BertSelfAttention(D, 2, 0.0).eval()
        return (lambda m: bert(key, mask=m)), 2, 4, 4
    assert name == "BertAttention"
    block = BertAttention(D, 2).eval()
    return (lambda m: block(key, mask=m)), 2, 4, 4


LAYERS = ["attention", "MultiHeadAttention", "AdditiveAttention", "AttentionPooling", "RelativePositionAttention",
          "LinearAttention", "SelfAttention2d", "BertSelfAttention", "BertAttention"]


def _keys(b: int, tk: int) -> Tensor:
    g = torch.Generator().manual_seed(1)
    kp = torch.rand(b, tk, generator=g) > 0.4
    kp[:, 0] = True
    return kp  # (B, Tk)


def _pairs(b: int, h: int, tq: int, tk: int) -> Tensor:
    g = torch.Generator().manual_seed(2)
    m = torch.rand(b, h, tq, tk, generator=g) > 0.5
    m[..., -1] = True
    return m  # (B, H, Tq, Tk)


# name -> make(B, H, Tq, Tk) -> (the mask in that form, the (B|1, H|1, Tq|1, Tk) pairs it means)
FORMS: dict[str, Callable[[int, int, int, int], tuple[object, Tensor]]] = {
    "lengths (B,)": lambda b, h, tq, tk: (
        torch.tensor([tk, 2]), torch.arange(tk)[None, None, None, :] < torch.tensor([tk, 2])[:, None, None, None]),
    "key padding (B, Tk)": lambda b, h, tq, tk: (_keys(b, tk), _keys(b, tk)[:, None, None, :]),
    "key mask (Tk,)": lambda b, h, tq, tk: (_keys(1, tk)[0], _keys(1, tk)[:, None, None, :]),
    "pairs (Tq, Tk)": lambda b, h, tq, tk: (masks.causal(tq, tk), masks.causal(tq, tk)[None, None]),
    "(B, 1, Tq, Tk)": lambda b, h, tq, tk: (_pairs(b, 1, tq, tk), _pairs(b, 1, tq, tk)),
    "(B, H=2, Tq, Tk)": lambda b, h, tq, tk: (_pairs(b, 2, tq, tk), _pairs(b, 2, tq, tk)),
    "PyTorch key_padding_mask": lambda b, h, tq, tk: (
        masks.from_key_padding_mask(~_keys(b, tk)), _keys(b, tk)[:, None, None, :]),
    "PyTorch attn_mask": lambda b, h, tq, tk: (
        masks.from_torch_attn_mask(~masks.causal(tq, tk), b, h), masks.causal(tq, tk)[None, None]),
    "Hugging Face attention_mask": lambda b, h, tq, tk: (
        masks.from_hf_attention_mask(_keys(b, tk).long()), _keys(b, tk)[:, None, None, :]),
    "AttentionMask": lambda b, h, tq, tk: (masks.AttentionMask(_pairs(b, 1, tq, tk)), _pairs(b, 1, tq, tk)),
}
PER_QUERY = {"pairs (Tq, Tk)", "(B, 1, Tq, Tk)", "(B, H=2, Tq, Tk)", "PyTorch attn_mask", "AttentionMask"}


def _close(a: object, b: object) -> None:
    a_t = a[0] if isinstance(a, tuple) else a
    b_t = b[0] if isinstance(b, tuple) else b
    torch.testing.assert_close(a_t, b_t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", [*FORMS, "ambiguous 2-D, B == Tq"])
@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_reads_every_mask_form_as_the_core(layer: str, form: str) -> None:
    b = 2
    call, h, tq, tk = _layer_call(layer, b)
    if form == "ambiguous 2-D, B == Tq":
        call, h, tq, tk = _layer_call(layer, tq)  # a batch as large as the queries
        with pytest.raises(ValueError, match=rf"mask of shape \({tq}, {tk}\) is ambiguous here \(B = Tq = {tq}\)"):
            call(masks.causal(tq, tk))
        return
    mask, means = FORMS[form](b, h, tq, tk)
    with torch.no_grad():
        if form == "(B, H=2, Tq, Tk)" and h == 1:
            with pytest.raises(ValueError, match=r"does not broadcast to \(B, H, Tq, Tk\) = \(2, 1, "):
                call(mask)
            return
        if layer == "LinearAttention" and form in PER_QUERY:
            with pytest.raises(ValueError, match=r"LinearAttention mask must be a key-padding mask"):
                call(mask)
            return
        written_out = means.expand(b, *means.shape[1:]).contiguous()  # four axes: read by broadcasting alone
        unmasked = call(None)
        assert not torch.allclose(unmasked[0] if isinstance(unmasked, tuple) else unmasked,
                                  call(written_out)), "the mask must change the answer"
        _close(call(mask), call(written_out))
        if form != "(B, H=2, Tq, Tk)":  # a mask shared by the heads: the same as one head's
            _close(call(mask), call(masks.AttentionMask(written_out)))
