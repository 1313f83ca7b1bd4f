"""What a Redis Cluster asks of readers and writers of many keys: group them by slot.

A command or MULTI may only touch keys of one slot. `by_slot` groups keys (order kept);
`SlotTransaction` runs what a caller queued for one MULTI as one MULTI per slot, in the
order of their first command; `first_answers` runs one blocking read per slot group and
returns with the first that answers (Storage.xread_many, for a few slots);
`InFlightReads` does the same for XREADGROUP, whose reads that lose the race are kept for
the next call rather than cancelled (a cancelled XREADGROUP may have delivered entries
whose reply is lost: they would wait for a reclaim).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from protocols.keys import key_slot

T = TypeVar("T")


def by_slot(keys: Iterable[str]) -> list[list[str]]:
    """The keys grouped by slot, groups in the order of their first key."""
    groups: dict[int, list[str]] = {}
    for key in keys:
        groups.setdefault(key_slot(key), []).append(key)
    return list(groups.values())


class SlotTransaction:
    """Stands in for a pipeline while a caller queues a MULTI: records each command (its
    first argument is its one key), to be sent as one MULTI per slot."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append((name, args, kwargs))

        return record

    def groups(self) -> list[list[int]]:
        """The indexes of the recorded commands, grouped by the slot of their key (the
        first argument of a command method, the second word of `execute_command`'s)."""
        slots: dict[int, list[int]] = {}
        for i, (name, args, _) in enumerate(self.commands):
            key = args[1] if name == "execute_command" else args[0]
            slots.setdefault(key_slot(key if isinstance(key, bytes) else str(key)), []).append(i)
        return list(slots.values())


async def first_answers(reads: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run the reads at once; when the first answers, the answers there are then (the
    others are cancelled: only reads that change nothing may be raced like this)."""
    tasks = [asyncio.ensure_future(read()) for read in reads]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        for task in tasks:
            if not task.done():
                with contextlib.suppress(BaseException):
                    await task
    return [task.result() for task in tasks if task in done]


class InFlightReads:
    """Blocking reads, one per slot group, that outlive the call which started them: a
    call returns with the reads that answered; the others answer the next call."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        self._sent: dict[tuple[Any, ...], Any] = {}  # each read's `sent`, as its caller said
        # the reads that answered in the last call: (their `sent`, their streams)
        self.answered: list[tuple[Any, tuple[str, ...]]] = []

    async def read(
        self, tag: tuple[Any, ...], groups: Sequence[Sequence[str]],
        start: Callable[[Sequence[str]], Awaitable[list[T]]], timeout_s: float | None,
        sent: Any = None,
    ) -> list[T]:  # fmt: skip
        """The entries of the reads of `groups` (started by `start` unless one of the same
        `tag` and group is still in flight) and of any earlier read that has answered;
        `answered` says which reads those were, each with the `sent` of the call that
        started it."""
        for group in groups:
            key = (*tag, tuple(group))
            if key not in self._tasks:
                self._tasks[key] = asyncio.ensure_future(start(group))
                self._sent[key] = sent
        mine = [key for key in self._tasks if key[: len(tag)] == tag]
        self.answered = []
        await asyncio.wait(
            [self._tasks[k] for k in mine], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        out: list[T] = []
        error: BaseException | None = None
        for key in mine:
            task = self._tasks[key]
            if task.done():
                del self._tasks[key]
                sent_by = self._sent.pop(key, None)
                if task.cancelled():
                    continue
                if (exc := task.exception()) is not None:
                    error = error or exc
                else:
                    out.extend(task.result())
                    self.answered.append((sent_by, key[len(tag)]))
        if error is not None and not out:
            raise error
        return out

    def abandon(self) -> None:
        """Cancel every read in flight (their entries stay pending, for a reclaim)."""
        tasks, self._tasks = list(self._tasks.values()), {}
        self._sent.clear()
        for task in tasks:
            task.cancel()

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
