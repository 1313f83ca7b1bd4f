"""Coalescing round trips: calls made while one batch is in flight go together in the
next, in the order they were made (a specialist's writes, the commands an API process
queues: the callers' side of group commit)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("callboard.batching")

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Feeds items to `flush(items) -> results` in batches, one batch in flight at a time.

    `submit` queues an item at once (so the order of calls is the order of the writes) and
    returns a future for its result; `__call__` awaits it. A failed batch fails every item
    in it; the next batch is tried afresh.
    """

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[Sequence[R]]], name: str, most: int = 512
    ) -> None:
        self._flush = flush
        self._name = name
        self._most = most
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None

    def submit(self, item: T) -> asyncio.Future[R]:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name=f"coalesce-{self._name}")
        return future

    async def __call__(self, item: T) -> R:
        return await self.submit(item)

    def post(self, item: T) -> None:
        """Queue without waiting; a failure is logged (and the later writes tell the tale)."""
        self.submit(item).add_done_callback(self._log_failure)

    async def idle(self) -> None:
        """Wait until everything queued so far has been flushed (or has failed)."""
        while self._runner is not None and not self._runner.done():
            await asyncio.wait([self._runner])

    async def _run(self) -> None:
        while self._queue:
            await self._gather()
            batch, self._queue = self._queue[: self._most], self._queue[self._most :]
            try:
                results = await self._flush([item for item, _ in batch])
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else _cut(exc))
                if not isinstance(exc, Exception):
                    for _, future in self._queue:  # no more batches: fail the rest too
                        future.set_exception(_cut(exc))
                    self._queue = []
                    raise
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _gather(self) -> None:
        """Let the tasks that are ready run first, while they keep adding to the queue (up
        to `most` items): work in progress joins this batch instead of waiting for the
        next round trip. A lone call waits one turn of the event loop."""
        seen = -1
        while seen != len(self._queue) and len(self._queue) < self._most:
            seen = len(self._queue)
            await asyncio.sleep(0)

    def _log_failure(self, future: asyncio.Future[R]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("%s write failed: %s", self._name, future.exception())


def _cut(exc: BaseException) -> Exception:
    return ConnectionError(f"write interrupted ({type(exc).__name__})")
