"""One hub process: lead its share of the engine's partitions (each: route, run the engine,
timers and commands), follow the rest, and serve what the API needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from hub import commands as c
from hub.dead import Budgets, Shares
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.fanout import EventFanout
from hub.health import LoopLag
from hub.metrics import Metrics
from hub.partition import Partition, TermTask
from hub.registry import Registry
from hub.scheduler import Scheduler
from hub.store import PartitionStores, Stores
from hub.upkeep import Upkeep
from protocols.errors import TransportError
from protocols.ids import new_id, new_id_in
from protocols.keys import RESOURCE_PARTITION, partition_of
from protocols.outage import Outage, one_line
from protocols.settings import Settings
from protocols.states import CueState, Phase, Severity
from protocols.transport import Transport

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from hub.tracing import HubTracer

log = logging.getLogger(__name__)


# The state a cue enters -> the phase it left, and the CueRun times that span that phase.
_PHASE_LEFT: dict[str, tuple[str, str, str]] = {
    CueState.STANDBY: (Phase.WARNING.value, "warned_at", "standby_at"),
    CueState.GO: (Phase.STANDBY.value, "standby_at", "go_at"),
    CueState.COMPLETED: (Phase.GO.value, "go_at", "completed_at"),
    CueState.FAILED: (Phase.GO.value, "go_at", "completed_at"),
}


def _tracer(settings: HubSettings, exporter: SpanExporter | None) -> HubTracer | None:
    """The hub's tracer when tracing is on; off, hub.tracing is not imported."""
    if exporter is None and not settings.tracing_on:
        return None
    from hub.tracing import HubTracer

    return HubTracer.from_settings(settings, exporter)


class HubSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    hub_id: str = ""
    lease_ms: int = 5_000
    command_timeout_s: float = 10.0
    # One event stream lasts at most this long; clients resume with Last-Event-ID (the
    # SSE way), so no connection is held forever by a run that never ends.
    sse_max_s: float = 300.0
    # Open event streams this hub serves at most, and one client (address) at most; past
    # either a new one is answered 503 with Retry-After (they share a few connections of
    # their own, never the engine's: hub.fanout).
    sse_max_streams: int = Field(default=2_000, ge=1)
    sse_per_client: int = Field(default=200, ge=1)
    early_warning: bool = True  # off only to measure what early warning saves (bench/cues.py)
    # The highest severity a specialist's escalation is recorded with (never critical: only
    # the hub or an operator may pause every run).
    specialist_max_severity: Severity = Severity.HIGH
    # /healthz is degraded while the event loop's worst lag of the last 5 s is above this
    health_max_lag_ms: float = Field(default=1000.0, gt=0)
    # Dead letters one sender may cause: a burst, refilled at a rate (the dead-letter stream
    # is capped; one sender's flood must not push everyone else's letters out of it).
    deadletter_sender_burst: int = Field(default=200, ge=1)
    deadletter_sender_per_s: float = Field(default=5.0, gt=0)
    # A finished run, its events and its context expire this long after it ends (0: kept
    # for ever); the leader sweeps streams to `stream_maxlen` and the runs index this often.
    run_retention_s: float = Field(default=7 * 24 * 3600, ge=0)
    upkeep_interval_s: float = Field(default=10.0, gt=0)

    @property
    def retention(self) -> float | None:
        return self.run_retention_s or None

    @field_validator("specialist_max_severity")
    @classmethod
    def _not_critical(cls, value: Severity) -> Severity:
        if value is Severity.CRITICAL:
            raise ValueError("critical pauses every run: only the hub or an operator raises it")
        return value


