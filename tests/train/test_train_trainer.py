"""Trainer: learning, schedule, early stopping, history, and exact resumption."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnkit.train.config import TrainConfig, warmup_linear_factor
from attnkit.train.loop.trainer import Trainer, epoch_batches
from attnkit.train.metrics import accuracy, confusion_matrix, macro_f1
from attnkit.train.runs.checkpoint import committed_dir, load_tensors
from tests.train.test_train_helpers import TinyClassifier, TokenDataset, collate


def _trainer(tmp_path, config, model_seed=0, **kw):
    torch.manual_seed(model_seed)
    model = TinyClassifier()
    train, val = TokenDataset(96, seed=1), TokenDataset(32, seed=2)
    return Trainer(model, config, train, val, collate_fn=collate, lengths=train.lengths,
                   out_dir=tmp_path, quiet=True, **kw)


def test_metrics_against_hand_counts() -> None:
    t, p = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 2]
    assert accuracy(t, p) == pytest.approx(4 / 6)
    np.testing.assert_array_equal(confusion_matrix(t, p), [[1, 1, 0], [0, 2, 0], [1, 0, 1]])
    # F1 per class: 0 -> 2*1/(2+2)=0.5, 1 -> 2*2/(2+3)=0.8, 2 -> 2*1/(2+1)=2/3
    assert macro_f1(t, p) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="same length"):
        accuracy([0, 1], [0])


def test_schedule_warms_up_then_decays() -> None:
    f = [warmup_linear_factor(s, 10, 4) for s in range(10)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == 1.0 and all(a > b for a, b in zip(f[4:], f[5:], strict=False))
    assert warmup_linear_factor(10, 10, 4) == 0.0


def test_config_rejects_bad_values_and_unknown_keys() -> None:
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=-1.0)
    with pytest.raises(ValueError, match="valid fields"):
        TrainConfig.from_dict({"epochs": 2, "learning_rate": 0.1})


def test_epoch_batches_cover_every_index_once_and_split_over_ranks() -> None:
    lengths = list(range(50))
    batches = epoch_batches(50, 8, seed=3, epoch=1, lengths=lengths)
    assert sorted(i for b in batches for i in b) == list(range(50))
    assert batches == epoch_batches(50, 8, seed=3, epoch=1, lengths=lengths)
    assert batches != epoch_batches(50, 8, seed=3, epoch=2, lengths=lengths)
    r0 = epoch_batches(51, 8, 0, 0, rank=0, world_size=2)
    r1 = epoch_batches(51, 8, 0, 0, rank=1, world_size=2)
    assert len(r0) == len(r1)
    assert set(i for b in r0 + r1 for i in b) == set(range(51))


def test_trainer_learns_and_writes_history(tmp_path) -> None:
    cfg = TrainConfig(epochs=12, batch_size=16, lr=0.05, patience=0, device="cpu")
    trainer = _trainer(tmp_path, cfg)
    before = trainer.evaluate(trainer.val_data)["loss"]
    history = trainer.fit()
    after = trainer.evaluate(trainer.val_data)
    assert after["loss"] < before
    assert history[-1]["train_accuracy"] > 0.8
    lines = (committed_dir(tmp_path) / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == list(range(1, 13))
    assert trainer.step == 12 * trainer.steps_per_epoch


def test_early_stopping_restores_best_weights(tmp_path) -> None:
    cfg = TrainConfig(epochs=30, batch_size=16, lr=0.3, patience=2, device="cpu")
    trainer = _trainer(tmp_path, cfg)
    history = trainer.fit()
    assert len(history) < 30
    assert [h["best"] for h in history[-2:]] == [False, False]
    best = max(h["val_accuracy"] for h in history)
    assert trainer.evaluate(trainer.val_data)["accuracy"] == pytest.approx(best)


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("kernel", ["foreach", "fused"])
def test_resume_after_interruption_gives_identical_weights(tmp_path, kernel) -> None:
    cfg = TrainConfig(epochs=4, batch_size=16, lr=0.05, patience=3, device="cpu", optimizer_kernel=kernel)
    straight = _trainer(tmp_path / "a", cfg)
    straight.fit()

    interrupted = _trainer(tmp_path / "b", cfg)
    calls = {"n": 0}

    def stop_midway(*_args: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2 * interrupted.steps_per_epoch + 3:  # in the middle of epoch 3
            raise _Interrupt

    hook = interrupted.model.register_forward_pre_hook(stop_midway)
    with pytest.raises(_Interrupt):
        interrupted.fit()
    hook.remove()
    assert json.loads((committed_dir(tmp_path / "b") / "train_state" / "state.json").read_text())["epoch"] == 2

    # A fresh process: new model object with different initial weights, then resume.
    resumed = _trainer(tmp_path / "b", cfg, model_seed=123)
    resumed.fit(resume=True)
    assert resumed.step == straight.step
    for (name, a), (_, b) in zip(straight.model.state_dict().items(),
                                 resumed.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    last_a = load_tensors(committed_dir(tmp_path / "a") / "train_state" / "last.safetensors")
    last_b = load_tensors(committed_dir(tmp_path / "b") / "train_state" / "last.safetensors")
    assert all(torch.equal(last_a[k], last_b[k]) for k in last_a)
    assert [h["train_loss"] for h in straight.history] == [h["train_loss"] for h in resumed.history]


def test_resume_refuses_a_different_plan(tmp_path) -> None:
    _trainer(tmp_path, TrainConfig(epochs=1, batch_size=16, device="cpu")).fit()
    other = _trainer(tmp_path, TrainConfig(epochs=1, batch_size=8, device="cpu"))
    with pytest.raises(ValueError, match="cannot resume"):
        other.fit(resume=True)


def test_trainer_steps_equal_a_hand_written_adamw_loop() -> None:
    """Each step of the loop: fresh gradients (zero_grad), the scheduled rate, AdamW with decay
    on matrices only. Two epochs of the Trainer equal the same steps written out by hand."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=0.05, weight_decay=0.1, warmup_ratio=0.25, clip_norm=0,
                      patience=0, device="cpu", bucket=False)
    torch.manual_seed(0)
    model = TinyClassifier(dropout=0.0)
    data = TokenDataset(48, seed=1)
    trainer = Trainer(model, cfg, data, collate_fn=collate, quiet=True)
    torch.manual_seed(0)
    twin = TinyClassifier(dropout=0.0)
    decay = [p for p in twin.parameters() if p.dim() >= 2]
    rest = [p for p in twin.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr)
    total = trainer.total_steps
    step = 0
    for epoch in range(cfg.epochs):
        for batch_ids in epoch_batches(len(data), cfg.batch_size, cfg.seed, epoch):
            batch = collate([data[i] for i in batch_ids])
            for group in opt.param_groups:
                group["lr"] = cfg.lr * warmup_linear_factor(step, total, int(0.25 * total), 0.0)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(twin(batch["ids"], batch["lengths"]), batch["labels"]).backward()
            opt.step()
            step += 1
    trainer.fit()
    assert trainer.step == step == 6
    for (name, a), b in zip(trainer.model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_the_foreach_kernel_gives_the_one_tensor_loops_bytes_and_fused_is_close(tmp_path) -> None:
    """AdamW's kernels: foreach (the default) is torch's one-tensor loop (its default on a CPU) to the bit;
    fused rounds differently in the last bits only."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=0.05, patience=0, device="cpu")

    def loop(model: torch.nn.Module) -> torch.optim.Optimizer:
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                  {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, foreach=False)

    reference = _trainer(tmp_path / "loop", cfg, optimizer=loop)
    reference.fit()
    foreach = _trainer(tmp_path / "foreach", cfg)
    fused = _trainer(tmp_path / "fused", TrainConfig(**{**cfg.to_dict(), "optimizer_kernel": "fused"}))
    assert foreach.optimizer.defaults["foreach"] is True and fused.optimizer.defaults["fused"] is True
    foreach.fit()
    fused.fit()
    for (name, a), b, c in zip(reference.model.named_parameters(), foreach.model.parameters(),
                               fused.model.parameters(), strict=True):
        assert torch.equal(a, b), name
        torch.testing.assert_close(c, a, rtol=0, atol=1e-4, msg=name)
    assert any(not torch.equal(a, c) for a, c in zip(reference.model.parameters(), fused.model.parameters(),
                                                     strict=True))
    with pytest.raises(ValueError, match="optimizer_kernel.*foreach.*fused"):
        TrainConfig(optimizer_kernel="sparse")


def test_precision_bf16_runs_the_steps_forward_in_bfloat16_and_keeps_everything_else_float32(tmp_path,
                                                                                          monkeypatch) -> None:
    """``precision`` is the training step's autocast: the classifier's product is bfloat16 under bf16 (float32
    under fp32, whose weights are the reference's to the bit), while weights, validation and predictions stay
    float32; ``auto`` follows the device's native support."""
    from attnkit.train.loop.distributed import resolve_precision

    cfg = TrainConfig(epochs=2, batch_size=16, lr=0.05, patience=0, device="cpu")
    runs = {}
    for precision in ("fp32", "bf16"):
        trainer = _trainer(tmp_path / precision, TrainConfig(**{**cfg.to_dict(), "precision": precision}))
        seen: list[tuple[bool, torch.dtype]] = []
        trainer.model.classifier.register_forward_hook(
            lambda module, args, out, seen=seen: seen.append((module.training, out.dtype)))
        trainer.fit()
        assert {dtype for training, dtype in seen if training} == {getattr(torch, {"fp32": "float32",
                                                                                 "bf16": "bfloat16"}[precision])}
        assert {dtype for training, dtype in seen if not training} == {torch.float32}  # validation
        assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
        assert trainer.predict(trainer.val_data)[0].dtype == torch.float32
        runs[precision] = trainer.model
    reference = _trainer(tmp_path / "default", cfg)
    reference.fit()
    assert all(torch.equal(a, b) for a, b in zip(reference.model.parameters(), runs["fp32"].parameters(),
                                                 strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(runs["fp32"].parameters(), runs["bf16"].parameters(),
                                                     strict=True))
    for name, native in (("_is_avx512_bf16_supported", False), ("_is_amx_tile_supported", False)):
        monkeypatch.setattr(torch.cpu, name, lambda native=native: native)
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert resolve_precision("auto", torch.device("cpu")) == "bf16"
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    lines: list[str] = []
    _trainer(tmp_path / "auto", TrainConfig(**{**cfg.to_dict(), "precision": "auto", "epochs": 1}),
             log=lines.append).fit()
    assert lines[0] == "precision auto: bf16 on cpu (it multiplies bfloat16 natively)"  # said before the first epoch
    with pytest.raises(ValueError, match="precision.*fp32.*bf16.*auto"):
        TrainConfig(precision="fp16")


def test_epoch_batches_cap_the_padded_tokens_of_long_documents() -> None:
    lengths = [10] * 60 + [400] * 12 + [1000] * 3  # short documents, long ones, and some past the cap
    batches = epoch_batches(75, 16, seed=0, epoch=0, lengths=lengths, max_tokens=1600)
    assert sorted(i for b in batches for i in b) == list(range(75))
    for b in batches:
        assert len(b) <= 16
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1600
    assert max(len(b) for b in batches) == 16  # short documents still fill whole batches
    assert sorted(len(b) for b in batches if lengths[b[0]] == 1000) == [1, 1, 1]  # over the cap alone
    assert batches == epoch_batches(75, 16, seed=0, epoch=0, lengths=lengths, max_tokens=1600)
    uncapped = epoch_batches(75, 16, seed=0, epoch=0, lengths=lengths)
    assert max(len(b) * max(lengths[i] for i in b) for b in uncapped) > 1600
    # several processes need the same batch count each: the cap is not applied there
    ranks = [epoch_batches(75, 16, 0, 0, lengths=lengths, rank=r, world_size=2, max_tokens=1600) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])


def test_predict_with_a_token_cap_reads_smaller_batches_and_gives_the_same_logits() -> None:
    from attnkit.train.tasks.classify.task import ClassificationTask

    torch.manual_seed(0)
    model, data = TinyClassifier(), TokenDataset(40, seed=3)
    seen: list[int] = []
    model.register_forward_hook(lambda _m, args, _out: seen.append(int(args[0].numel())))
    plain = ClassificationTask(data, collate=collate, lengths=data.lengths, batch_size=16)
    capped = ClassificationTask(data, collate=collate, lengths=data.lengths, batch_size=16, max_tokens=20)
    logits, labels = plain.predict(model, data, batch_size=16)
    assert max(seen) > 20
    read = sum(seen)
    seen.clear()
    capped_logits, capped_labels = capped.predict(model, data, batch_size=16)
    assert max(seen) <= 20 and len(seen) > 3  # every batch within the cap (each document is under it)
    torch.testing.assert_close(capped_logits, logits)
    assert torch.equal(capped_labels, labels)
    # like lengths share a batch, and the rows come back in the data's order
    alone = torch.cat([model.eval()(*[collate([data[i]])[k] for k in ("ids", "lengths")]) for i in range(40)])
    torch.testing.assert_close(logits, alone.detach())
    assert labels.tolist() == [int(data[i]["label"]) for i in range(40)]
    padded = sum(len(b) * max(data.lengths[i] for i in b) for b in [range(s, min(40, s + 16)) for s in (0, 16, 32)])
    assert read < padded  # fewer padded tokens than batches in the data's order
