"""Bad input to programmable attention: each mistake is a TypeError or ValueError that says
what was expected (the cases tests/core/test_block_mask.py does not already cover)."""

from __future__ import annotations

import pytest
import torch

from attnkit import masks
from attnkit.core.functional import attention

B, H, T, DH = 2, 4, 16, 8


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(B, H, T, DH), torch.randn(B, H, T, DH), torch.randn(B, H, T, DH)


def test_mask_mod_that_returns_no_tensor() -> None:
    with pytest.raises(TypeError, match="mask_mod must return a bool torch.Tensor, got bool"):
        masks.create_block_mask(lambda b, h, qi, ki: True, None, None, T, T)


def test_mask_mod_with_more_dims_than_the_indices() -> None:
    message = (r"mask_mod returned shape \(1, 1, 1, 16, 16\), "
               r"which does not broadcast to the index shape \(1, 1, 16, 16\)")
    with pytest.raises(ValueError, match=message):
        masks.create_block_mask(lambda b, h, qi, ki: (ki <= qi)[None], None, None, T, T, block_size=8)


def test_mask_mod_reading_a_table_shorter_than_the_sequence() -> None:
    ids = torch.zeros(T - 4, dtype=torch.long)  # a hand-written document mod over too few ids

    def mod(b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
        return ids[qi] == ids[ki]

    with pytest.raises(ValueError, match=r"mask_mod indexed past the end of a tensor \(index 12 is out"
                                         r".*kv_idx < Tk of create_block_mask") as info:
        masks.create_block_mask(mod, None, None, T, T)
    assert isinstance(info.value.__cause__, IndexError)


@pytest.mark.parametrize("returned, got", [
    (lambda s, b, h, qi, ki: qi - ki, "torch.int64"),
    (lambda s, b, h, qi, ki: s > 0, "torch.bool"),
    (lambda s, b, h, qi, ki: 1.0, "float"),
])
def test_score_mod_that_returns_no_float_tensor(returned: object, got: str) -> None:
    q, k, v = _qkv()
    block_mask = masks.create_block_mask(masks.causal_mod, None, None, T, T, block_size=8)
    for mask in (None, block_mask):
        with pytest.raises(TypeError, match=f"score_mod must return a floating tensor of the score's shape, got {got}"):
            attention(q, k, v, mask=mask, score_mod=returned)  # type: ignore[arg-type]


def test_score_mod_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="score_mod must be callable, got int"):
        attention(*_qkv(), score_mod=3)  # type: ignore[arg-type]


def test_score_mod_that_broadcasts_the_score_to_more_dims() -> None:
    with pytest.raises(ValueError, match=r"must keep the score's shape \(2, 4, 16, 16\), got \(2, 2, 4, 16, 16\)"):
        attention(*_qkv(), score_mod=lambda s, b, h, qi, ki: s + torch.zeros(2, 1, 1, 1, 1))


def test_block_mask_for_other_heads_or_the_transposed_shape() -> None:
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"built for \(B, H, Tq, Tk\) = \(None, 3, 16, 16\) cannot be used with "
                                         r"\(B, H, Tq, Tk\) = \(2, 4, 16, 16\)"):
        attention(q, k, v, mask=masks.create_block_mask(masks.causal_mod, None, 3, T, T))
    cross = masks.create_block_mask(masks.causal_mod, None, None, T, 2 * T)
    with pytest.raises(ValueError, match=r"= \(None, None, 16, 32\) cannot be used with .* \(2, 4, 32, 16\)"):
        attention(torch.randn(B, H, 2 * T, DH), k, v, mask=cross)


def test_segment_ids_of_the_wrong_shape_or_length() -> None:
    with pytest.raises(ValueError, match=r"segment_ids must be \(T,\) or \(B, T\) with T > 0, got shape \(1, 2, 3\)"):
        masks.document_mod(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"segment_ids must be \(T,\) or \(B, T\) with T > 0, got shape \(0,\)"):
        masks.document_mod(torch.zeros(0, dtype=torch.long))
    ids = torch.zeros(T, dtype=torch.long)
    with pytest.raises(ValueError, match="segment_ids have length T=16, but the block mask is for Tq=8, Tk=16"):
        masks.create_block_mask(masks.document_mod(ids), None, None, T // 2, T)
    with pytest.raises(ValueError, match="segment_ids have length T=16, but the block mask is for Tq=17"):
        masks.create_block_mask(masks.and_mods(masks.causal_mod, masks.document_mod(ids)), None, None, T + 1, T + 1)


def test_prefix_lengths_for_another_batch() -> None:
    with pytest.raises(ValueError, match=r"prefix_len hold one row per example \(B=3\); pass B=3 to "
                                         r"create_block_mask, got B=2"):
        masks.create_block_mask(masks.prefix_lm_mod(torch.tensor([1, 2, 3])), 2, None, T, T)
    with pytest.raises(TypeError, match=r"prefix_len must be an int or a \(B,\) integer tensor"):
        masks.prefix_lm_mod(torch.tensor([1.0, 2.0]))