class Hub:
    def __init__(self, settings: HubSettings, span_exporter: SpanExporter | None = None) -> None:
        """`span_exporter` (tests, benchmarks) turns tracing on with that exporter."""
        self.settings = settings
        self.keys = settings.keys
        self.hub_id = settings.hub_id or f"hub-{socket.gethostname()}-{os.getpid()}"
        self.transport = Transport.from_url(
            settings.redis_url, self.keys,
            max_message_bytes=settings.max_message_bytes, max_deliveries=settings.max_deliveries,
            on_state_lost=self._state_lost, deadletter_raw_bytes=settings.deadletter_raw_bytes,
            deadletter_maxlen=settings.deadletter_maxlen,
        )  # fmt: skip
        self.stores = Stores.open(self.transport, self.keys, settings.retention,
                                  settings.partitions)  # fmt: skip
        self.store = self.stores.state
        self.cuelists = self.stores.cuelists
        self.members = self.stores.members
        self.registry = Registry(self.transport, self.stores.agents, self.keys)
        self.metrics = Metrics()
        self.tracer = _tracer(settings, span_exporter)
        budgets = Budgets(settings.deadletter_sender_burst, settings.deadletter_sender_per_s)
        shares = Shares(self.transport)  # a sender's share of the dead letters, hub-wide
        self.partitions = [
            Partition(
                index, settings, self.hub_id, self.stores, self._own(index), self.registry,
                self.metrics, on_commit=self._observe, dead_budgets=budgets, dead_shares=shares,
                lease_ms=settings.lease_ms, early_warning=settings.early_warning,
                max_severity=settings.specialist_max_severity,
                command_max_tries=settings.command_max_tries,
                agents_changed=self._agents_changed if settings.partitions > 1 else None,
                on_leading=self._leading_changed,
                tracer=self.tracer,
            )
            for index in range(settings.partitions)
        ]  # fmt: skip
        # Partition 0's parts, by the names one partition always had (tests, benchmarks).
        first = self.partitions[0]
        self.leadership, self.driver, self.router = first.leadership, first.driver, first.router
        self.upkeep = Upkeep(
            self.transport, self.store, self.keys, lambda: self.router.streams,
            stream_maxlen=settings.stream_maxlen, retention_s=settings.retention,
            every_s=settings.upkeep_interval_s, partitions=settings.partitions,
            consumer=self.hub_id, command_streams=[p.own.commands.stream for p in self.partitions],
        )  # fmt: skip
        self.fanout = EventFanout(
            settings.redis_url, self.keys,
            max_streams=settings.sse_max_streams, per_client=settings.sse_per_client,
        )  # fmt: skip
        self.metrics.event_streams.set_function(lambda: self.fanout.open_streams)
        self.commands = c.CommandClient(
            [p.own.commands for p in self.partitions], self._escalation_run
        )
        self.scheduler = Scheduler(
            self.cuelists, self.store, self.stores.schedules,
            lambda name, version, run_id, write: self.driver.start_run(
                name, version, run_id, {}, False, write=write
            ),
            lambda write: self.driver.step(lambda engine: engine.write_with_step(write)),
            new_run_id=lambda: new_id_in(0, settings.partitions),
        )  # fmt: skip
        self.leading = asyncio.Event()  # this hub leads some partition
        self.loop_lag = LoopLag()

    def _own(self, index: int) -> PartitionStores:
        if index == 0:  # the stores the API reads through are partition 0's
            return PartitionStores(self.stores.state, self.stores.commands, self.stores.lease)
        return self.stores.partition(index, self.settings.retention)

    # -- lifecycle ------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Lead what this hub's share of the partitions is until `stop` (with one partition:
        follow until it can lead it, lead, and again after a term ends)."""
        ticker = asyncio.create_task(self.loop_lag.run(stop), name="loop-lag")
        terms: dict[int, asyncio.Task[bool]] = {}
        try:
            # one partition too: a hub of one would serve runs of every partition as its
            # own, and its upkeep drop the groups of the others
            await self.members.agree(self.settings.partitions)
            # read again as a term starts (`_tick`); read here too, so that Redis out of
            # reach at the start is one line of `supervise`'s, not one a tick
            await self.registry.load()
            await self._share_out(stop, terms)
        finally:
            ticker.cancel()
            for index in terms:
                self.partitions[index].yielding.set()
            for task in terms.values():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for part in self.partitions:
                await part.leadership.release()
            if self.settings.partitions > 1:
                with contextlib.suppress(TransportError):
                    await self.members.leave(self.hub_id)
            self.leading.clear()
            self.metrics.leader.set(0)

    async def _share_out(self, stop: asyncio.Event, terms: dict[int, asyncio.Task[bool]]) -> None:
        """Every third of a lease (and whenever a term ends): say this hub is alive, count
        the hubs, and lead this hub's share of the partitions (ceil(P / hubs)): take free
        ones while below it, yield the excess above it. A partition seen free on two ticks
        in a row is taken whatever the share (a dead hub's, before the count has noticed)."""
        tick_s = self.settings.lease_ms / 3000
        changed = asyncio.Event()
        rested: dict[int, float] = {}  # partition -> when this hub may try it again
        free_before: set[int] = set()
        outage = Outage(remind_s=60.0)  # ticks keep their pace; only the lines are spaced
        while not stop.is_set():
            changed.clear()
            now = time.monotonic()
            for index, task in list(terms.items()):
                if task.done():
                    del terms[index]
                    if task.cancelled() or task.exception() is not None or not task.result():
                        rested[index] = now + tick_s  # it failed: others get the chance
                    if self.partitions[index].yielding.is_set():
                        # yielded: the others' for a lease (each tick at a term's end
                        # would see it free twice at once and take it back as a dead hub's)
                        rested[index] = now + self.settings.lease_ms / 1000
            try:
                free_before = await self._tick(stop, changed, terms, rested, free_before)
            except TransportError as exc:  # Redis unreachable or refusing: try next tick
                if outage.fail()[1]:  # said once an outage, and again each minute it lasts
                    log.warning("hub %s cannot share the partitions out: %s", self.hub_id,
                                one_line(exc))  # fmt: skip
            else:
                if outage.ok():
                    log.info("hub %s shares the partitions out again", self.hub_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop, changed), tick_s)

    async def _tick(
        self, stop: asyncio.Event, changed: asyncio.Event, terms: dict[int, asyncio.Task[bool]],
        rested: dict[int, float], free_before: set[int],
    ) -> set[int]:  # fmt: skip
        """One look at the partitions: yield the excess, take what is this hub's to take.
        Returns the partitions seen free and left alone (the next tick takes them)."""
        now = time.monotonic()
        share = await self._share()
        for index in sorted(terms)[share:]:  # the excess: highest partitions first
            log.info("hub %s yields partition %d (its share is %d)", self.hub_id, index, share)
            self.partitions[index].yielding.set()
        free_now: set[int] = set()
        holders = await self.members.holders(len(self.partitions))
        for part, holder in zip(self.partitions, holders, strict=True):
            if part.index in terms or rested.get(part.index, 0) > now:
                continue
            if holder is not None:  # another hub leads it (or this one's lease outlived a term)
                part.leadership.seen_leader_at = time.monotonic()
                continue
            if len(terms) >= share and part.index not in free_before:
                free_now.add(part.index)
                continue
            if not terms:  # leading nothing until now: what the leaders learned meanwhile
                await self.registry.load()
            if await part.leadership.try_acquire():
                terms[part.index] = self._start_term(part, stop, changed)
        return free_now

    def _start_term(
        self, part: Partition, stop: asyncio.Event, changed: asyncio.Event
    ) -> asyncio.Task[bool]:
        beside: list[TermTask] = [self.scheduler.run, self.upkeep.run] if part.index == 0 else []
        task = asyncio.create_task(part.lead(stop, beside), name=f"partition-{part.index}")
        task.add_done_callback(lambda _: changed.set())
        return task

    def _leading_changed(self) -> None:
        """`leading` while some partition's term has loaded its state and runs."""
        led = len(self.led())
        if led:
            self.leading.set()
        else:
            self.leading.clear()
        self.metrics.leader.set(led)

    async def _share(self) -> int:
        """How many partitions this hub should lead: ceil(P / hubs alive)."""
        count = self.settings.partitions
        if count == 1:
            return 1
        window_ms = self.settings.lease_ms
        try:
            alive = await self.members.heartbeat(self.hub_id, window_ms)
        except TransportError as exc:
            log.warning("hub %s cannot count the hubs: %s", self.hub_id, one_line(exc))
            alive = 1
        return -(-count // max(alive, 1))

    def led(self) -> list[Partition]:
        """The partitions this hub leads now."""
        return [p for p in self.partitions if p.leading.is_set()]

    async def _agents_changed(self) -> None:
        """The registry changed: every partition this hub leads re-checks waiting cues."""
        online = self.registry.online()
        for part in self.led():
            await part.driver.agents_changed(online)

    def new_run_id(self, claims_resources: bool = False, beside: str | None = None) -> str:
        """An id for a new run: in the resource partition when its cuelist claims
        resources, in `beside`'s partition (a rerun, made by that partition's engine),
        else in any (the id picks one)."""
        count = self.settings.partitions
        if claims_resources:
            return new_id_in(RESOURCE_PARTITION, count)
        if beside is not None:
            return new_id_in(partition_of(beside, count), count)
        return new_id()

    async def _escalation_run(self, esc_id: str) -> str | None:
        esc = await self.store.escalation(esc_id)
        return esc.run_id if esc is not None else None

    async def active_run_ids(self) -> list[str]:
        """The runs not finished, in every partition."""
        found: list[str] = []
        for part in self.partitions:
            found += await part.store.active_run_ids()
        return sorted(found)

    async def _state_lost(self, stream: str, group: str) -> None:
        """Redis came back empty: the runs it held are gone; fail them now, never hang."""
        for part in self.led():
            lost = await part.store.missing_runs(list(part.driver.engine.runs))
            if not lost:
                continue
            reason = f"Redis lost its data (group {group} on {stream} had to be recreated)"
            log.error("%s: failing %d runs of partition %d", reason, len(lost), part.index)

            def abort_all(engine: Engine, lost: list[str] = lost, reason: str = reason) -> None:
                for run_id in lost:
                    engine.abort(run_id, reason)

            await part.driver.step(abort_all)

    async def close(self) -> None:
        await self.fanout.close()
        for store in self.commands.stores:
            await store.answers.close()
        await self.transport.close()
        if self.tracer is not None:  # export what is left (in a thread: it may wait on I/O)
            await asyncio.to_thread(self.tracer.shutdown)

    def _observe(self, part: Partition, out: Outbox) -> None:
        if out.late:
            self.metrics.late_replies.inc(out.late)
        for esc in out.escalations.values():
            if esc.count == 1:
                self.metrics.escalations.labels(esc.type.value, esc.severity.value).inc()
        for run_id, event in out.events:
            kind = event.get("type")
            if kind == "run" and event.get("status") not in ("running", "holding"):
                self.metrics.runs.labels(event["status"]).inc()
            elif kind == "cue":
                self._observe_phase(part, run_id, event)
            elif kind == "usage":
                self.metrics.usage(event)
        self.metrics.active_runs.set(sum(len(p.driver.engine.runs) for p in self.led()))

    def _observe_phase(self, part: Partition, run_id: str, event: dict[str, Any]) -> None:
        """A cue left a phase: record how long it spent there."""
        span = _PHASE_LEFT.get(event.get("state", ""))
        run = part.driver.engine.runs.get(run_id) if span is not None else None
        cr = run.cues.get(event.get("cue", "")) if run is not None else None
        if span is None or cr is None:
            return
        phase, since_field, until_field = span
        since, until = getattr(cr, since_field), getattr(cr, until_field)
        if since is not None and until is not None and until >= since:
            self.metrics.phase_took(phase, until - since)


async def _first(*events: asyncio.Event) -> None:
    """Wait until one of `events` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
