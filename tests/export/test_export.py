"""torch.export and ONNX export (the dynamo exporter, run by onnxruntime) of MultiHeadAttention
and DocumentClassifier, with dynamic batch and sequence dimensions and padding masks.

The exported programs and the ONNX models get batches of other sizes than the
one they were traced with, padding included (an example with no key at all for
the attention layer), and must give eager's outputs within 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.export import Dim, ExportedProgram

from attnkit import masks
from attnkit.blocks import TransformerLayerConfig
from attnkit.layers import MultiHeadAttention
from attnkit.models import DocumentClassifier, DocumentClassifierConfig

D, H = 16, 4
BATCH, TIME = Dim("B", max=64), Dim("T", max=32)


def _attention_layer() -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, kv_heads=2).eval()


def _classifier() -> DocumentClassifier:
    torch.manual_seed(0)
    layer = TransformerLayerConfig(D, H, 32, activation="gelu", norm_first=True)
    config = DocumentClassifierConfig(vocab_size=40, num_classes=3, layer=layer,
                                      num_layers=2, max_len=32)
    return DocumentClassifier(config).eval()


def _padded(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(len(lengths), max(lengths) or 1, D)
    return x, masks.from_lengths(torch.tensor(lengths), x.shape[1])  # (B, T, D), (B, 1, 1, T)


def _documents(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor(lengths)
    ids = torch.randint(1, 40, (len(lengths), max(lengths)))
    return ids.masked_fill(~masks.from_lengths(lens)[:, 0, 0], 0), lens  # 0 = [PAD]


def _export_attention() -> ExportedProgram:
    x, mask = _padded([7, 4, 2])
    return torch.export.export(_attention_layer(), (x,), kwargs={"mask": mask},
                               dynamic_shapes={"query": {0: BATCH, 1: TIME}, "mask": {0: BATCH, 3: TIME}})


def _export_classifier() -> ExportedProgram:
    return torch.export.export(_classifier(), _documents([9, 5, 2]),
                               dynamic_shapes={"ids": {0: BATCH, 1: TIME}, "lengths": {0: BATCH}})


def test_exported_multi_head_attention_matches_eager_on_other_shapes() -> None:
    program = _export_attention().module()
    layer = _attention_layer()
    for lengths in ([11, 3, 0, 9, 1], [5], [32, 32]):
        x, mask = _padded(lengths)
        got = program(x, mask=mask)
        torch.testing.assert_close(got, layer(x, mask=mask), atol=1e-5, rtol=1e-5)
        assert not got.isnan().any()


def test_exported_document_classifier_matches_eager_on_other_shapes() -> None:
    program = _export_classifier().module()
    model = _classifier()
    for lengths in ([13, 1, 7, 4], [2], [32, 17]):
        ids, lens = _documents(lengths)
        torch.testing.assert_close(program(ids, lens), model(ids, lens), atol=1e-5, rtol=1e-5)


def test_exported_program_checks_its_input_shapes() -> None:
    program = _export_attention().module()
    x, mask = _padded([33, 2])
    with pytest.raises(AssertionError, match=r"query.size\(\)\[1\] <= 32"):  # T beyond the exported range
        program(x, mask=mask)
    x, mask = _padded([5, 3])
    with pytest.raises(AssertionError, match=r"mask.size\(\)\[3\] == query.size\(\)\[1\]"):
        program(x, mask=mask[..., :4])


def _onnx_session(program: ExportedProgram, path: Path) -> Any:
    ort = pytest.importorskip("onnxruntime", reason="ONNX export needs the export extra")
    pytest.importorskip("onnxscript", reason="ONNX export needs the export extra")
    torch.onnx.export(program, f=str(path), dynamo=True, verbose=False)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_onnx_multi_head_attention_matches_eager(tmp_path: Path) -> None:
    session = _onnx_session(_export_attention(), tmp_path / "attention.onnx")
    assert [i.name for i in session.get_inputs()] == ["query", "mask"]
    layer = _attention_layer()
    for lengths in ([11, 3, 0, 9, 1], [32, 32]):
        x, mask = _padded(lengths)
        (got,) = session.run(None, {"query": x.numpy(), "mask": mask.numpy()})
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, layer(x, mask=mask).detach().numpy(), atol=1e-5, rtol=1e-5)


def test_onnx_document_classifier_matches_eager(tmp_path: Path) -> None:
    session = _onnx_session(_export_classifier(), tmp_path / "classifier.onnx")
    model = _classifier()
    for lengths in ([13, 1, 7, 4], [32, 17]):
        ids, lens = _documents(lengths)
        (got,) = session.run(None, {"ids": ids.numpy(), "lengths": lens.numpy()})
        np.testing.assert_allclose(got, model(ids, lens).detach().numpy(), atol=1e-5, rtol=1e-5)
