"""Run event streams for every SSE client on a few connections of their own: one shared
reader (XREAD BLOCK over every followed run) fans new events out to subscribers' queues,
and global and per-client caps refuse more followers with 503 and Retry-After.

No client can take a connection the engine or the lease needs: followers share this
module's own small pool (replays and the one blocking read), never the hub's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hub.store.state import RunEvent, StateStore
from protocols.errors import TransportError
from protocols.keys import Keys, entry_order

log = logging.getLogger(__name__)
READ_BLOCK_MS = 250  # how long the shared read blocks before it looks for new followers
READ_COUNT = 500
LIVE_CHECK_S = 10.0  # this often, followers of runs gone or over are ended
QUEUE_MAX = 1_000  # events a slow follower may fall behind before it is cut off (it resumes)
POOL = 4  # connections: the shared read, and replays
REPLAY_COUNT = 500  # events a replay reads at once


class TooManyStreams(Exception):
    """A cap on open event streams is reached: try again after `retry_after_s`."""

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Batch:
    """Events of a run a follower is given at once. `caught_up`: the follower has every
    event stored so far (the replay's last batch, and each live one; an empty live batch:
    nothing came before the deadline); `ended`: the fanout ended the follower (the hub is
    stopping, the run is gone, or the client fell behind)."""

    events: list[RunEvent]
    caught_up: bool
    ended: bool = False


@dataclass(eq=False)
class Follower:
    """One SSE client's subscription: new events on `queue`; None ends it (cut off)."""

    run_id: str
    client: str
    queue: asyncio.Queue[RunEvent | None] = field(default_factory=asyncio.Queue)
    cut_off: bool = False

    def end(self) -> None:
        if not self.cut_off:
            self.cut_off = True
            self.queue.put_nowait(None)

    def offer(self, events: list[RunEvent]) -> None:
        """Queue the events; a follower QUEUE_MAX behind is cut off (it resumes by its id)."""
        if self.cut_off:
            return
        if self.queue.qsize() + len(events) > QUEUE_MAX:
            self.end()
            return
        for event in events:
            self.queue.put_nowait(event)


class EventFanout:
    def __init__(
        self, url: str, keys: Keys, *, max_streams: int, per_client: int, retry_after_s: int = 5
    ) -> None:
        self.keys = keys
        # Reads only (the shared tail, replays, run lookups), on connections of its own.
        self.store = StateStore.own_connections(url, keys, max_connections=POOL)
        self.max_streams = max_streams
        self.per_client = per_client
        self.retry_after_s = retry_after_s
        self._followers: dict[str, set[Follower]] = {}  # run id -> its followers
        self._cursor: dict[str, str] = {}  # run id -> the last entry id read for it
        self._per_client: dict[str, int] = {}
        self._count = 0
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def open_streams(self) -> int:
        return self._count

    def admit(self, client: str) -> None:
        """Raise TooManyStreams when a cap is reached (checked before the stream opens)."""
        if self._count >= self.max_streams:
            raise TooManyStreams(
                f"{self._count} event streams are open, the most this hub serves "
                f"(CALLBOARD_SSE_MAX_STREAMS): try again later",
                self.retry_after_s,
            )
        if self._per_client.get(client, 0) >= self.per_client:
            raise TooManyStreams(
                f"this client has {self.per_client} event streams open, the most one "
                f"client may (CALLBOARD_SSE_PER_CLIENT): close one or try again later",
                self.retry_after_s,
            )

    @contextlib.asynccontextmanager
    async def follow(self, run_id: str, client: str) -> AsyncIterator[Follower]:
        """Subscribe to the run's new events: those after the shared cursor, which the
        first follower sets to the run's newest event (read before the caller's replay, so
        nothing falls between them). The caller replays from its own position itself and
        skips what it already sent: no client's position moves another's stream (one from
        the future, the cursor, froze every follower's live events)."""
        self.admit(client)
        newest = None if run_id in self._cursor else await self.store.events_position(run_id)
        self.admit(client)  # again: others may have come in while the position was read
        follower = Follower(run_id, client)
        self._followers.setdefault(run_id, set()).add(follower)
        if newest is not None:  # (unless another follower set the cursor meanwhile)
            self._cursor.setdefault(run_id, newest)
        self._per_client[client] = self._per_client.get(client, 0) + 1
        self._count += 1
        self._ensure_reader()
        self._changed.set()
        try:
            yield follower
        finally:
            self._count -= 1
            left = self._per_client[client] - 1
            if left:
                self._per_client[client] = left
            else:
                del self._per_client[client]
            followers = self._followers.get(run_id)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._followers[run_id]
                    self._cursor.pop(run_id, None)

    async def batches(
        self, sub: Follower, after: str, deadline: float, stopping: asyncio.Event
    ) -> AsyncIterator[Batch]:
        """The run's events after entry `after`: what is stored, replayed on the fanout's
        own connections (the live queue fills meanwhile; the last replay batch is short,
        maybe empty), then what the shared reader queues for `sub`, less what the replay
        gave. Ends after the batch that ends the follower, at `deadline` (an empty live
        batch first), or once `stopping` is set."""
        last, caught_up = after, False
        while not caught_up:
            events = await self.store.events(sub.run_id, last, count=REPLAY_COUNT)
            last = events[-1].id if events else last
            caught_up = len(events) < REPLAY_COUNT
            yield Batch(events, caught_up)
        while not stopping.is_set():
            queued = await _queued(sub, deadline)
            events = [e for e in queued if e is not None and entry_order(e.id) > entry_order(last)]
            last = events[-1].id if events else last
            ended = None in queued
            yield Batch(events, caught_up=True, ended=ended)
            if ended or not queued:  # not queued: the deadline passed
                return

    def end_all(self) -> None:
        """End every open stream (the hub is stopping): each client resumes elsewhere."""
        for followers in self._followers.values():
            for follower in followers:
                follower.end()

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="event-fanout")

    async def _read(self) -> None:
        checked = time.monotonic()
        while self._followers:
            self._changed.clear()
            if time.monotonic() - checked >= LIVE_CHECK_S:
                checked = time.monotonic()
                await self._end_gone_runs()
            after = {run_id: self._cursor[run_id] for run_id in self._followers}
            try:
                found = await self.store.tail_runs(after, READ_COUNT, READ_BLOCK_MS)
            except TransportError as exc:
                log.warning("event streams: %s; reading again", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 1.0)
                continue
            for run_id, events in found.items():
                if run_id in self._cursor:
                    self._cursor[run_id] = events[-1].id
                for follower in list(self._followers.get(run_id, ())):
                    follower.offer(events)

    async def _end_gone_runs(self) -> None:
        """Followers of a run that expired, or ended with no final event coming, are ended
        (one lookup per run, however many follow it)."""
        run_ids = list(self._followers)
        try:
            runs = {r.run_id: r for r in await self.store.runs(run_ids)}
        except TransportError:
            return
        for run_id in run_ids:
            run = runs.get(run_id)
            if run is None or run.status.done:
                for follower in self._followers.get(run_id, ()):
                    follower.end()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self.store.close()


async def _queued(sub: Follower, deadline: float) -> list[RunEvent | None]:
    """What is queued for the follower, waiting for the first until `deadline` (none by
    then: empty); a None among them ends the follower."""
    try:
        first = await asyncio.wait_for(sub.queue.get(), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        return []
    found = [first]
    while found[-1] is not None and not sub.queue.empty():
        found.append(sub.queue.get_nowait())
    return found
