"""One replica's event loop: read the inbox within the concurrency limit, keep claims alive,
reclaim a dead replica's work, follow broadcasts, and drain on stop. Writes go one batch at
a time (protocols.batching); what is answered at once rides ahead of the next read."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from protocols import codec
from protocols.batching import Coalescer
from protocols.codec import Envelope
from protocols.errors import OutOfMemory, ReadOnly, TransportError
from protocols.messages import MessageType
from protocols.outage import Outage
from protocols.payloads import StatusOffline, StatusOnline, StatusRejected
from protocols.transport import Delivery, Transport, WriteAhead
from specialists.context import ContextReader
from specialists.dispatch import Abandon, Dispatcher
from specialists.markers import DoneMarkers

if TYPE_CHECKING:
    from specialists.base import Specialist

log = logging.getLogger("callboard.specialists")
MAX_REASON_CHARS = 1000  # of a rejection's reason (the hub cuts it there too)
REFUSED_FIRST_PAUSE_S = 0.05  # backoff of a write Redis refused (see Runtime._write)
REFUSED_MAX_PAUSE_S = 1.0
Items = list[tuple[str, Envelope | bytes]]  # messages for streams


@dataclass(frozen=True, slots=True)
class Write:
    """Messages for this replica's out stream, raw commands after them, and XACKs last.

    A write that `settles` a piece of work (its completion or failure) drops a write of the
    same batch that is `superseded` by it (its status.started): the outcome says it started.
    """

    messages: Sequence[Envelope | bytes] = ()
    ack: Sequence[Delivery] = ()
    then: Sequence[Sequence[Any]] = ()
    settles: Hashable | None = None
    superseded: Hashable | None = None
    later: Callable[[], Envelope] | None = None  # a message made only if it is written

    def out(self, settled: set[Hashable]) -> list[Envelope | bytes]:
        if self.superseded is not None and self.superseded in settled:
            return []
        return [*self.messages, self.later()] if self.later is not None else list(self.messages)


class Runtime:
    """The loops and the shared state of one running replica (see `Dispatcher` for handling)."""

    def __init__(self, spec: Specialist, transport: Transport) -> None:
        self.spec = spec
        self.transport = transport
        self.settings = spec.settings
        keys = spec.settings.keys
        self.inbox = keys.inbox(spec.agent_id)
        self.out = keys.out(spec.agent_id)
        self.broadcast = keys.broadcast
        self.group = spec.agent_id
        self.consumer = spec.replica
        done_ttl_s = spec.settings.done_ttl_s or spec.done_ttl_s
        self.markers = DoneMarkers(
            transport, keys, spec.agent_id, done_ttl_s, lease_ms=self.settings.min_idle_ms
        )
        self.context_reader = ContextReader(spec.settings.api_url, spec.settings.api_key)
        self.prefetch = max(spec.settings.prefetch or 4 * spec.concurrency, spec.concurrency)
        self.writes: Coalescer[Write, None] = Coalescer(self._write, "out")
        self.refused = False  # Redis refused a write: they go alone until one lands
        self.busy = 0  # work items executing
        self.waiting = 0  # work items read but waiting for a slot or for resume
        self.settling = 0  # work items done, their outcome being written
        self.paused = False
        self.starved = False  # the reader waits for room to read (see read_budget)
        self.in_flight: dict[str, Delivery] = {}  # entry id -> delivery still ours to ack
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stopping = asyncio.Event()  # stop taking work, drain
        self.closed = asyncio.Event()  # drained: every loop ends
        self.stop_reason = "stopped"
        self._change = asyncio.Event()
        self._slot_queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self.crash: BaseException | None = None
        self.outage = Outage(remind_s=60.0)  # Redis trouble: what the loops have said of it
        self.dispatch = Dispatcher(self)

    # -- writes --------------------------------------------------------------------------

    async def send(
        self,
        *messages: Envelope | bytes,
        ack: Sequence[Delivery] = (),
        then: Sequence[Sequence[Any]] = (),
        settles: Hashable | None = None,
    ) -> None:
        """Write to the out stream (and XACK `ack`) in the next atomic batch; every write of
        the replica goes this way, so they land in the order they were made."""
        await self.writes(Write(messages, ack, then, settles=settles))

    async def reject(self, d: Delivery, reason: str) -> None:
        """Have the hub dead-letter an entry of the inbox: `status.rejected` on the out stream
        and the entry's XACK, in one atomic write (a replica writes nowhere else; the hub
        copies the entry from the inbox itself, so nobody can forge a dead letter)."""
        await self.send(self.rejection(d, reason), ack=[d])

    async def reject_poison(self, items: list[tuple[Delivery, str]]) -> None:
        """Entries delivered too often (the transport's poison check), rejected together."""
        await self.send(*[self.rejection(d, why) for d, why in items], ack=[d for d, _ in items])

    def rejection(self, d: Delivery, reason: str) -> Envelope:
        """The `status.rejected` of `d`; it must be written with the entry's XACK."""
        log.warning("rejecting %s %s: %s", self.inbox, d.entry_id, reason)
        m = d.message  # run and cue, when the entry says them, for the reader's sake
        payload = StatusRejected(
            entry_id=d.entry_id, reason=reason[:MAX_REASON_CHARS],
            deliveries=max(d.deliveries, 1), replica=self.spec.replica,
        )  # fmt: skip
        return codec.make(
            MessageType.STATUS_REJECTED, payload, from_agent=self.spec.agent_id,
            run_id=m.run_id if m else None, cue_id=m.cue_id if m else None,
        )  # fmt: skip

    def post(self, make: Callable[[], Envelope], superseded: Hashable | None = None) -> None:
        """Queue the message `make()` returns, made when written, without waiting for the
        write (a failure is logged)."""
        self.writes.post(Write(later=make, superseded=superseded))

    async def _write(self, batch: list[Write]) -> list[None]:
        """One atomic write of the batch. One Redis refuses whole (out of memory, read-only:
        the MULTI applies nothing) is tried again, backing off, for up to
        `refused_write_retry_s`: the entries stay in flight (renewed) instead of failing and
        being redelivered until they count as poison, which they are not."""
        waited_s, pause_s = 0.0, REFUSED_FIRST_PAUSE_S
        while True:
            try:
                items, ack, then = self._parts(batch)
                await self.transport.publish_many(
                    items, ack=ack, group=self.group, then=then, atomic=True
                )
                if self.refused:  # writes land again: so may the outcomes of new work
                    self.refused = False
                    self.changed()
                return [None] * len(batch)
            except (OutOfMemory, ReadOnly) as exc:
                self.refused = True
                if waited_s >= self.settings.refused_write_retry_s or self.closed.is_set():
                    raise
                if not waited_s:
                    log.warning("out write refused (%s); trying again", exc)
                await asyncio.sleep(pause_s)  # back off while Redis refuses writes
                waited_s += pause_s
                pause_s = min(pause_s * 2, REFUSED_MAX_PAUSE_S)

    def _parts(self, batch: list[Write]) -> tuple[Items, list[Delivery], list[Sequence[Any]]]:
        """A batch's messages for the out stream, its XACKs and its raw commands."""
        settled = {w.settles for w in batch if w.settles is not None}
        items: Items = [(self.out, m) for w in batch for m in w.out(settled)]
        return items, [d for w in batch for d in w.ack], [c for w in batch for c in w.then]

    def _ahead(self) -> WriteAhead | None:
        """The writes queued now, to go in the next read's round trip (see `_read_loop`);
        None when there are none, a batch is being written, Redis refused the last, or
        the transport cannot send them with the read (a Redis Cluster: the writer sends
        them meanwhile, and the read does not wait for them)."""
        if self.refused or not self.transport.writes_ride_reads:
            return None
        batch = self.writes.take()
        if batch is None:
            return None
        try:
            items, ack, then = self._parts(batch)
            commands = self.transport.writes(items, ack=ack, group=self.group, then=then)
        except Exception as exc:  # a message that cannot be made: as a failed write
            self.writes.settle(exc)
            return None
        return WriteAhead(commands, partial(self._told, len(batch)))

    def _told(self, count: int, outcome: list[Any] | BaseException) -> None:
        if isinstance(outcome, OutOfMemory | ReadOnly):
            # refused whole (nothing applied): the writer tries again, backing off
            self.refused = True
            self.writes.settle(outcome, again=True)
        elif isinstance(outcome, BaseException):
            self.writes.settle(outcome)
        else:
            self.writes.settle([None] * count)

    # -- state shared with the dispatcher ------------------------------------------------

    def changed(self) -> None:
        """Wake the loops waiting for room to read, a resume or a stop."""
        self._change.set()
        self._change = asyncio.Event()

    async def wait_change(self, timeout_s: float | None = None) -> None:
        change = self._change
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(change.wait(), timeout_s)

    @property
    def state(self) -> str:
        return "draining" if self.stopping.is_set() else "paused" if self.paused else "running"

    def stop(self, reason: str) -> None:
        if not self.stopping.is_set():
            log.info("%s/%s stopping: %s", self.group, self.consumer, reason)
            self.stop_reason = reason
            self.stopping.set()
            self._wake_slots()
            self.changed()

    def pause(self, paused: bool) -> None:
        self.paused = paused
        self._wake_slots()
        self.changed()

    @contextlib.asynccontextmanager
    async def work_slot(self) -> AsyncIterator[None]:
        """Hold one of the `concurrency` slots; wait while paused or full. Work not started
        when a stop comes is abandoned: it stays pending for another replica to reclaim.
        A freed slot wakes one waiter, first come first served (not every waiter)."""
        self.waiting += 1
        try:
            while True:
                if self.stopping.is_set():
                    raise Abandon
                if not self.paused and self.busy < self.spec.concurrency:
                    break
                turn = asyncio.get_running_loop().create_future()
                self._slot_queue.append(turn)
                try:
                    await turn
                finally:
                    if not turn.done():  # cancelled while queued
                        self._slot_queue.remove(turn)
        finally:
            self.waiting -= 1
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self._wake_slots(1)
            self.changed()

    def _wake_slots(self, n: int | None = None) -> None:
        """Let the first `n` waiters for a slot (all, when None) look again."""
        while self._slot_queue and (n is None or n > 0):
            turn = self._slot_queue.popleft()
            if not turn.done():
                turn.set_result(None)
                n = None if n is None else n - 1

    def read_budget(self) -> int:
        """How many entries to take now. A replica holds up to `prefetch` (work done and only
        being written does not count, unless Redis refuses writes: then its outcome may not
        land for a while, and new work would only add outcomes that cannot be written);
        when everything it holds is running, it takes one more, so acks keep flowing while
        every slot is busy. While entries wait their turn, it reads again only once half the
        room is free, so reads come in batches."""
        held = len(self.in_flight) - (0 if self.refused else self.settling)
        room = self.prefetch - held
        if held <= self.busy:  # nothing waits (read but not yet running counts as waiting)
            return max(room, 1)
        return room if room * 2 >= self.prefetch else 0

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def accept(self, delivery: Delivery) -> None:
        if delivery.entry_id in self.in_flight:
            # delivered again while handled here (a consumer group made again replays its
            # entries): the first handler still owns it, renews it and acks it with its outcome
            log.info("%s %s delivered again while in hand", self.inbox, delivery.entry_id)
            return
        self.in_flight[delivery.entry_id] = delivery
        self.spawn(self._handle(delivery))

    async def _handle(self, delivery: Delivery) -> None:
        try:
            await self.dispatch.handle(delivery)
        finally:
            self.in_flight.pop(delivery.entry_id, None)
            if self.starved:  # the reader waits for room: this entry made some
                self.changed()

    # -- the loops -----------------------------------------------------------------------

    async def run(self) -> None:
        spec, t = self.spec, self.transport
        await t.ensure_group(self.inbox, self.group)
        await t.ensure_consumer(self.inbox, self.group, spec.replica)
        tail = await t.broadcast_tail()  # follow what is broadcast from now on, not before
        await spec.setup()
        await t.publish(
            self.out,
            self.dispatch.message(
                MessageType.STATUS_ONLINE,
                StatusOnline(
                    replica=spec.replica,
                    kind=spec.kind,
                    contract=spec.contract,
                    concurrency=spec.concurrency,
                ),
            ),
        )
        log.info(
            "%s/%s online (%s, concurrency %d)",
            self.group,
            self.consumer,
            spec.kind,
            spec.concurrency,
        )
        loops = [
            asyncio.create_task(self._read_loop()),
            asyncio.create_task(self._broadcast_loop(tail)),
            asyncio.create_task(self._keep_claims()),
        ]
        for loop in loops:
            loop.add_done_callback(self._loop_ended)
        try:
            await self.stopping.wait()
            await asyncio.wait([loops[0]])  # the reader stops after its current read
            self.dispatch.cancel_idle_preparations()
            await self._drain(spec.drain_timeout_s)
        finally:
            # Loops also end on `closed`: a cancel that lands inside a redis-py read is
            # sometimes swallowed (the read returns normally), so cancelling alone may hang.
            self.closed.set()
            for task in (*loops, *self.tasks):
                task.cancel()
            await asyncio.gather(*loops, *self.tasks, return_exceptions=True)
        offline = StatusOffline(replica=spec.replica, reason=self.stop_reason)
        await self.send(self.dispatch.message(MessageType.STATUS_OFFLINE, offline))
        await spec.teardown()
        await self.context_reader.aclose()
        log.info("%s/%s offline", self.group, self.consumer)
        if self.crash is not None:
            raise self.crash

    def _loop_ended(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.crash = task.exception()
            log.error("%s/%s loop crashed: %r", self.group, self.consumer, self.crash)
            self.stop(f"crashed: {self.crash}")

    async def _drain(self, timeout_s: float) -> None:
        """Wait for work in progress (and what it spawns) until done or `timeout_s` passed;
        whatever is left stays pending in the group for another replica to reclaim."""
        deadline = time.monotonic() + timeout_s
        while self.tasks and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self.tasks), timeout=left)

    async def _read_loop(self) -> None:
        while not self.stopping.is_set():
            count = self.read_budget()
            if count == 0:
                self.starved = True
                try:
                    await self.wait_change(self.settings.block_ms / 1000)
                finally:
                    self.starved = False
                continue
            try:
                got = await self.transport.read_group(
                    [self.inbox],
                    self.group,
                    self.consumer,
                    count=count,
                    block_ms=self.settings.block_ms,
                    ahead=self._ahead(),
                )
            except TransportError as exc:
                await self._backoff("read", exc)
                continue
            if self.outage.down and self.outage.ok():
                log.info("%s/%s reads again", self.group, self.consumer)
            for delivery in got:
                self.accept(delivery)
            if got:  # their handlers' first steps: what they answer at once goes ahead of
                await asyncio.sleep(0)  # the next read, in its round trip (`_ahead`)

    async def _keep_claims(self) -> None:
        """Renew our entries every min_idle_ms/3; every claim_interval_ms, reclaim idle
        ones and call off the work in hand another replica stood down."""
        s = self.settings
        renew_every_s = max(s.min_idle_ms / 3, 20) / 1000
        claim_every_s = max(s.claim_interval_ms, 20) / 1000
        next_renew = next_claim = time.monotonic()
        while not self.closed.is_set():
            now = time.monotonic()
            try:
                if now >= next_renew:
                    next_renew = now + renew_every_s
                    # the entries in hand, and the claims of the work among them, each lease
                    # renewed as long as the other's
                    renewals: list[Awaitable[Any]] = []
                    if self.in_flight:
                        ids = list(self.in_flight)
                        renewals.append(
                            self.transport.renew(self.inbox, self.group, self.consumer, ids)
                        )
                    if self.dispatch.claims:
                        renewals.append(self.dispatch.renew_claims())
                    await asyncio.gather(*renewals)
                if now >= next_claim:
                    next_claim = now + claim_every_s
                    # the markers' round trip (only with work in hand) beside the reclaim's
                    await asyncio.gather(self._reclaim(), self.dispatch.call_off_stood_down())
            except TransportError as exc:
                await self._backoff("claim", exc)
            pause_s = max(0.0, min(next_renew, next_claim) - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), pause_s)

    async def _reclaim(self) -> None:
        count = 0 if self.stopping.is_set() else self.read_budget()
        if not count:
            return
        for delivery in await self.transport.reclaim(
            self.inbox,
            self.group,
            self.consumer,
            min_idle_ms=self.settings.min_idle_ms,
            count=count,
            on_poison=self.reject_poison,
        ):
            self.accept(delivery)

    async def _broadcast_loop(self, last_id: str) -> None:
        while not self.closed.is_set():
            try:
                got = await self.transport.read_broadcast(last_id, block_ms=self.settings.block_ms)
            except TransportError as exc:
                await self._backoff("broadcast", exc)
                continue
            for delivery in got:
                last_id = delivery.entry_id
                await self.dispatch.broadcast(delivery)

    async def _backoff(self, what: str, exc: Exception) -> None:
        """One line per outage (and a reminder a minute), not one per loop and try."""
        _, say = self.outage.fail()
        if say:
            log.warning("%s/%s %s failed: %s; retrying", self.group, self.consumer, what, exc)
        await asyncio.sleep(0.5)
