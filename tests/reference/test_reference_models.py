"""Models, weight exchange with torch, trainer, analysis, input errors and the torch-free import."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file as torch_load_file
from safetensors.torch import save_file as torch_save_file

from attnkit.layer_config import TransformerLayerConfig
from attnkit.layers.multi_head import MultiHeadAttention as TorchMHA
from attnkit.layers.pooling import AttentionPooling as TorchAttentionPooling
from attnkit.models.document import DocumentClassifier as TorchDocumentClassifier
from attnkit.models.document import DocumentClassifierConfig
from attnkit.positional import sinusoidal_table
from attnkit.reference.analysis import (
    accuracy,
    attention_stats,
    most_attended_positions,
    most_attended_tokens,
)
from attnkit.reference.attention import attention_forward
from attnkit.reference.chunked import chunked_attention_forward
from attnkit.reference.functional import from_lengths
from attnkit.reference.io import load_model, load_weights, save_model, save_weights
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.models import (
    NUMPY_LAYER,
    ClassifierConfig,
    DocumentClassifier,
    TransformerClassifier,
    build_model,
)
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.optim import AdamW
from attnkit.reference.text import Vocabulary, pad_batch
from attnkit.reference.trainer import Trainer, predict

IDS = np.array([[5, 9, 3, 7, 2, 0, 0], [4, 4, 8, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
SRC = str(Path(__file__).resolve().parents[2] / "src")
SMALL = replace(NUMPY_LAYER, d_model=8, num_heads=2)  # the default layer at width 8


def _torch_twin(cfg: ClassifierConfig) -> TorchDocumentClassifier:
    tcfg = DocumentClassifierConfig(  # the very same layer config
        vocab_size=cfg.vocab_size, num_classes=cfg.num_classes, layer=cfg.layer,
        num_layers=cfg.num_layers, pooling=cfg.pooling, positional="sinusoidal",
    )
    model = TorchDocumentClassifier(tcfg).double().eval()
    # The torch table is built in float32 (a buffer, not a weight); rebuild it in
    # float64 so the comparison measures the layers, not the table's rounding.
    positional = model.positional
    assert positional is not None
    positional.table = sinusoidal_table(positional.max_len, cfg.layer.d_model, dtype=torch.float64)
    return model


def _torch_logits(model: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    lengths = torch.from_numpy((ids != 0).sum(axis=1))
    with torch.no_grad():
        return model(torch.from_numpy(ids), lengths).numpy()


@pytest.mark.parametrize(
    "norm_first,pooling,activation", [(False, "mean", "relu"), (True, "attention", "gelu")]
)
def test_transformer_classifier_weights_through_safetensors(
    tmp_path: Path, norm_first: bool, pooling: str, activation: str
) -> None:
    cfg = ClassifierConfig(vocab_size=10, num_classes=3, num_layers=2, pooling=pooling,
                           layer=replace(SMALL, d_ff=12, norm_first=norm_first, activation=activation))
    ours = TransformerClassifier(cfg).astype(np.float64).eval()
    save_weights(ours, tmp_path / "w.safetensors")
    theirs = _torch_twin(cfg)
    theirs.load_state_dict(torch_load_file(tmp_path / "w.safetensors"), strict=True)
    assert np.max(np.abs(ours.forward(IDS) - _torch_logits(theirs, IDS))) <= 1e-10
    assert {n for n in ours.parameters()} >= {"embedding.weight", "classifier.weight",
                                             "encoder.layers.1.ff.linear2.bias",
                                             "encoder.layers.0.self_attn.q_proj.weight"}
    # and back: a torch-initialised model loads into the twin
    fresh = _torch_twin(cfg)
    torch_save_file({k: v.contiguous() for k, v in fresh.state_dict().items()}, tmp_path / "t.safetensors")
    back = TransformerClassifier(cfg).astype(np.float64).eval()
    load_weights(back, tmp_path / "t.safetensors")
    assert np.max(np.abs(back.forward(IDS) - _torch_logits(fresh, IDS))) <= 1e-10
    np.testing.assert_array_equal(back.predict(IDS), _torch_logits(fresh, IDS).argmax(-1))


def test_document_classifier_matches_torch_built_from_attnkit_parts(tmp_path: Path) -> None:
    cfg = ClassifierConfig(kind="document", vocab_size=10, num_classes=2, layer=SMALL)
    ours = DocumentClassifier(cfg).astype(np.float64).eval()

    class Twin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Embedding(10, 8, padding_idx=0)
            self.self_attn = TorchMHA(8, 2)
            self.pooling = TorchAttentionPooling(8)
            self.classifier = torch.nn.Linear(8, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            valid = ids != 0
            h = self.self_attn(self.embedding(ids), mask=valid[:, None, None, :])
            return self.classifier(self.pooling(h, mask=valid))

    save_weights(ours, tmp_path / "doc.safetensors")
    twin = Twin().double().eval()
    twin.load_state_dict(torch_load_file(tmp_path / "doc.safetensors"), strict=True)
    with torch.no_grad():
        ref = twin(torch.from_numpy(IDS)).numpy()
    assert np.max(np.abs(ours.forward(IDS) - ref)) <= 1e-10


def test_padding_does_not_change_logits() -> None:
    model = TransformerClassifier(ClassifierConfig(vocab_size=10, layer=SMALL)).eval()
    short = model.forward(IDS[:, :5])
    longer = model.forward(np.pad(IDS[:, :5], ((0, 0), (0, 3))))
    assert np.allclose(short[:2], longer[:2], atol=1e-5)


def test_the_config_holds_the_torch_models_layer_config(tmp_path: Path) -> None:
    cfg = ClassifierConfig.from_dict({"vocab_size": 10, "layer": {"d_model": 8, "num_heads": 2, "d_ff": 12}})
    assert type(cfg.layer) is TransformerLayerConfig and cfg.layer == replace(SMALL, d_ff=12)  # the rest: defaults
    assert cfg.to_dict()["layer"] == cfg.layer.to_dict() and ClassifierConfig.from_dict(cfg.to_dict()) == cfg
    save_model(build_model(cfg), tmp_path / "m")
    assert load_model(tmp_path / "m").config == cfg  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"valid fields are .*; did you mean layer\.d_model\?"):
        ClassifierConfig.from_dict({"d_model": 8})
    for field, value in [("kv_heads", 2), ("bias", False), ("attention_dropout", 0.2), ("activation", "silu")]:
        with pytest.raises(ValueError, match=f"layer.{field} must be .* NumPy twin"):
            ClassifierConfig(layer=replace(SMALL, **{field: value}))
    eps = TransformerClassifier(ClassifierConfig(layer=replace(SMALL, layer_norm_eps=1e-3, norm_first=True)))
    assert {eps.encoder.norm.eps, eps.encoder.layers[0].norm1.eps} == {1e-3}  # type: ignore[union-attr]


def test_save_load_model_round_trip(tmp_path: Path) -> None:
    cfg = ClassifierConfig(vocab_size=10, seed=3, layer=SMALL)
    model = build_model(cfg).eval()
    save_model(model, tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    again = load_model(tmp_path / "m").eval()
    np.testing.assert_array_equal(model.forward(IDS), again.forward(IDS))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="kind"):
        build_model(ClassifierConfig(kind="cnn"))


def test_load_weights_rejects_mismatch(tmp_path: Path) -> None:
    small = TransformerClassifier(ClassifierConfig(vocab_size=10, layer=SMALL))
    save_weights(small, tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="embedding.weight"):
        load_weights(TransformerClassifier(ClassifierConfig(vocab_size=11, layer=SMALL)),
                     tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="missing"):
        load_weights(TransformerClassifier(ClassifierConfig(vocab_size=10, num_layers=2, layer=SMALL)),
                     tmp_path / "w.safetensors")


def _toy_task(n: int, seed: int) -> tuple[list[list[int]], np.ndarray]:
    """Label 1 when token 3 occurs: needs the model to find one word anywhere."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(n):
        seq = list(rng.integers(4, 12, size=rng.integers(3, 8)))
        y = int(rng.random() < 0.5)
        if y:
            seq[rng.integers(len(seq))] = 3
        xs.append(seq)
        ys.append(y)
    return xs, np.array(ys)


