"""One engine partition on this hub: its lease, engine driver, router and command server (the
commands themselves: hub.serving).

A term is one stretch of leading it: from taking its lease to losing or yielding it, a
task failing, or the hub stopping. With several partitions a hub leads some of them
(hub.service shares them out), each term independent of the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from hub import commands as c
from hub.dead import Budgets, DeadLetters, Shares
from hub.engine.core import Engine
from hub.engine.driver import Driver
from hub.engine.outbox import Outbox
from hub.leader import Leadership
from hub.metrics import Metrics
from hub.registry import Registry
from hub.router import Router
from hub.serving import Serving
from hub.store import PartitionStores, Stores
from protocols.errors import StaleLeader, TransportError
from protocols.outage import is_unreachable, one_line
from protocols.settings import Settings
from protocols.states import Severity

if TYPE_CHECKING:
    from hub.tracing import HubTracer

log = logging.getLogger(__name__)
PAUSE_CHECK_S = 1.0  # how often a partition looks whether another one paused every GO

# A task a term runs beside its own (partition 0's scheduler and upkeep), given the event
# that ends the term.
TermTask = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class Partition:
    """Partition `index` of `settings.partitions`, as this hub leads it (or waits to)."""

    def __init__(
        self, index: int, settings: Settings, hub_id: str, stores: Stores,
        own: PartitionStores, registry: Registry, metrics: Metrics, *,
        on_commit: Callable[[Partition, Outbox], None], dead_budgets: Budgets,
        dead_shares: Shares | None = None,
        lease_ms: int, early_warning: bool, max_severity: Severity, command_max_tries: int,
        agents_changed: Callable[[], Coroutine[Any, Any, None]] | None = None,
        on_leading: Callable[[], None] = lambda: None,
        tracer: HubTracer | None = None,
    ) -> None:  # fmt: skip
        """`on_leading`: called when this partition's `leading` is set (its state loaded)
        and when it is cleared."""
        self.index = index
        self.partitions = settings.partitions
        self.hub_id = hub_id
        self.stores, self.own = stores, own
        self.store = own.state
        self.command_max_tries = command_max_tries
        self.leadership = Leadership(own.lease, hub_id, lease_ms)
        self.driver = Driver(
            self.store, stores.cuelists, settings.keys, lambda: self.leadership.value,
            contract_of=registry.contract_of, on_commit=lambda out: on_commit(self, out),
            early_warning=early_warning, online=registry.online, tracer=tracer,
        )  # fmt: skip
        self.router = Router(
            registry.transport, settings, self.driver, registry, metrics, hub_id,
            dead=DeadLetters(
                registry.transport, settings.keys, metrics, dead_budgets, dead_shares
            ),
            max_severity=max_severity, partition=index, partitions=settings.partitions,
            agents_changed=agents_changed,
        )  # fmt: skip
        self.leading = asyncio.Event()
        self.on_leading = on_leading
        self.yielding = asyncio.Event()  # set: end the term, another hub is to lead it
        # The last term here ended through no fault of what it read (Redis or the lease
        # lost, a yield): its entries, claimed back, do not count toward poison. False at
        # first: whoever held them before may have died of them.
        self.blameless = False
        self.serving = Serving(index, settings.partitions, self.driver, stores, own)

    # -- a term ----------------------------------------------------------------------------
    async def lead(self, stop: asyncio.Event, beside: list[TermTask]) -> bool:
        """One term (the lease is taken): lead until the lease is lost, `stop`, a yield or
        a task fails. Whatever ends it, the lease is released and the next term (here or
        on another hub) starts from what Redis holds; after a failure (False) this hub's
        in-memory state of the partition is dropped."""
        self.yielding.clear()
        # what it saw was only as durable as the last term's engine
        self.router.reset(blameless=self.blameless)
        # Tasks stop on `leading_ends` as well as on cancellation: a blocked Redis read has
        # been seen to swallow CancelledError, and a stale leader must not keep routing.
        leading_ends = asyncio.Event()
        # the lease is kept from the start: a load of many runs outlasting it had its last
        # (fenced) write refused, and then every hub's next try again
        keeping = asyncio.create_task(self.leadership.keep(leading_ends), name="lease")
        try:
            resumed = await self.driver.load()
        except Exception as error:
            log.warning(
                "hub %s could not load partition %d: %s", self.hub_id, self.index, one_line(error)
            )
            leading_ends.set()
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keeping
            await self.leadership.release()
            return False
        log.info("hub %s leads partition %d; resumed %d runs", self.hub_id, self.index, resumed)
        self.leading.set()
        self.on_leading()
        server = c.CommandServer(self.own.commands, self.hub_id, self.serving.handlers(),
                                 self.command_max_tries, fence=self._still_leading)  # fmt: skip
        tasks = [
            keeping,
            asyncio.create_task(self.router.run(leading_ends), name="router"),
            asyncio.create_task(
                self.driver.run_timers(leading_ends, self.router.handled_through), name="timers"
            ),
            asyncio.create_task(self.driver.run_backlog(leading_ends), name="backlog"),
            asyncio.create_task(server.run(leading_ends), name="commands"),
            asyncio.create_task(self.driver.broken.wait(), name="commit"),
            *(asyncio.create_task(task(leading_ends), name=task.__name__) for task in beside),
        ]
        if self.partitions > 1:
            tasks.append(asyncio.create_task(self.follow_pause(leading_ends), name="pause"))
        failed = blamed = False
        ends = [
            asyncio.create_task(self.leadership.lost.wait(), name="lost"),
            asyncio.create_task(stop.wait(), name="stop"),
            asyncio.create_task(self.yielding.wait(), name="yield"),
            asyncio.create_task(self.driver.stale.wait(), name="stale"),
        ]
        try:
            done, _ = await asyncio.wait([*tasks, *ends], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.get_name() == "stale":
                    log.warning("hub %s: a state write was refused, the lease is lost; "
                                "following again", self.hub_id)  # fmt: skip
                if task in ends:
                    continue
                if task.get_name() == "commit":
                    failed = True
                    blamed = blamed or not isinstance(self.driver.failed, TransportError)
                    log.error(
                        "hub %s: a state write failed (%s); the term ends, state reloads",
                        self.hub_id, one_line(self.driver.failed or Exception("?")),
                    )  # fmt: skip
                failed = self._ended_by(task) or failed
                blamed = blamed or _crashed(task)
        finally:
            leading_ends.set()
            for task in [*tasks, *ends]:
                task.cancel()
            for task in [*tasks, *ends]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.leading.clear()
            self.on_leading()
            await self.leadership.release()  # a successor need not wait for it to expire
            if failed or self.driver.failed is not None:
                self.driver.discard()
            self.blameless = not blamed
        return not failed

    async def _still_leading(self) -> None:
        """StaleLeader unless the lease is still this term's (one GET): a hub that has not
        yet noticed its lease moved (frozen, its renewals failing) must not answer commands
        the new leader is to serve."""
        value = self.leadership.value
        if value is None or await self.leadership.current() != value:
            raise StaleLeader("the lease is another hub's: its leader serves the commands")

    def _ended_by(self, task: asyncio.Task[Any]) -> bool:
        """Log why `task` ended the term; True when that is a failure."""
        exc = None if task.cancelled() else task.exception()
        name = task.get_name()
        if exc is None:
            return False
        if isinstance(exc, StaleLeader):
            log.warning("hub %s: %s; following again", self.hub_id, exc)
            return False
        if is_unreachable(exc):  # a line, not a traceback
            log.warning("hub %s: task %s lost Redis (%s); following again",
                        self.hub_id, name, one_line(exc))  # fmt: skip
            return False
        if isinstance(exc, TransportError):  # Redis refused: OOM, READONLY
            log.warning("hub %s: task %s: %s; the term ends", self.hub_id, name, one_line(exc))
            return True
        log.error("hub task %s crashed", name, exc_info=exc)
        return True

    async def follow_pause(self, stop: asyncio.Event) -> None:
        """Every GO is paused for all partitions: the one that pauses (a critical escalation
        in one of its runs) or resumes writes the flag, the others follow it within
        PAUSE_CHECK_S without writing it again."""
        while not stop.is_set():
            seen = self.driver.engine.paused
            stored = await self.store.paused()
            if stored != seen:
                await self.driver.step(partial(_follow, seen=seen, stored=stored))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PAUSE_CHECK_S)


def _follow(e: Engine, seen: str | None, stored: str | None) -> None:
    if e.paused == seen:  # unchanged since the flag was read: the flag is newer
        e.follow_pause(stored)


def _crashed(task: asyncio.Task[Any]) -> bool:
    """`task` ended by an error of the hub's own (a bug an input may have hit), not by
    Redis (unreachable or refusing) or a lost lease."""
    if task.cancelled():
        return False
    exc = task.exception()
    return exc is not None and not isinstance(exc, TransportError | StaleLeader)
