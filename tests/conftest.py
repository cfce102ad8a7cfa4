import pytest
import torch

# The suite's tensors are tiny: one thread is faster than two, and on a shared
# 2-core machine a second thread mostly waits for a busy core.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    # Commands run in-process (demo, --threads) may change the count; every test starts at one.
    torch.set_num_threads(1)