@pytest.mark.parametrize("kind", ["transformer", "document"])
def test_trainer_learns_and_every_parameter_gets_a_gradient(kind: str) -> None:
    cfg = ClassifierConfig(kind=kind, vocab_size=12, seed=1,
                           layer=replace(NUMPY_LAYER, d_model=16, num_heads=2, d_ff=16, dropout=0.0))
    model = build_model(cfg)
    xs, ys = _toy_task(240, 0)
    vx, vy = _toy_task(80, 1)
    loss = SoftmaxCrossEntropy()
    model.zero_grad()
    loss.forward(model.forward(pad_batch(xs[:16])), ys[:16])
    model.backward(loss.backward().astype(np.float32))
    untouched = [n for n, g in model.gradients().items() if not np.any(g) and n != "embedding.weight"]
    assert untouched == []
    trainer = Trainer(model, AdamW(model.parameters(), model.gradients(), lr=3e-3), batch_size=16,
                      patience=2, seed=0)
    history = trainer.fit(xs, ys, epochs=8, val_x=vx, val_y=vy)
    assert history.train_loss[-1] < history.train_loss[0] - 0.2
    assert max(history.val_accuracy) >= 0.9
    assert accuracy(predict(model, vx), vy) == max(history.val_accuracy)  # best weights restored


