"""One engine partition on this hub: its lease, engine driver, router and operator commands.

A term is one stretch of leading it: from taking its lease to losing or yielding it, a
task failing, or the hub stopping. With several partitions a hub leads some of them
(hub.service shares them out), each term independent of the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from hub import commands as c
from hub.dead import Budgets, DeadLetters
from hub.engine.core import Engine
from hub.engine.driver import BACKLOG_CHUNK, Driver
from hub.engine.escalations import RESOLVED, Escalation
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from hub.engine.state import RunState
from hub.leader import Leadership
from hub.metrics import Metrics
from hub.registry import Registry
from hub.router import Router
from hub.store import PartitionStores, Stores
from hub.store.idempotency import IdempotencyHold
from protocols.errors import Conflict, EngineError, NotFound, StaleLeader, TransportError
from protocols.keys import RESOURCE_PARTITION, partition_of
from protocols.messages import MessageType
from protocols.outage import is_unreachable, one_line
from protocols.payloads import PAYLOAD_MODELS
from protocols.settings import Settings
from protocols.states import Severity

if TYPE_CHECKING:
    from hub.tracing import HubTracer

log = logging.getLogger(__name__)
PAUSE_CHECK_S = 1.0  # how often a partition looks whether another one paused every GO
RP = TypeVar("RP", bound=c.Reply)

# A task a term runs beside its own (partition 0's scheduler and upkeep), given the event
# that ends the term.
TermTask = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class Partition:
    """Partition `index` of `settings.partitions`, as this hub leads it (or waits to)."""

    def __init__(
        self, index: int, settings: Settings, hub_id: str, stores: Stores,
        own: PartitionStores, registry: Registry, metrics: Metrics, *,
        on_commit: Callable[[Partition, Outbox], None], dead_budgets: Budgets,
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
            dead=DeadLetters(registry.transport, settings.keys, metrics, dead_budgets),
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
        self._absent: set[str] = set()  # runs a batch of starts found not in Redis

    # -- a term ----------------------------------------------------------------------------
    async def lead(self, stop: asyncio.Event, beside: list[TermTask]) -> bool:
        """One term (the lease is taken): lead until the lease is lost, `stop`, a yield or
        a task fails. Whatever ends it, the lease is released and the next term (here or
        on another hub) starts from what Redis holds; after a failure (False) this hub's
        in-memory state of the partition is dropped."""
        self.yielding.clear()
        # what it saw was only as durable as the last term's engine
        self.router.reset(blameless=self.blameless)
        try:
            resumed = await self.driver.load()
        except Exception as error:
            log.warning(
                "hub %s could not load partition %d: %s", self.hub_id, self.index, one_line(error)
            )
            await self.leadership.release()
            return False
        log.info("hub %s leads partition %d; resumed %d runs", self.hub_id, self.index, resumed)
        self.leading.set()
        self.on_leading()
        server = c.CommandServer(self.own.commands, self.hub_id, self.handlers(),
                                 self.command_max_tries)  # fmt: skip
        # Tasks stop on `leading_ends` as well as on cancellation: a blocked Redis read has
        # been seen to swallow CancelledError, and a stale leader must not keep routing.
        leading_ends = asyncio.Event()
        tasks = [
            asyncio.create_task(self.leadership.keep(leading_ends), name="lease"),
            asyncio.create_task(self.router.run(leading_ends), name="router"),
            asyncio.create_task(self.driver.run_timers(leading_ends), name="timers"),
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

    # -- commands the leader serves -------------------------------------------------------
    def handlers(self) -> c.Handlers:
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
            .on_batch(self._look_up_starts)
        )

    async def _look_up_starts(self, commands: Sequence[c.Command[Any]]) -> None:
        """Which runs a batch's starts name are in Redis already, in one round trip (not one
        read per start): those not there start without reading them again."""
        engine = self.driver.engine
        ids = [
            cmd.run_id for cmd in commands
            if isinstance(cmd, c.StartRun) and cmd.run_id not in engine.runs
        ]  # fmt: skip
        stored = await self.store.stored_runs(ids) if ids else set()
        self._absent = {run_id for run_id in ids if run_id not in stored}

    def _must_be_mine(self, run_id: str) -> None:
        """A run lives in the partition its id says: one started elsewhere would never get
        its messages (a hub or API process with another partition count sent it)."""
        home = partition_of(run_id, self.partitions)
        if home != self.index:
            raise EngineError(
                f"run {run_id} belongs to partition {home}, not {self.index}: "
                "do all hubs and API processes use the same CALLBOARD_PARTITIONS?"
            )

    async def _start_run(self, cmd: c.StartRun, command_id: str) -> c.StartRunReply:
        # Served again (its first server died after writing the run, before answering; or
        # sent twice): the run is not started twice. A run its batch found absent is read
        # no more (only this partition's leader writes it, and it holds none in memory).
        run = self.driver.engine.runs.get(cmd.run_id)
        if run is None and cmd.run_id not in self._absent:
            run = await self.store.run(cmd.run_id)
        self._absent.discard(cmd.run_id)
        if run is not None:
            return _started(run)
        self._must_be_mine(cmd.run_id)
        version = cmd.version or await self.stores.cuelists.latest(cmd.cuelist)
        if self.index != RESOURCE_PARTITION and version is not None:
            plan = await self.driver.plan(cmd.cuelist, version)
            if plan.cuelist.claims_resources:
                raise EngineError(
                    f"cuelist {cmd.cuelist} claims resources: its runs live in partition "
                    f"{RESOURCE_PARTITION}, not {self.index}"
                )
        write = []
        if cmd.idempotency_key is not None:
            hold = IdempotencyHold(run_id=cmd.run_id, request=cmd.request)
            held = await self.stores.idempotency.holder(cmd.idempotency_key, hold)
            if held.run_id != cmd.run_id:  # the key expired and a retry took it since
                raise Conflict(f"Idempotency-Key {cmd.idempotency_key!r} names another run")
            write.append(self.stores.idempotency.started(cmd.idempotency_key, held))
        commands, answered = self.own.commands, []

        def filed(run: RunState) -> list[list[Any]]:  # its answer, written with the run
            answered.append(_started(run))
            return [commands.served_op(command_id, c.answer_of(answered[-1]))]

        run = await self.driver.start_run(
            cmd.cuelist, cmd.version, cmd.run_id, cmd.params, cmd.dry, write=write,
            budget=cmd.budget, filed=filed,
        )  # fmt: skip
        # the reply as filed: the run may have moved on while its write was in flight
        return answered[-1] if answered else _started(run)

    async def _step(self, command_id: str, fn: Callable[[Engine], RP]) -> RP:
        """Run `fn`, an engine step that serves a command and returns its reply, with the
        command's answer filed in the step's own fenced write: served again (the answer
        sent after it was lost), the command is answered from it (hub.commands.server),
        not done twice. A refusal files nothing: served again, it is refused again."""
        commands = self.own.commands

        def step(e: Engine) -> RP:
            reply = fn(e)
            e.write_with_step([commands.served_op(command_id, c.answer_of(reply))])
            return reply

        return await self.driver.step(step)

    async def _go(self, cmd: c.Go, command_id: str) -> c.GoReply:
        def go(e: Engine) -> c.GoReply:
            cr = e.operator_go(cmd.run_id, cmd.cue_id)
            return c.GoReply(state=cr.state.value, attempt=cr.attempt)

        return await self._step(command_id, go)

    async def _retry(self, cmd: c.Retry, command_id: str) -> c.RetryReply:
        async def once(loaded: tuple[RunState, Plan] | None) -> c.RetryReply:
            def retry(e: Engine) -> c.RetryReply:
                cr, retried = e.retry_cue(cmd.run_id, cmd.cue_id, loaded)
                return c.RetryReply(state=cr.state.value, attempt=cr.attempt, retried=retried)

            return await self._step(command_id, retry)

        loaded = await self._ended_run(cmd.run_id)
        try:
            return await once(loaded)
        except NotFound:  # it ended and was forgotten between the look and the step
            again = None if loaded else await self._ended_run(cmd.run_id)
            if again is None:
                raise
            return await once(again)

    async def _ended_run(self, run_id: str) -> tuple[RunState, Plan] | None:
        """A run the engine no longer holds (it ended), loaded from Redis with its plan."""
        if run_id in self.driver.engine.runs:
            return None
        run = await self.store.run(run_id)
        return None if run is None else (run, await self.driver.plan(run.cuelist, run.version))

    async def _rerun(self, cmd: c.Rerun, command_id: str) -> c.RerunReply:
        self._must_be_mine(cmd.new_run_id)
        ended = await self._ended_run(cmd.run_id)
        source = self.driver.engine.runs.get(cmd.run_id) or (ended[0] if ended else None)
        if source is None:
            raise NotFound(f"no run {cmd.run_id}")
        plan = ended[1] if ended else await self.driver.plan(source.cuelist, source.version)
        context = {}
        if cmd.from_failure:
            stored = await self.store.context(cmd.run_id)
            context = {key: entry.model_dump(mode="json") for key, entry in stored.items()}

        def rerun(e: Engine) -> c.RerunReply:
            run = e.rerun(
                cmd.run_id, plan, cmd.new_run_id, from_failure=cmd.from_failure,
                loaded=ended[0] if ended else None, context=context, chunk=BACKLOG_CHUNK,
            )  # fmt: skip
            return c.RerunReply(run_id=run.run_id, rerun_of=cmd.run_id, status=run.status.value)

        return await self._step(command_id, rerun)

    async def _raise_condition(
        self, cmd: c.RaiseCondition, command_id: str
    ) -> c.RaiseConditionReply:
        def condition(e: Engine) -> c.RaiseConditionReply:
            run = e.raise_condition(cmd.run_id, cmd.name)
            return c.RaiseConditionReply(conditions=list(run.conditions))

        return await self._step(command_id, condition)

    async def _cancel(self, cmd: c.Cancel, command_id: str) -> c.CancelReply:
        def cancel(e: Engine) -> c.CancelReply:
            return c.CancelReply(status=e.cancel(cmd.run_id, cmd.reason).status.value)

        return await self._step(command_id, cancel)

    async def _change_budget(self, cmd: c.ChangeBudget, command_id: str) -> c.ChangeBudgetReply:
        def change(e: Engine) -> c.ChangeBudgetReply:
            run = e.change_budget(cmd.run_id, cmd.changes)
            budget = run.budget.model_dump(exclude_none=True) if run.budget else {}
            return c.ChangeBudgetReply(
                status=run.status.value, hold_reason=run.hold_reason, budget=budget
            )

        return await self._step(command_id, change)

    async def _resolve(self, cmd: c.Resolve, command_id: str) -> c.ResolveReply:
        stored = await self.store.escalation(cmd.id)

        def resolve(e: Engine) -> c.ResolveReply:
            # a term loads the newest escalations only: an older one of a run it runs is
            # taken in from Redis, not refused as unknown
            if stored is not None and stored.run_id in e.runs and cmd.id not in e.escalations.by_id:
                e.escalations.take_in(stored)
            if cmd.id in e.escalations.by_id or stored is None or stored.run_id in e.runs:
                esc = e.resolve(cmd.id, cmd.winner, cmd.note, cmd.answer)
            else:
                esc = _resolve_record(e, stored, cmd)
            return c.ResolveReply(id=esc.id, status=esc.status)

        return await self._step(command_id, resolve)

    async def _broadcast(self, cmd: c.Broadcast, command_id: str) -> c.BroadcastReply:
        """Pause and resume reach every partition (hub.commands.client sends them to all);
        partition 0's engine tells the agents, the others follow silently."""
        mt = MessageType(cmd.message_type)
        payload = PAYLOAD_MODELS[mt].model_validate(cmd.payload)
        reason = str(getattr(payload, "reason", "") or "operator")

        def send(e: Engine) -> c.BroadcastReply:
            if self.index != 0 and mt in (
                MessageType.BROADCAST_PAUSE,
                MessageType.BROADCAST_RESUME,
            ):
                paused = reason if mt is MessageType.BROADCAST_PAUSE else None
                e.follow_pause(paused, write=True)
            elif mt is MessageType.BROADCAST_RESUME:
                e.resume(reason)
            elif mt is MessageType.BROADCAST_PAUSE:
                e.pause(reason)
            else:
                e.broadcast(mt, payload)
            return c.BroadcastReply(sent=mt.value)

        return await self._step(command_id, send)


def _started(run: RunState) -> c.StartRunReply:
    return c.StartRunReply(run_id=run.run_id, status=run.status.value, version=run.version)


def _follow(e: Engine, seen: str | None, stored: str | None) -> None:
    if e.paused == seen:  # unchanged since the flag was read: the flag is newer
        e.follow_pause(stored)


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


def _crashed(task: asyncio.Task[Any]) -> bool:
    """`task` ended by an error of the hub's own (a bug an input may have hit), not by
    Redis (unreachable or refusing) or a lost lease."""
    if task.cancelled():
        return False
    exc = task.exception()
    return exc is not None and not isinstance(exc, TransportError | StaleLeader)
