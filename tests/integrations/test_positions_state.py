"""The Hugging Face forward's position ids live in attnkit.integrations, not in the core."""

import torch

from attnkit.core import masks
from attnkit.inspect import hf as inspect_hf
from attnkit.integrations.positions import FORWARD_POSITION_IDS


def test_core_holds_no_hugging_face_state() -> None:
    assert not hasattr(masks, "FORWARD_POSITION_IDS")
    assert "FORWARD_POSITION_IDS" not in masks.__all__


def test_inspect_reads_the_integrations_position_ids() -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    token = FORWARD_POSITION_IDS.set(positions)
    try:
        assert inspect_hf.FORWARD_POSITION_IDS.get() is positions
    finally:
        FORWARD_POSITION_IDS.reset(token)
    assert FORWARD_POSITION_IDS.get() is None