def test_trainer_is_seeded() -> None:
    xs, ys = _toy_task(64, 0)
    runs = []
    for _ in range(2):
        model = TransformerClassifier(ClassifierConfig(vocab_size=12, seed=4, layer=SMALL))
        trainer = Trainer(model, AdamW(model.parameters(), model.gradients()), batch_size=16, seed=9)
        runs.append(trainer.fit(xs, ys, epochs=2).train_loss)
    assert runs[0] == runs[1]


def test_a_trainers_state_holds_every_generator_it_draws_from() -> None:
    """The shuffling generator and each of the model's, a generator the model holds as ``rng`` included."""
    model = TransformerClassifier(ClassifierConfig(vocab_size=12, seed=4, layer=replace(SMALL, dropout=0.1)))
    model.rng = np.random.default_rng(5)  # type: ignore[attr-defined]  # a root generator named as the trainer's
    trainer = Trainer(model, AdamW(model.parameters(), model.gradients()), batch_size=16, seed=9)
    states = trainer.state()[1]["rng"]
    assert len(states) == 3 and states["rng"] == trainer.rng.bit_generator.state
    assert states["model.rng"] == model.rng.bit_generator.state  # type: ignore[attr-defined]


def test_analysis() -> None:
    w = np.zeros((1, 1, 3, 3))
    w[0, 0] = [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.0, 0.0, 0.0]]  # last row: no key
    mask = np.array([[True, True, False]])
    np.testing.assert_array_equal(most_attended_positions(w, 2, mask), [[0, 1]])
    top = most_attended_tokens(w, np.array([[4, 5, 6]]), ["a", "b", "c", "d", "x", "y", "z"], k=2, mask=mask)
    assert [t for t, _, _ in top] == ["x", "y"]
    assert top[0][1] == pytest.approx(0.65)
    stats = attention_stats(w)
    assert stats["max"] == pytest.approx(0.65)
    entropy = -(0.7 * np.log(0.7) + 0.2 * np.log(0.2) + 0.1 * np.log(0.1))
    other = -(0.6 * np.log(0.6) + 0.3 * np.log(0.3) + 0.1 * np.log(0.1))
    assert stats["entropy"] == pytest.approx((entropy + other) / 2)
    uniform = attention_stats(np.full((2, 4), 0.25))
    assert uniform["relative_entropy"] == pytest.approx(1.0) and uniform["spread"] == 0.0
    assert accuracy(np.array([1, 0, 1]), np.array([1, 1, 1])) == pytest.approx(2 / 3)


