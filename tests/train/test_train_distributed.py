"""Data-parallel training: two gloo processes end with identical weights."""

from __future__ import annotations

import os
import socket

import torch
import torch.multiprocessing as mp

from attnkit.train.config import TrainConfig
from attnkit.train.loop.distributed import init_distributed, shutdown_distributed
from attnkit.train.loop.trainer import Trainer
from attnkit.train.runs.checkpoint import load_tensors, save_tensors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, out: str) -> None:
    from tests.train.test_train_helpers import TinyClassifier, TokenDataset, collate

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("cpu")
    try:
        # Different initial weights per rank: DDP must broadcast rank 0's at the start.
        torch.manual_seed(rank)
        model = TinyClassifier()
        train = TokenDataset(64, seed=1)
        cfg = TrainConfig(epochs=2, batch_size=8, lr=0.05, device="cpu", patience=0)
        trainer = Trainer(model, cfg, train, None, collate_fn=collate, lengths=train.lengths,
                          quiet=True, dist=info)
        trainer.fit()
        save_tensors(os.path.join(out, f"rank{rank}.safetensors"), model.state_dict())
        save_tensors(os.path.join(out, f"seen{rank}.safetensors"),
                     {"steps": torch.tensor(trainer.step)})
    finally:
        shutdown_distributed()


def test_two_gloo_ranks_hold_identical_weights(tmp_path) -> None:
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    w0 = load_tensors(tmp_path / "rank0.safetensors")
    w1 = load_tensors(tmp_path / "rank1.safetensors")
    torch.manual_seed(0)
    from tests.train.test_train_helpers import TinyClassifier

    initial = TinyClassifier().state_dict()
    for name in w0:
        assert torch.equal(w0[name], w1[name]), name
        assert not torch.equal(w0[name], initial[name]), f"{name} did not train"
    # Each rank took half of the 64 examples per epoch: 4 batches of 8, two epochs.
    assert int(load_tensors(tmp_path / "seen0.safetensors")["steps"]) == 8
