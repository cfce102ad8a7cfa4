from collections.abc import Iterator
from typing import Any

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with one page (tests/support/browser.py), one per test module that asks for it."""
    from tests.support.browser import Browser

    b = Browser()
    try:
        yield b
    finally:
        b.close()
