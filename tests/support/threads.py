"""Run one call in another thread while this thread's call is paused inside a module's forward."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from torch import nn


def beside(module: nn.Module, here: Callable[[], Any], there: Callable[[], Any]) -> tuple[Any, Any]:
    """Call ``here``; when its first forward of ``module`` has run, call ``there`` in another thread and wait.

    Returns both results. The pause is deterministic: ``there`` runs start to end
    while ``here`` is inside its forward (whatever state it set up is still set).
    """
    caller = threading.get_ident()
    inside, done = threading.Event(), threading.Event()
    found: dict[str, Any] = {}

    def pause(_m: object, _a: object, _o: object) -> None:
        if threading.get_ident() == caller and not inside.is_set():
            inside.set()
            assert done.wait(30), "the other thread did not finish"

    def other() -> None:
        try:
            assert inside.wait(30), "the call never reached the module"
            found["there"] = there()
        finally:
            done.set()

    handle = module.register_forward_hook(pause)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        result = here()
    finally:
        handle.remove()
        done.set()
        thread.join(30)
    assert "there" in found, "the other thread's call failed"
    return result, found["there"]
