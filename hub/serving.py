"""How a partition's leader serves each operator command: one engine step each, whose fenced
write also files the command's answer (`Serving._step`), so a command read again after its
answer was lost is answered from it (hub.commands.server), never done twice. A command sent
with an `Idempotency-Key` keeps its reply under the key in the same write (`Serving._keyed`):
the same request again, as a new command, is answered from it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hub import commands as c
from hub.commands.client import to_every_partition
from hub.engine.core import Engine
from hub.engine.driver import BACKLOG_CHUNK, Driver
from hub.engine.escalations import RESOLVED, Escalation
from hub.engine.plan import Plan
from hub.engine.state import RunState
from hub.store import PartitionStores, Stores
from hub.store.idempotency import CommandHold, IdempotencyHold
from protocols.errors import Conflict, EngineError, NotFound
from protocols.keys import RESOURCE_PARTITION, partition_of
from protocols.messages import MessageType
from protocols.payloads import PAYLOAD_MODELS

RP = TypeVar("RP", bound=c.Reply)
C = TypeVar("C", bound=c.Command[Any])


class Serving:
    """The handlers of partition `index`'s commands, over its engine `driver`."""

    def __init__(
        self, index: int, partitions: int, driver: Driver, stores: Stores, own: PartitionStores
    ) -> None:
        self.index, self.partitions = index, partitions
        self.driver = driver
        self.stores, self.own = stores, own
        self.store = own.state
        self._absent: set[str] = set()  # runs a batch of starts found not in Redis
        # Idempotency-Keys being served, and how many commands wait on each: one served at
        # a time (a batch is served concurrently); the key and request of each such command
        self._serving: dict[str, tuple[asyncio.Lock, int]] = {}
        self._keyed_ids: dict[str, tuple[str, str, int]] = {}  # key, request, where kept

    def handlers(self) -> c.Handlers:
        return (
            c.Handlers()
            .on(c.StartRun, self._start_run, files=False)
            .on(c.Go, self._keyed(self._go))
            .on(c.Retry, self._keyed(self._retry))
            .on(c.Rerun, self._keyed(self._rerun))
            .on(c.RaiseCondition, self._keyed(self._raise_condition))
            .on(c.Cancel, self._keyed(self._cancel))
            .on(c.ChangeBudget, self._keyed(self._change_budget))
            .on(c.Resolve, self._keyed(self._resolve))
            .on(c.Broadcast, self._keyed(self._broadcast))
            .on_batch(self._look_up_starts)
        )

    def _keyed(
        self, handler: Callable[[C, str], Awaitable[RP]]
    ) -> Callable[[C, str], Awaitable[RP]]:
        """`handler`, honouring the command's Idempotency-Key: a key whose command's step was
        written answers with the reply it kept, and does nothing again; the same key with
        another request is refused (409); else the command is served, its step keeping the
        reply under the key for a day (`_step`). Two commands with one key (a retry sent
        after the API's claim expired, both queued) are served one after the other."""

        async def serve(cmd: C, command_id: str) -> RP:
            key = cmd.idempotency_key
            if key is None:
                return await handler(cmd, command_id)
            # where the API looks (partition 0's name), unless every partition serves it
            where = self.index if to_every_partition(cmd) else 0
            lock, waiting = self._serving.get(key) or (asyncio.Lock(), 0)
            self._serving[key] = (lock, waiting + 1)
            try:
                async with lock:
                    hold = CommandHold(request=cmd.request)
                    held = await self.stores.command_keys.holder(key, hold, where)
                    if held.request != cmd.request:
                        raise Conflict(f"Idempotency-Key {key!r} was used with another request")
                    if held.reply is not None:
                        reply: RP = cmd.read_reply(held.reply)
                        return reply
                    self._keyed_ids[command_id] = (key, cmd.request, where)
                    try:
                        return await handler(cmd, command_id)
                    finally:
                        self._keyed_ids.pop(command_id, None)
            finally:
                lock, waiting = self._serving[key]
                if waiting > 1:
                    self._serving[key] = (lock, waiting - 1)
                else:
                    del self._serving[key]

        return serve

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
        # no answer filed: a start served again finds its run (above) and answers with it
        run = await self.driver.start_run(
            cmd.cuelist, cmd.version, cmd.run_id, cmd.params, cmd.dry, write=write,
            budget=cmd.budget,
        )  # fmt: skip
        return _started(run)

    async def _step(self, command_id: str, fn: Callable[[Engine], RP]) -> RP:
        """Run `fn`, an engine step that serves a command and returns its reply, with the
        command's answer filed in the step's own fenced write: served again (the answer
        sent after it was lost), the command is answered from it (hub.commands.server),
        not done twice; with an Idempotency-Key, its reply is kept under the key instead
        (the command read again finds it there). A refusal files nothing: served again, it
        is refused again."""
        commands = self.own.commands
        keyed = self._keyed_ids.get(command_id)

        def step(e: Engine) -> RP:
            reply = fn(e)
            if keyed is None:
                e.write_with_step([commands.served_op(command_id, c.answer_of(reply))])
            else:  # the key's reply answers the command read again too (`_keyed`)
                key, request, where = keyed
                kept = reply.model_dump(mode="json")
                e.write_with_step([self.stores.command_keys.answered(key, request, kept, where)])
            return reply

        return await self.driver.step(step)

    async def _live_step(self, run_id: str, command_id: str, fn: Callable[[Engine], RP]) -> RP:
        """`_step` of a command for a live run: a run that ended (and left the engine)
        since the API looked is refused as ended (409), as the API refuses one it sees
        ended, not as unknown (404)."""
        try:
            return await self._step(command_id, fn)
        except NotFound:
            if run_id in self.driver.engine.runs:
                raise  # its cue, not the run
            stored = await self.store.run(run_id)
            if stored is None or not stored.status.done:
                raise
            raise Conflict(f"run {run_id} is already {stored.status.value}") from None

    async def _go(self, cmd: c.Go, command_id: str) -> c.GoReply:
        def go(e: Engine) -> c.GoReply:
            cr = e.operator_go(cmd.run_id, cmd.cue_id)
            return c.GoReply(state=cr.state.value, attempt=cr.attempt)

        return await self._live_step(cmd.run_id, command_id, go)

    async def _retry(self, cmd: c.Retry, command_id: str) -> c.RetryReply:
        async def once(loaded: tuple[RunState, Plan] | None) -> c.RetryReply:
            def retry(e: Engine) -> c.RetryReply:
                cr, retried = e.retry_cue(cmd.run_id, cmd.cue_id, loaded)
                return c.RetryReply(state=cr.state.value, attempt=cr.attempt, retried=retried)

            return await self._step(command_id, retry)

        return await self._held_or_ended(cmd.run_id, once)

    async def _held_or_ended(
        self, run_id: str, once: Callable[[tuple[RunState, Plan] | None], Awaitable[RP]]
    ) -> RP:
        """`once(ended)`: `ended` is the run loaded from Redis when the engine no longer holds
        it. Tried again with it loaded when it ended and was forgotten between the look and
        the step (NotFound)."""
        ended = await self._ended_run(run_id)
        try:
            return await once(ended)
        except NotFound:
            again = None if ended else await self._ended_run(run_id)
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
        context = {}
        if cmd.from_failure:
            stored = await self.store.context(cmd.run_id)
            context = {key: entry.model_dump(mode="json") for key, entry in stored.items()}

        async def once(ended: tuple[RunState, Plan] | None) -> c.RerunReply:
            source = self.driver.engine.runs.get(cmd.run_id) or (ended[0] if ended else None)
            if source is None:
                raise NotFound(f"no run {cmd.run_id}")
            plan = ended[1] if ended else await self.driver.plan(source.cuelist, source.version)

            def rerun(e: Engine) -> c.RerunReply:
                run = e.rerun(
                    cmd.run_id, plan, cmd.new_run_id, from_failure=cmd.from_failure,
                    loaded=ended[0] if ended else None, context=context, chunk=BACKLOG_CHUNK,
                )  # fmt: skip
                status = run.status.value
                return c.RerunReply(run_id=run.run_id, rerun_of=cmd.run_id, status=status)

            return await self._step(command_id, rerun)

        return await self._held_or_ended(cmd.run_id, once)

    async def _raise_condition(
        self, cmd: c.RaiseCondition, command_id: str
    ) -> c.RaiseConditionReply:
        def condition(e: Engine) -> c.RaiseConditionReply:
            run = e.raise_condition(cmd.run_id, cmd.name)
            return c.RaiseConditionReply(conditions=list(run.conditions))

        return await self._live_step(cmd.run_id, command_id, condition)

    async def _cancel(self, cmd: c.Cancel, command_id: str) -> c.CancelReply:
        def cancel(e: Engine) -> c.CancelReply:
            return c.CancelReply(status=e.cancel(cmd.run_id, cmd.reason).status.value)

        return await self._live_step(cmd.run_id, command_id, cancel)

    async def _change_budget(self, cmd: c.ChangeBudget, command_id: str) -> c.ChangeBudgetReply:
        def change(e: Engine) -> c.ChangeBudgetReply:
            run = e.change_budget(cmd.run_id, cmd.changes)
            budget = run.budget.model_dump(exclude_none=True) if run.budget else {}
            return c.ChangeBudgetReply(
                status=run.status.value, hold_reason=run.hold_reason, budget=budget
            )

        return await self._live_step(cmd.run_id, command_id, change)

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
