"""The deadline of every Redis call in flight: a reply that never comes ends its call.

A half-dead link (the server ran the command, its reply is lost, the socket stays open)
would hold a call for ever: TCP keepalive only notices a peer that is gone. Each call is
registered here with the time its reply is due; one timer a second (`SWEEP_S`) cancels a
call past it, and the call ends as Unreachable, as a lost connection would (redis-py closes
a connection cancelled mid-reply). A timer per call (asyncio.timeout) costs about 4 µs of
CPU; this, about 1. A sweep that runs late (the process was frozen or starved) moves every
deadline on by its lateness: time the process could not hear a reply is not counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

SWEEP_S = 1.0  # how often calls in flight are checked (a quarter of a shorter deadline)
LATE_S = 0.5  # a sweep this late or later counts as time the process was not running
T = TypeVar("T")


class Call:
    """One call in flight: its task, when its reply is due, whether the sweep ended it."""

    __slots__ = ("cancelling", "deadline_s", "due", "expired", "loop", "task")

    def __init__(
        self, task: asyncio.Task[object], loop: asyncio.AbstractEventLoop, deadline_s: float
    ) -> None:
        self.task = task
        self.loop = loop
        self.deadline_s = deadline_s
        self.due = loop.time() + deadline_s
        self.cancelling = task.cancelling()  # cancellations already asked of the task
        self.expired = False

    def tried(self, fn: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        """`fn()`, a try of the call: its reply is due within the whole deadline from now
        (a retry does not inherit what the tries before it spent)."""
        self.due = self.loop.time() + self.deadline_s
        return fn()


class Deadlines:
    """The calls of one client in flight, and their sweep: `start` a call, `end` it in a
    `finally`, and ask `ended_it` of a CancelledError whether the sweep's it was."""

    def __init__(self) -> None:
        self._calls: set[Call] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the sweep's
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_due = 0.0
        self._every_s = SWEEP_S

    def start(self, deadline_s: float) -> Call | None:
        """A call of the current task whose reply is due within `deadline_s` (None outside
        a task: there is nothing to cancel)."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            return None
        call = Call(task, loop, deadline_s)
        self._calls.add(call)
        if self._sweep is None or self._sweep_due > call.due or self._loop is not call.loop:
            self._schedule(call.loop, min(SWEEP_S, deadline_s / 4))
        return call

    def ended_it(self, call: Call) -> bool:
        """On the call's CancelledError: True when the sweep's cancellation alone caused it
        (the call ends as Unreachable), False when the task was also cancelled from outside
        (the CancelledError goes on). Either way the sweep's is taken back."""
        if not call.expired:
            return False
        call.expired = False
        return call.task.uncancel() <= call.cancelling

    def end(self, call: Call) -> None:
        self._calls.discard(call)
        if call.expired:  # asked, and the call swallowed the cancellation: take it back
            call.task.uncancel()

    def _schedule(self, loop: asyncio.AbstractEventLoop, every_s: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        if self._loop is not loop:  # a client used on a new loop: the old loop's calls are gone
            self._loop = loop
            self._calls = {call for call in self._calls if call.loop is loop}
        self._every_s = every_s
        self._sweep_due = loop.time() + every_s
        self._sweep = loop.call_at(self._sweep_due, self._swept)

    def _swept(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = now - self._sweep_due
        for call in self._calls:
            if late >= LATE_S:
                call.due += late
            elif call.due <= now and not call.expired and not call.task.done():
                call.expired = True
                call.task.cancel("callboard: no reply within the call's deadline")
        if self._calls:
            self._schedule(loop, self._every_s)
