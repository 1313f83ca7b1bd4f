"""One hub process: follow until it can lead, then route, run the engine, timers and commands."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from hub import commands as c
from hub.dead import Budgets, DeadLetters
from hub.engine.core import Engine
from hub.engine.driver import BACKLOG_CHUNK, Driver
from hub.engine.escalations import RESOLVED, Escalation
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from hub.engine.state import CueRun, RunState
from hub.fanout import EventFanout
from hub.health import LoopLag
from hub.leader import Leadership
from hub.metrics import Metrics
from hub.registry import Registry
from hub.router import Router
from hub.scheduler import Scheduler
from hub.store import Stores
from hub.store.idempotency import IdempotencyHold
from hub.upkeep import Upkeep
from protocols.errors import Conflict, NotFound, StaleLeader, TransportError
from protocols.messages import MessageType
from protocols.outage import is_unreachable, one_line
from protocols.payloads import PAYLOAD_MODELS
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
        self.stores = Stores.open(self.transport, self.keys, settings.retention)
        self.store = self.stores.state
        self.cuelists = self.stores.cuelists
        self.registry = Registry(self.transport, self.stores.agents, self.keys)
        self.metrics = Metrics()
        self.leadership = Leadership(self.stores.lease, self.hub_id, settings.lease_ms)
        self.tracer = _tracer(settings, span_exporter)
        self.driver = Driver(
            self.store, self.cuelists, self.keys, lambda: self.leadership.value,
            contract_of=self.registry.contract_of, on_commit=self._observe,
            early_warning=settings.early_warning, online=self.registry.online,
            tracer=self.tracer,
        )  # fmt: skip
        budgets = Budgets(settings.deadletter_sender_burst, settings.deadletter_sender_per_s)
        self.router = Router(
            self.transport, settings, self.driver, self.registry, self.metrics, self.hub_id,
            dead=DeadLetters(self.transport, self.keys, self.metrics, budgets),
            max_severity=settings.specialist_max_severity,
        )  # fmt: skip
        self.upkeep = Upkeep(
            self.transport, self.store, self.keys, lambda: self.router.streams,
            stream_maxlen=settings.stream_maxlen, retention_s=settings.retention,
            every_s=settings.upkeep_interval_s,
        )  # fmt: skip
        self.fanout = EventFanout(
            settings.redis_url, self.keys,
            max_streams=settings.sse_max_streams, per_client=settings.sse_per_client,
        )  # fmt: skip
        self.commands = c.CommandClient(self.stores.commands)
        self.scheduler = Scheduler(
            self.cuelists, self.store, self.stores.schedules,
            lambda name, version, run_id: self.driver.start_run(name, version, run_id, {}, False),
        )  # fmt: skip
        self.leading = asyncio.Event()
        self.loop_lag = LoopLag()

    # -- lifecycle ------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        ticker = asyncio.create_task(self.loop_lag.run(stop), name="loop-lag")
        try:
            await self.registry.load()
            while not stop.is_set():
                if not await self.leadership.wait_to_lead(stop):
                    break
                if not await self._lead(stop):  # it failed: give another hub the chance
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.settings.lease_ms / 3000)
        finally:
            ticker.cancel()
            await self.leadership.release()
            self.leading.clear()
            self.metrics.leader.set(0)

    async def _lead(self, stop: asyncio.Event) -> bool:
        """One term: lead until the lease is lost, `stop`, or a task fails. Whatever ends
        it, the lease is released and the next term (here or on another hub) starts from
        what Redis holds; after a failure (False) this hub's in-memory state is dropped."""
        self.router.reset()  # what it saw was only as durable as the last term's engine
        try:
            resumed = await self.driver.load()
        except Exception as error:
            log.warning("hub %s could not load the engine: %s", self.hub_id, one_line(error))
            await self.leadership.release()
            return False
        log.info("hub %s leads; resumed %d runs", self.hub_id, resumed)
        self.leading.set()
        self.metrics.leader.set(1)
        server = c.CommandServer(
            self.stores.commands, self.hub_id, self._handlers(), self.settings.command_max_tries
        )
        # Tasks stop on `leading_ends` as well as on cancellation: a blocked Redis read has
        # been seen to swallow CancelledError, and a stale leader must not keep routing.
        leading_ends = asyncio.Event()
        tasks = [
            asyncio.create_task(self.leadership.keep(leading_ends), name="lease"),
            asyncio.create_task(self.router.run(leading_ends), name="router"),
            asyncio.create_task(self.driver.run_timers(leading_ends), name="timers"),
            asyncio.create_task(self.driver.run_backlog(leading_ends), name="backlog"),
            asyncio.create_task(server.run(leading_ends), name="commands"),
            asyncio.create_task(self.scheduler.run(leading_ends), name="schedules"),
            asyncio.create_task(self.upkeep.run(leading_ends), name="upkeep"),
            asyncio.create_task(self.driver.broken.wait(), name="commit"),
        ]
        failed = False
        lost = asyncio.create_task(self.leadership.lost.wait(), name="lost")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait(
                [*tasks, lost, stopping], return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task.get_name() == "commit":
                    failed = True
                    log.error(
                        "hub %s: a state write failed (%s); the term ends, state reloads",
                        self.hub_id, one_line(self.driver.failed or Exception("?")),
                    )  # fmt: skip
                if task not in (lost, stopping) and not task.cancelled() and task.exception():
                    exc = task.exception()
                    if isinstance(exc, StaleLeader):
                        log.warning("hub %s: %s; following again", self.hub_id, exc)
                    elif exc is not None and is_unreachable(exc):  # a line, not a traceback
                        log.warning(
                            "hub %s: task %s lost Redis (%s); following again",
                            self.hub_id, task.get_name(), one_line(exc),
                        )  # fmt: skip
                    elif isinstance(exc, TransportError):  # Redis refused: OOM, READONLY
                        log.warning(
                            "hub %s: task %s: %s; the term ends",
                            self.hub_id, task.get_name(), one_line(exc),
                        )  # fmt: skip
                        failed = True
                    else:
                        log.error("hub task %s crashed", task.get_name(), exc_info=exc)
                        failed = True
        finally:
            leading_ends.set()
            for task in [*tasks, lost, stopping]:
                task.cancel()
            for task in [*tasks, lost, stopping]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.leading.clear()
            self.metrics.leader.set(0)
            await self.leadership.release()  # a successor need not wait for it to expire
            if failed or self.driver.failed is not None:
                self.driver.discard()
        return not failed

    async def _state_lost(self, stream: str, group: str) -> None:
        """Redis came back empty: the runs it held are gone; fail them now, never hang."""
        if not self.leading.is_set():
            return
        lost = await self.store.missing_runs(list(self.driver.engine.runs))
        if not lost:
            return
        reason = f"Redis lost its data (group {group} on {stream} had to be recreated)"
        log.error("%s: failing %d runs", reason, len(lost))

        def abort_all(engine: Engine) -> None:
            for run_id in lost:
                engine.abort(run_id, reason)

        await self.driver.step(abort_all)

    async def close(self) -> None:
        await self.fanout.close()
        await self.transport.close()
        if self.tracer is not None:  # export what is left (in a thread: it may wait on I/O)
            await asyncio.to_thread(self.tracer.shutdown)

    def _observe(self, out: Outbox) -> None:
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
                self._observe_phase(run_id, event)
            elif kind == "usage":
                self.metrics.usage(event)
        self.metrics.active_runs.set(len(self.driver.engine.runs))

    def _observe_phase(self, run_id: str, event: dict[str, Any]) -> None:
        """A cue left a phase: record how long it spent there."""
        span = _PHASE_LEFT.get(event.get("state", ""))
        run = self.driver.engine.runs.get(run_id) if span is not None else None
        cr = run.cues.get(event.get("cue", "")) if run is not None else None
        if span is None or cr is None:
            return
        phase, since_field, until_field = span
        since, until = getattr(cr, since_field), getattr(cr, until_field)
        if since is not None and until is not None and until >= since:
            self.metrics.phase.labels(phase).observe(until - since)

    # -- commands the leader serves -------------------------------------------------------
    def _handlers(self) -> c.Handlers:
        return (
            c.Handlers()
            .on(c.StartRun, self._start_run)
            .on(c.Go, self._go)
            .on(c.Retry, self._retry)
            .on(c.Rerun, self._rerun)
            .on(c.RaiseCondition, self._raise_condition)
            .on(c.Cancel, self._cancel)
            .on(c.ChangeBudget, self._change_budget)
            .on(c.Resolve, self._resolve)
            .on(c.Broadcast, self._broadcast)
        )

    async def _start_run(self, cmd: c.StartRun) -> c.StartRunReply:
        # Served again (its first server died after writing the run, before answering):
        # the run is not started twice.
        run = self.driver.engine.runs.get(cmd.run_id) or await self.store.run(cmd.run_id)
        if run is not None:
            return c.StartRunReply(run_id=run.run_id, status=run.status.value, version=run.version)
        write = []
        if cmd.idempotency_key is not None:
            hold = IdempotencyHold(run_id=cmd.run_id, request=cmd.request)
            held = await self.stores.idempotency.holder(cmd.idempotency_key, hold)
            if held.run_id != cmd.run_id:  # the key expired and a retry took it since
                raise Conflict(f"Idempotency-Key {cmd.idempotency_key!r} names another run")
            write.append(self.stores.idempotency.started(cmd.idempotency_key, held))
        run = await self.driver.start_run(
            cmd.cuelist, cmd.version, cmd.run_id, cmd.params, cmd.dry, write=write,
            budget=cmd.budget,
        )  # fmt: skip
        return c.StartRunReply(run_id=run.run_id, status=run.status.value, version=run.version)

    async def _go(self, cmd: c.Go) -> c.GoReply:
        cr = await self.driver.step(lambda e: e.operator_go(cmd.run_id, cmd.cue_id))
        return c.GoReply(state=cr.state.value, attempt=cr.attempt)

    async def _retry(self, cmd: c.Retry) -> c.RetryReply:
        async def once(loaded: tuple[RunState, Plan] | None) -> tuple[CueRun, str]:
            return await self.driver.step(lambda e: e.retry_cue(cmd.run_id, cmd.cue_id, loaded))

        loaded = await self._ended_run(cmd.run_id)
        try:
            cr, retried = await once(loaded)
        except NotFound:  # it ended and was forgotten between the look and the step
            again = None if loaded else await self._ended_run(cmd.run_id)
            if again is None:
                raise
            cr, retried = await once(again)
        return c.RetryReply(state=cr.state.value, attempt=cr.attempt, retried=retried)

    async def _ended_run(self, run_id: str) -> tuple[RunState, Plan] | None:
        """A run the engine no longer holds (it ended), loaded from Redis with its plan."""
        if run_id in self.driver.engine.runs:
            return None
        run = await self.store.run(run_id)
        return None if run is None else (run, await self.driver.plan(run.cuelist, run.version))

    async def _rerun(self, cmd: c.Rerun) -> c.RerunReply:
        ended = await self._ended_run(cmd.run_id)
        source = self.driver.engine.runs.get(cmd.run_id) or (ended[0] if ended else None)
        if source is None:
            raise NotFound(f"no run {cmd.run_id}")
        plan = ended[1] if ended else await self.driver.plan(source.cuelist, source.version)
        context = {}
        if cmd.from_failure:
            stored = await self.store.context(cmd.run_id)
            context = {key: entry.model_dump(mode="json") for key, entry in stored.items()}
        run = await self.driver.step(
            lambda e: e.rerun(
                cmd.run_id, plan, cmd.new_run_id, from_failure=cmd.from_failure,
                loaded=ended[0] if ended else None, context=context, chunk=BACKLOG_CHUNK,
            )
        )  # fmt: skip
        return c.RerunReply(run_id=run.run_id, rerun_of=cmd.run_id, status=run.status.value)

    async def _raise_condition(self, cmd: c.RaiseCondition) -> c.RaiseConditionReply:
        run = await self.driver.step(lambda e: e.raise_condition(cmd.run_id, cmd.name))
        return c.RaiseConditionReply(conditions=run.conditions)

    async def _cancel(self, cmd: c.Cancel) -> c.CancelReply:
        run = await self.driver.step(lambda e: e.cancel(cmd.run_id, cmd.reason))
        return c.CancelReply(status=run.status.value)

    async def _change_budget(self, cmd: c.ChangeBudget) -> c.ChangeBudgetReply:
        run = await self.driver.step(lambda e: e.change_budget(cmd.run_id, cmd.changes))
        budget = run.budget.model_dump(exclude_none=True) if run.budget else {}
        return c.ChangeBudgetReply(
            status=run.status.value, hold_reason=run.hold_reason, budget=budget
        )

    async def _resolve(self, cmd: c.Resolve) -> c.ResolveReply:
        stored = await self.store.escalation(cmd.id)

        def resolve(e: Engine) -> Escalation:
            if cmd.id in e.escalations.by_id or stored is None or stored.run_id in e.runs:
                return e.resolve(cmd.id, cmd.winner, cmd.note, cmd.answer)
            return _resolve_record(e, stored, cmd)

        esc = await self.driver.step(resolve)
        return c.ResolveReply(id=esc.id, status=esc.status)

    async def _broadcast(self, cmd: c.Broadcast) -> c.BroadcastReply:
        mt = MessageType(cmd.message_type)
        payload = PAYLOAD_MODELS[mt].model_validate(cmd.payload)
        reason = str(getattr(payload, "reason", "") or "operator")

        def send(e: Engine) -> None:
            if mt is MessageType.BROADCAST_RESUME:
                e.resume(reason)
            elif mt is MessageType.BROADCAST_PAUSE:
                e.pause(reason)
            else:
                e.broadcast(mt, payload)

        await self.driver.step(send)
        return c.BroadcastReply(sent=mt.value)


def _resolve_record(e: Engine, esc: Escalation, cmd: c.Resolve) -> Escalation:
    """Close an escalation the engine no longer holds (its run ended and was forgotten, or it
    is about no run and predates this term): a record only, nothing left to decide."""
    if esc.status == RESOLVED:
        raise Conflict(f"escalation {esc.id} is already resolved")
    esc.status = RESOLVED
    esc.resolution = {"winner": cmd.winner, "note": cmd.note, "at": e.clock()}
    if cmd.answer:
        esc.resolution["answer"] = cmd.answer
    if esc.run_id is not None:
        esc.resolution["effect"] = f"none: run {esc.run_id} had ended"
    esc.updated_at = e.clock()
    e.out.escalations[esc.id] = esc
    return esc