def test_vocabulary() -> None:
    vocab = Vocabulary.build(["a b b", "b c"], min_frequency=2)
    assert vocab.itos == ["<pad>", "<unk>", "b"]
    assert vocab.encode("b a z") == [2, 1, 1]
    np.testing.assert_array_equal(pad_batch([[2], [2, 1, 1]]), [[2, 0, 0], [2, 1, 1]])


def test_errors_name_the_argument() -> None:
    q = np.zeros((1, 2, 3, 4))
    with pytest.raises(TypeError, match="mask must be a boolean array.*float64.*bias="):
        attention_forward(q, q, q, mask=np.zeros((1, 1, 3, 3)))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 3\) does not broadcast"):
        attention_forward(q, q, q, mask=np.ones((2, 1, 1, 3), dtype=bool))
    with pytest.raises(TypeError, match="bias must be a floating array"):
        attention_forward(q, q, q, bias=np.ones((3, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"q must be 4-D \(B, H, Tq, Dh\), got shape \(3, 4\)"):
        attention_forward(np.zeros((3, 4)), q, q)
    with pytest.raises(ValueError, match="Hkv=2 must divide query heads H=3"):
        attention_forward(np.zeros((1, 3, 3, 4)), q, q)
    with pytest.raises(TypeError, match="q must be a numpy.ndarray"):
        attention_forward([1.0], q, q)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        chunked_attention_forward(q, q, q, mask=np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="d_model=10 must be divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="kv_heads=3 must divide num_heads=4"):
        MultiHeadAttention(8, 4, kv_heads=3)
    with pytest.raises(ValueError, match=r"query must be 3-D \(B, T, 8\), got shape \(2, 5, 6\)"):
        MultiHeadAttention(8, 2).forward(np.zeros((2, 5, 6)))
    with pytest.raises(ValueError, match="dropout must be a float in"):
        MultiHeadAttention(8, 2, dropout=1.5)


def test_fully_masked_row_gives_zeros_and_zero_gradients() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 3, 2))
    mask = np.array([[True, True], [False, False], [True, False]])
    out, cache = attention_forward(q, q[:, :, :2], q[:, :, :2], mask=mask)
    assert np.all(out[0, 0, 1] == 0) and np.all(cache.weights[0, 0, 1] == 0)
    out_c, _ = chunked_attention_forward(q, q[:, :, :2], q[:, :, :2], mask=mask, block_q=1, block_k=1)
    assert np.all(out_c[0, 0, 1] == 0) and np.isfinite(out_c).all()
    np.testing.assert_allclose(out, out_c, atol=1e-12)
    assert np.allclose(from_lengths([2, 0], 2)[1], False)


def _run(code: str) -> str:
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_reference_package_imports_no_torch() -> None:
    modules = sorted(p.stem for p in Path(SRC, "attnkit", "reference").glob("*.py") if p.stem != "__init__")
    assert {"attention", "checking", "chunked", "trainer"} <= set(modules)
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module('attnkit.reference.' + m)\n"
            "import attnkit.reference\n"
            "print('torch' in sys.modules, 'safetensors' in sys.modules)")
    assert _run(code) == "False False"


