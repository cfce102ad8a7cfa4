import pytest
import torch

from attnkit import masks


def test_causal_alignments() -> None:
    # bottom-right: the last query sees every key
    m = masks.causal(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = masks.causal(2, 4, align="top_left")
    assert m.tolist() == [[True, False, False, False], [True, True, False, False]]
    # Tq > Tk bottom-right: the first queries have no key
    m = masks.causal(4, 2)
    assert m.any(-1).tolist() == [False, False, True, True]
    assert torch.equal(masks.causal(5, 5), masks.causal(5, 5, align="top_left"))


def test_from_lengths_and_padding_conversion() -> None:
    m = masks.from_lengths(torch.tensor([3, 1]), 4)
    assert m.shape == (2, 1, 1, 4)
    assert m[:, 0, 0].tolist() == [[True, True, True, False], [True, False, False, False]]
    # PyTorch's key_padding_mask marks padding with True: the converter inverts it
    kpm = torch.tensor([[False, False, False, True], [False, True, True, True]])
    assert torch.equal(masks.from_key_padding_mask(kpm), m)
    attn = torch.tensor([[False, True], [False, False]])  # True = ignore
    assert masks.from_torch_attn_mask(attn, 1, 1)[0, 0].tolist() == [[True, False], [True, True]]


def test_sliding_window_combine_and_additive() -> None:
    w = masks.sliding_window(5, 5, 1)
    assert w.sum(-1).tolist() == [2, 3, 3, 3, 2]
    local_causal = masks.combine(w, masks.causal(5, 5))
    assert local_causal is not None
    assert local_causal.sum(-1).tolist() == [1, 2, 2, 2, 2]
    assert masks.combine(None, None) is None
    add = masks.to_additive(masks.causal(3, 3), torch.float16)
    assert add.dtype == torch.float16 and torch.isfinite(add).all()
    assert add[0, 1] == torch.finfo(torch.float16).min and add[1, 0] == 0


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: masks.causal(3, 3, align="left"), ValueError, "align"),
        (lambda: masks.causal(-1, 3), ValueError, "tq"),
        (lambda: masks.from_lengths(torch.tensor([1.5])), TypeError, "lengths"),
        (lambda: masks.from_lengths([5], 3), ValueError, "max_len"),
        (lambda: masks.sliding_window(3, 3, -2), ValueError, "window"),
        (lambda: masks.combine(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 5, dtype=torch.bool)), ValueError,
         "broadcast"),
        (lambda: masks.combine(torch.ones(3)), TypeError, "boolean"),
        (lambda: masks.from_key_padding_mask(torch.zeros(2, 3)), TypeError, "key_padding_mask"),
        (lambda: masks.to_additive(torch.ones(2)), TypeError, "mask"),
    ],
)
def test_mask_errors_name_the_argument(call, error, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=words):
        call()


def test_read_mask_tells_the_forms_apart_and_names_the_ambiguous_ones() -> None:
    kp = torch.tensor([[True, True, False, False], [True, False, False, False]])
    assert masks.read_mask(kp, (2, 4, 3, 4)).shape == (2, 1, 1, 4)  # (B, Tk)
    assert torch.equal(masks.read_mask(masks.causal(3, 4), (2, 4, 3, 4))[0, 0], masks.causal(3, 4))  # (Tq, Tk)
    assert torch.equal(masks.read_mask(torch.tensor([4, 1]), (2, 4, 3, 4)), masks.from_lengths([4, 1], 4))
    three = torch.rand(2, 3, 4) > 0.5
    assert masks.read_mask(three, (2, 4, 3, 4)).shape == (2, 1, 3, 4)  # (B, Tq, Tk)
    assert masks.read_mask(three, (5, 2, 3, 4)).shape == (1, 2, 3, 4)  # (H, Tq, Tk)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 4\) is ambiguous here \(B = H = 2\).*mask\[:, None\]"):
        masks.read_mask(three, (2, 2, 3, 4))
    # H=None (a caller that does not know the heads): a 3-D mask whose first axis is B could still mean (H, Tq, Tk)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 4\) is ambiguous here \(B = 2 and any head count "
                                         r"is taken\).*mask\[:, None\] for \(B, 1, Tq, Tk\)"):
        masks.read_mask(three, (2, None, 3, 4))
    assert masks.read_mask(three[:1], (2, None, 3, 4)).shape == (1, 1, 3, 4)  # a first axis of 1 is both
    with pytest.raises(ValueError, match=r"integer lengths must be \(B,\) = \(3,\), got shape \(2,\)"):
        masks.read_mask(torch.tensor([4, 1]), (3, 1, 3, 4))
    with pytest.raises(TypeError, match="masks.from_hf_attention_mask"):
        masks.read_mask(kp.long(), (2, 1, 3, 4))
