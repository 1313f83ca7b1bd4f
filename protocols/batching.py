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

    `take` lends the queued items to a caller that writes them in a round trip of its own
    (a replica's next read) and `settle`s them; until then no other batch is flushed, so
    writes still go one batch at a time, in order.
    """

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[Sequence[R]]], name: str, most: int = 512
    ) -> None:
        self._flush = flush
        self._name = name
        self._most = most
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._flushing = False  # a batch of the runner's is being written
        self._lent: list[tuple[T, asyncio.Future[R]]] | None = None  # taken, not yet settled
        self._settled = asyncio.Event()  # made again by each `take`, in the caller's loop

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
        while True:
            if self._lent is not None:
                await self._settled.wait()
            elif self._runner is not None and not self._runner.done():
                await asyncio.wait([self._runner])
            else:
                return

    def take(self) -> list[T] | None:
        """The items queued now (at most `most`), lent to the caller to write: None when
        none is queued or a batch is being written. The caller must `settle` them."""
        if not self._queue or self._flushing or self._lent is not None:
            return None
        self._lent, self._queue = self._queue[: self._most], self._queue[self._most :]
        self._settled = asyncio.Event()
        return [item for item, _ in self._lent]

    def settle(self, outcome: Sequence[R] | BaseException, again: bool = False) -> None:
        """The outcome of the items `take` lent out: their results, in order, or the
        failure of their write. `again`: they were not written; they go first in the next
        batch."""
        batch, self._lent = self._lent, None
        self._settled.set()
        if batch is None:
            return
        if again:
            self._queue[:0] = batch
            if self._runner is None or self._runner.done():
                self._runner = asyncio.create_task(self._run(), name=f"coalesce-{self._name}")
            return
        if isinstance(outcome, BaseException):
            failure = outcome if isinstance(outcome, Exception) else _cut(outcome)
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            return
        for (_, future), result in zip(batch, outcome, strict=True):
            if not future.done():
                future.set_result(result)

    async def _run(self) -> None:
        while self._queue:
            await self._gather()
            while self._lent is not None:  # a lent batch is written first: one at a time
                await self._settled.wait()
            if not self._queue:  # taken meanwhile
                return
            batch, self._queue = self._queue[: self._most], self._queue[self._most :]
            self._flushing = True
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
            finally:
                self._flushing = False
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