@pytest.mark.parametrize("norm_first,pooling", [(False, "mean"), (True, "attention")])
def test_transformer_classifier_gradients_match_torch_autograd(tmp_path: Path, norm_first: bool,
                                                               pooling: str) -> None:
    cfg = ClassifierConfig(vocab_size=10, num_classes=3, num_layers=2, pooling=pooling,
                           layer=replace(SMALL, d_ff=12, norm_first=norm_first, activation="gelu"))
    ours = TransformerClassifier(cfg).astype(np.float64).eval()
    save_weights(ours, tmp_path / "w.safetensors")
    theirs = _torch_twin(cfg)
    theirs.load_state_dict(torch_load_file(tmp_path / "w.safetensors"), strict=True)
    labels = np.array([2, 0, 1])
    loss = SoftmaxCrossEntropy()
    ours.zero_grad()
    value = loss.forward(ours.forward(IDS), labels)
    ours.backward(loss.backward())
    lengths = torch.from_numpy((IDS != 0).sum(axis=1))
    ref = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(IDS), lengths), torch.from_numpy(labels))
    ref.backward()
    assert abs(value - ref.item()) <= 1e-10
    named = dict(theirs.named_parameters())
    for name, g in ours.gradients().items():
        assert np.max(np.abs(g - named[name].grad.numpy())) <= 1e-10, name


def test_attention_properties() -> None:
    """Rows sum to 1 or 0, masked keys get exactly 0, causal outputs ignore later positions,
    and self-attention without positions is permutation-equivariant."""
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(8, 2, rng=rng).astype(np.float64).eval()
    x = rng.standard_normal((2, 6, 8))
    mask = from_lengths([6, 4], 6)
    out = mha.forward(x, mask=mask)
    w = mha.weights
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
    assert np.all(w[1, :, :, 4:] == 0.0)
    perm = rng.permutation(6)
    np.testing.assert_allclose(mha.forward(x[:, perm]), mha.forward(x)[:, perm], atol=1e-12)
    causal = mha.forward(x, causal=True)
    changed = x.copy()
    changed[:, 4:] += 1.0
    np.testing.assert_allclose(mha.forward(changed, causal=True)[:, :4], causal[:, :4], atol=1e-12)
    assert out.shape == (2, 6, 8)


def test_lr_factor_warms_up_then_decays_to_zero() -> None:
    from attnkit.reference.trainer import lr_factor

    assert [lr_factor(s, 10, 4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 10, 4) == 1.0 and lr_factor(7, 10, 4) == pytest.approx(0.5)
    assert lr_factor(10, 10, 4) == 0.0 and lr_factor(3, 10, 0) == pytest.approx(0.7)


@pytest.mark.parametrize("warmup_ratio", [None, 0.25])
def test_trainer_follows_the_schedule_and_restores_the_rate(warmup_ratio: float | None) -> None:
    model = build_model(ClassifierConfig(kind="document", vocab_size=20, num_classes=2, seed=0,
                                         layer=replace(NUMPY_LAYER, d_model=8)))
    optimizer = AdamW(model.parameters(), model.gradients(), lr=0.01)
    seen: list[float] = []
    step = optimizer.step

    def recording_step() -> None:
        seen.append(optimizer.lr)
        step()

    optimizer.step = recording_step  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    xs = [list(rng.integers(2, 20, size=5)) for _ in range(16)]
    ys = rng.integers(0, 2, size=16)
    Trainer(model, optimizer, batch_size=4, warmup_ratio=warmup_ratio).fit(xs, ys, epochs=2)
    assert len(seen) == 8 and optimizer.lr == 0.01
    if warmup_ratio is None:
        assert seen == [0.01] * 8
    else:  # 2 warm-up steps of 8, then linear decay to 0
        assert seen == pytest.approx([0.005, 0.01, 0.01, 0.01 * 5 / 6, 0.01 * 4 / 6, 0.01 * 3 / 6, 0.01 * 2 / 6,
                                      0.01 / 6])
    with pytest.raises(ValueError, match="warmup_ratio"):
        Trainer(model, optimizer, warmup_ratio=1.0)
