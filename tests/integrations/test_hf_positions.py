"""Position ids on the attnkit backend: a restart starts a document, a forward jump keeps attending (as eager)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.integrations import transformers as hf  # noqa: E402
from tests.integrations.test_hf_backend import V, _model, on_the_interface  # noqa: E402

JUMPING = torch.tensor([[0, 1, 2, 3, 4, 10, 11, 12, 13, 14]])  # a prompt with a gap: one document


def test_document_ids_start_a_document_at_a_restart_only():
    assert hf.document_ids(JUMPING) is None
    got = hf.document_ids(torch.tensor([[0, 1, 2, 0, 1, 5, 6, 3], [0, 1, 2, 3, 4, 5, 6, 7]]))
    assert got is not None and got.tolist() == [[0, 0, 0, 1, 1, 1, 1, 2], [0] * 8]
    assert hf.document_ids(torch.tensor([[3, 3]])).tolist() == [[0, 1]]  # equal ids: a restart


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_jumping_position_ids_give_eagers_logits(name):
    model = _model(name)
    on_the_interface(model)
    ids = torch.randint(1, V, (2, JUMPING.shape[1]))
    kwargs = {"use_cache": True} if name != "bert" else {}
    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits[impl] = model(input_ids=ids, position_ids=JUMPING.expand(2, -1), **kwargs).logits
    diff = float((logits["attnkit"] - logits["eager"]).abs().max())
    assert diff < 1e-5, diff
