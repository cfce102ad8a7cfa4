"""Dynamic batching: the texts of concurrent ``/v1/predict`` requests run through the model together.

One :class:`ModelThread` runs every model call of the server, one at a time (torch's own threads do
the parallel work). :class:`Batcher` stands in front of it for predictions: while the model runs a
batch, the requests that come wait in a queue; the next batch takes them all, up to ``max_batch``
texts (and, with ``wait_ms``, those that come that many milliseconds after its first), runs once, and
each request gets its own rows back. With ``max_batch=1`` every request runs alone, one at a time
(the baseline of ``benchmarks/serve.py``). Texts of one length run together and no text runs alone
(:func:`attnkit.train.tasks.classify.inference.predict_texts`), so a small model gives every text the same numbers
whatever texts share its batch; a larger one can differ in the last bits (docs/serve.md).

:class:`Admission` bounds the requests admitted and not yet answered; past the bound a request is
refused at once (503 with ``Retry-After``), so a flood waits in no unbounded queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["ModelThread", "Batcher", "Admission", "QueueFull"]

T = TypeVar("T")


class ModelThread:
    """A single worker thread that runs the model calls in the order they come."""

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnkit-model")
        self.batches = 0  # model calls made for predictions (a count for tests and the benchmark)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def close(self) -> None:
        """Cancel the calls not started; the one running is not waited for."""
        self.pool.shutdown(wait=False, cancel_futures=True)


class QueueFull(Exception):
    """More requests are waiting than ``--queue`` allows."""


class Admission:
    """Counts the requests in the server; :meth:`enter` refuses one past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inside = 0

    def enter(self) -> None:
        if self.inside >= self.limit:
            raise QueueFull
        self.inside += 1

    def leave(self) -> None:
        self.inside -= 1


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future[list[dict[str, Any]]] = field(default_factory=lambda: asyncio.get_running_loop()
                                                          .create_future())


class Batcher:
    """Gathers concurrent predictions of one model into batches (see the module docstring)."""

    def __init__(self, predict: Callable[[Sequence[str]], list[dict[str, Any]]], thread: ModelThread, *,
                 max_batch: int, wait_ms: float) -> None:
        self.predict = predict
        self.thread = thread
        self.max_batch = max_batch
        self.wait = wait_ms / 1000
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task[None] | None = None

    async def __call__(self, texts: list[str]) -> list[dict[str, Any]]:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.get_running_loop().create_task(self._serve())
        item = _Pending(texts)
        await self.queue.put(item)
        return await item.future

    async def _serve(self) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        carried: _Pending | None = None
        while True:
            first = carried or await self.queue.get()
            carried = None
            batch, size = [first], len(first.texts)
            deadline = loop.time() + self.wait
            while self.max_batch > 1 and size < self.max_batch and carried is None:
                while size < self.max_batch and not self.queue.empty():
                    item = self.queue.get_nowait()
                    if size + len(item.texts) > self.max_batch:
                        carried = item  # opens the next batch
                        break
                    batch.append(item)
                    size += len(item.texts)
                remaining = deadline - loop.time()
                if remaining <= 0 or carried is not None or size >= self.max_batch:
                    break
                await asyncio.sleep(min(remaining, 0.001))
            live = [p for p in batch if not p.future.done()]  # a request that timed out is not run
            if not live:
                continue
            texts = [t for p in live for t in p.texts]
            self.thread.batches += 1
            try:
                rows = await self.thread.run(self.predict, texts)
            except Exception as err:  # every request of the batch gets the error
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            start = 0
            for p in live:
                if not p.future.done():
                    p.future.set_result(rows[start : start + len(p.texts)])
                start += len(p.texts)
