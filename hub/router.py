"""Hub routing: every agent's `out` stream in one consumer group, routed by channel.

With several engine partitions each partition's leader reads every `out` stream in a group
of its own (`hub-pN`) and handles the messages of its own runs (`partition_of`); messages
about no run, and entries it cannot read, are partition 0's. Registry messages update
every reader's registry; partition 0 stores them.

The sender is the stream key, never the body: `from_agent` is stamped here, and a body
naming another sender is a protocol violation. Bad entries (not JSON, unknown type, bad
payload, oversized, a type a specialist may not send) go to the dead-letter stream with
their reason (hub.dead, within the sender's budget) and count on one
`escalation.protocol_violation` per sender and kind; routing goes on. A `status.rejected`
has the named entry of the sender's own inbox dead-lettered. What a message may touch is
hub.engine.guard's to say. A batch is acknowledged only after everything it caused has
been written. A batch that only forwards (handoffs outside a run) writes its forwards and
XACKs in one transaction (out of memory, Redis refuses an XADD but not an XACK: pipelined,
an entry would be acknowledged and its forward lost), sent in the round trip of the next
read on a plain Redis (`_Deferred`): the read's entries are handled once its outcome is
known. On a Redis Cluster the XACKs follow once the forwards landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from hub.dead import Bad, Budgets, DeadLetters, Rejection
from hub.engine import guard, inputs
from hub.engine.core import Engine
from hub.engine.driver import Driver
from hub.metrics import Metrics
from hub.registry import Registry
from protocols import payloads as p
from protocols.codec import Envelope, encode
from protocols.keys import STREAM_FIELD, hub_group, partition_of
from protocols.messages import SPECIALIST_SENDS
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import Severity
from protocols.transport import Delivery, Transport, WriteAhead, ack_commands

log = logging.getLogger(__name__)

_REGISTRY_TYPES = frozenset({T.STATUS_ONLINE, T.STATUS_OFFLINE, T.STATUS_REPORT})
# Discovery (a SCAN of the whole keyspace: seconds with millions of keys) runs beside the
# read loop, never in it, and waits between scans at least this many times what the last
# one took: Redis is not kept busy scanning.
DISCOVER_EVERY_S = 1.0
# How long deadlines may wait for the router to have handled what came before them (see
# `handled_through`): a stream kept full (an agent flooding) does not hold them longer
SETTLE_MAX_S = 5.0
DISCOVER_REST = 10
SEEN_CAPACITY = 200_000
ABSENT_CAPACITY = 10_000
RUN_LOOKUP_BURST, RUN_LOOKUPS_PER_S = 100, 10.0  # unknown run ids asked of Redis, per sender
RUNLESS_HANDOFF_BURST, RUNLESS_HANDOFFS_PER_S = 100, 10.0
# What the audit keeps of a message's `target_agents`: the sender's own claim, of any length
# (an honest one names none, or the one its handoff goes to), so a few names, an id's length.
AUDIT_RECIPIENTS_MAX, AUDIT_NAME_CHARS = 8, 64


@dataclass(slots=True)
class _Deferred:
    """A batch that only forwards: its XADDs and XACKs, written in one transaction in the
    round trip of the next read, and the messages to remember as seen once it lands."""

    forwards: list[tuple[str, Envelope | bytes]]
    acked: Sequence[Delivery]
    seen: set[str]


class Router:
    def __init__(
        self,
        transport: Transport,
        settings: Settings,
        driver: Driver,
        registry: Registry,
        metrics: Metrics,
        consumer: str,
        dead: DeadLetters | None = None,
        max_severity: Severity = Severity.HIGH,
        partition: int = 0,
        partitions: int = 1,
        agents_changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`agents_changed`: what to wake when the registry changed (default: this driver's
        cues waiting for an agent; a hub leading several partitions wakes all of them)."""
        self.transport = transport
        self.partition, self.partitions = partition, partitions
        self.group = hub_group(partition)
        self.agents_changed = agents_changed or self._wake_driver
        self.settings = settings
        self.keys = settings.keys
        self.driver = driver
        self.registry = registry
        self.metrics = metrics
        self.consumer = consumer
        # what a sender's refused entries become (dead letters within its budget)
        self.dead = dead or DeadLetters(transport, self.keys, metrics, Budgets(200, 5.0))
        self.max_severity = max_severity  # of a specialist's escalation
        # A handoff outside a run lands in another agent's inbox on the strength of the
        # sender's own contract: a sender may not flood others' inboxes that way.
        self.runless_handoffs = Budgets(RUNLESS_HANDOFF_BURST, RUNLESS_HANDOFFS_PER_S)
        self.streams: list[str] = []
        self._seen: OrderedDict[str, None] = OrderedDict()
        # handled by quiet steps whose writes have not landed yet -> the step's number, in
        # step order (steps only grow)
        self._unwritten: OrderedDict[str, int] = OrderedDict()
        self._absent: OrderedDict[str, None] = OrderedDict()  # run ids Redis does not hold
        self.run_lookups = Budgets(RUN_LOOKUP_BURST, RUN_LOOKUPS_PER_S)  # per sender
        self._last_claim = 0.0
        self._claim_all = True  # the term's first reclaim takes every pending entry
        self._forgive = False  # ...and does not count what this hub held as delivered again
        self._deferred: _Deferred | None = None  # the last batch's writes, not sent yet
        self._deferred_failed: BaseException | None = None  # ...sent, and refused
        # Per out stream, every entry that reached it before this time (the engine's clock)
        # has been handled: when the last read that found it drained was sent.
        self._drained_at: dict[str, float] = {}
        self._all_drained_at = float("-inf")  # ...and every stream, by one read of them all
        self._passed = asyncio.Event()  # set whenever a stream's time moves on
        self._discovered = False  # discovery has scanned once this term

    def reset(self, blameless: bool = False) -> None:
        """A new leadership term: nothing seen, and every entry pending in the hub group
        (on any hub's consumer: only the leader reads it) is claimed at once, not after
        the idle limit, and handled again (its effects were not durable). `blameless`:
        this hub's last term ended through no fault of what it read (Redis or the lease
        lost), so claiming back its own entries is not a delivery toward poison."""
        self._seen.clear()
        self._unwritten.clear()
        self._absent.clear()
        self._deferred = self._deferred_failed = None  # unsent: the next term reclaims them
        self.transport.abandon_reads()  # a cluster's reads of the last term: reclaimed
        self._last_claim = 0.0
        self._claim_all = True
        self._forgive = blameless
        self._drained_at.clear()  # nothing read yet this term
        self._all_drained_at = float("-inf")
        self._discovered = False

    async def handled_through(self, mark: float) -> None:
        """Return once every entry that reached an out stream before `mark` (the engine's
        clock) has been handled: a read sent at or after `mark` came back with every stream
        drained and its entries were handled. Or after SETTLE_MAX_S. The driver asks this
        before firing deadlines at a term's start or after the process stalled: the
        replies sent before them, waiting in the streams while no hub read them (a
        failover, a freeze), are not late, and must count before the deadlines do."""
        limit = time.monotonic() + SETTLE_MAX_S
        while self.drained_through() < mark and (left := limit - time.monotonic()) > 0:
            self._passed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._passed.wait(), left)

    def drained_through(self) -> float:
        """The time before which every entry of every out stream has been handled: the
        oldest of the streams' (none known before this term's first discovery)."""
        if not self._discovered:
            return float("-inf")
        drained = self._drained_at
        oldest = min((drained.get(s, float("-inf")) for s in self.streams), default=float("inf"))
        return max(oldest, self._all_drained_at)

    def _drained(self, batch: Sequence[Delivery]) -> None:
        """Note the streams the last read found drained (it gave fewer than a read's count
        of them), as of when that read was sent (a cluster's slot may have been read by an
        earlier call: transport.answered says)."""
        count = self.settings.read_count
        answered = self.transport.answered
        if len(batch) < count and len(answered) == 1 and not self.transport.is_cluster:
            # one read of every stream, each drained (the usual case: no loop over them)
            self._all_drained_at = max(self._all_drained_at, answered[0][0])
            self._passed.set()
            return
        taken = Counter(d.stream for d in batch) if len(batch) >= count else None
        drained = self._drained_at
        for sent, streams in answered:
            for stream in streams:
                if (taken is None or taken[stream] < count) and drained.get(stream, sent) <= sent:
                    drained[stream] = sent
        self._passed.set()

    async def discover(self) -> None:
        """Find every agent's out stream (new agents appear at any time)."""
        found = set(self.streams)
        for name in await self.transport.scan_keys(self.keys.out_pattern):
            if name not in found and self.keys.agent_of_out(name):
                await self.transport.ensure_group(name, self.group, "0")
                found.add(name)
        self.streams = sorted(found)

    async def run(self, stop: asyncio.Event) -> None:
        discovering = asyncio.create_task(self._discover_beside(stop), name="discover")
        try:
            await self._run(stop, discovering)
        finally:  # reads a cluster keeps in flight end with the term (see `reset`)
            discovering.cancel()
            # its failure, if any, ended the loop already (or the term ends anyway): the
            # exception that did is the one raised
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await discovering
            self.transport.abandon_reads()

    async def _discover_beside(self, stop: asyncio.Event) -> None:
        """Discover the out streams (and trim the audit) every DISCOVER_EVERY_S, or
        DISCOVER_REST times what the last scan took if longer, beside the read loop."""
        while not stop.is_set():
            started = time.monotonic()
            await self.discover()
            self._discovered = True
            took_s = time.monotonic() - started
            await self.transport.trim(self.keys.audit, maxlen=self.settings.audit_maxlen)
            rest_s = max(DISCOVER_EVERY_S, DISCOVER_REST * took_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), rest_s)

    async def _run(self, stop: asyncio.Event, discovering: asyncio.Task[None]) -> None:
        while not stop.is_set():
            if discovering.done():  # failed (Redis, say): the term ends, as a read failing does
                discovering.result()
            if not self.streams:
                self._passed.set()  # no agent has a stream: nothing waits to be read
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
                continue
            sent_at = self.driver.engine.clock()
            if time.monotonic() - self._last_claim > self.settings.claim_interval_ms / 1000:
                await self._caught_up()  # what they acknowledge is not claimed again
                await self._reclaim()
            batch = await self.transport.read_group(
                self.streams, self.group, self.consumer,
                count=self.settings.read_count, block_ms=min(self.settings.block_ms, 500),
                ahead=self._ahead(), sent=sent_at,
            )  # fmt: skip
            if self._deferred_failed is not None:  # what the read brought waits for a term
                failed, self._deferred_failed = self._deferred_failed, None
                raise failed
            if batch:
                await self.process(batch, defer=True)
            self._drained(batch)
        await self._caught_up()

    async def _caught_up(self) -> None:
        """Every write the router left for later has landed."""
        await self.driver.caught_up()
        await self._write_deferred()

    def _ahead(self) -> WriteAhead | None:
        """The last batch's deferred writes, to go in the next read's round trip."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return None
        commands = self.transport.writes(deferred.forwards, ack=deferred.acked, group=self.group)
        return WriteAhead(commands, partial(self._told, deferred))

    def _told(self, deferred: _Deferred, outcome: list[Any] | BaseException) -> None:
        """A deferred write's outcome, known before its read waits: on failure (nothing of
        it written) the term ends once the read returns, and the next term handles its
        entries again."""
        if isinstance(outcome, BaseException):
            self._deferred_failed = outcome
        else:
            self._written(deferred.seen)

    async def _write_deferred(self) -> None:
        """Write the last batch's deferred writes now, on their own."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            await self._forward(deferred.forwards, deferred.acked)
            self._written(deferred.seen)

    async def _forward(
        self, forwards: list[tuple[str, Envelope | bytes]], acked: Sequence[Delivery]
    ) -> None:
        """Forwards and the XACKs of what they answer: one transaction on one server; on a
        Redis Cluster, where no transaction spans slots, the XACKs once the forwards landed."""
        if self.transport.is_cluster:
            await self.transport.publish_many(forwards)
            await self.transport.ack(acked, self.group)
        else:
            await self.transport.publish_many(forwards, ack=acked, group=self.group, atomic=True)

    async def _reclaim(self) -> None:
        """Entries a dead hub read but never acknowledged move to this one (at the start
        of a term every pending entry: whoever read it no longer leads)."""
        self._last_claim = time.monotonic()
        # Only the leader reads the hub group: an entry another hub holds was read by one
        # that no longer leads (woken from a freeze, say), and is claimed now as well.
        elsewhere = await self.transport.held_elsewhere(self.streams, self.group, self.consumer)
        for stream in self.streams:
            now = self._claim_all or stream in elsewhere
            idle_ms = 0 if now else self.settings.min_idle_ms
            claimed = await self.transport.reclaim(
                stream, self.group, self.consumer, min_idle_ms=idle_ms,
                forgive=self._claim_all and self._forgive,
            )  # fmt: skip
            if claimed:
                await self.process(claimed)
        self._claim_all = self._forgive = False

    async def process(self, batch: Sequence[Delivery], defer: bool = False) -> None:
        """Route one batch. `defer` (the read loop's batches): a batch that only forwards
        leaves its writes for the next read's round trip (`_ahead`), where the transport can
        send them so; the step of one that the engine handles returns as its write starts
        (`Driver.step`, `behind`), and the next batch is read while Redis runs it."""
        engine_msgs: list[Envelope] = []
        bad: list[Bad] = []
        rejects: list[tuple[Delivery, Envelope, str]] = []  # status.rejected to honour
        forwards: list[tuple[str, Envelope | bytes]] = []
        routed: list[Envelope] = []
        registry_changed: set[str] = set()
        seen: set[str] = set()  # "sender message-id": remembered once what they caused is written
        to_save: set[str] = set()  # registry records partition 0 writes
        held: set[int] = set()  # deliveries (by id()) this batch does not acknowledge
        self._settle()
        senders: dict[str, str] = {}  # stream -> its agent, worked out once a batch
        for d in batch:
            agent = senders.get(d.stream)
            if agent is None:
                agent = senders[d.stream] = self.keys.agent_of_out(d.stream) or "?"
            msg = d.message
            mine = self._mine(msg)
            if msg is not None and not mine and msg.message_type in _REGISTRY_TYPES:
                # another partition's to check and store, but this hub's registry learns
                # of it too: as from the agent its stream names, and only when the body
                # names none other (such a one the owner dead-letters as spoofed). Applied
                # as the body said, one agent wrote any other's contract and made up agents
                named = msg.from_agent in ("", agent)
                if named and self.registry.apply(msg.model_copy(update={"from_agent": agent})):
                    registry_changed.add(agent)
                continue
            if not mine:
                continue  # another partition's leader handles it (acknowledged here)
            if msg is None:
                reason = d.error.reason if d.error else "undecodable entry"
                bad.append(Bad(d, guard.BAD_MESSAGE, f"{agent}: {reason}", agent))
                continue
            if msg.from_agent and msg.from_agent != agent:
                detail = f"body says {msg.from_agent!r}, stream is {agent!r}"
                bad.append(Bad(d, guard.SPOOFED_SENDER, detail, agent))
                continue
            if msg.message_type not in SPECIALIST_SENDS:
                detail = f"{agent} may not send {msg.message_type.value}"
                bad.append(Bad(d, guard.NOT_ALLOWED, detail, agent))
                continue
            # per sender: another agent reusing a message's id cannot get it skipped
            once = f"{agent} {msg.message_id}"
            if once in self._seen or once in seen:
                continue  # a message seen twice is handled once
            if once in self._unwritten:
                # read again (reclaimed) while the write of its first handling is still
                # out: that write acknowledges it, or fails, ends the term and leaves it
                # for the next one to handle. Acknowledged here, it could be lost.
                held.add(id(d))
                continue
            seen.add(once)
            if msg.message_type is T.TASK_HANDOFF and msg.run_id is None:
                if not self.runless_handoffs.take(agent):
                    detail = f"{agent}: handoffs outside a run past its budget"
                    bad.append(Bad(d, guard.HANDOFF_FLOOD, detail, agent))
                    continue
                forward = self._runless_handoff(msg, agent)
                if isinstance(forward, str):
                    detail = f"{agent}: handoff outside a run refused: {forward}"
                    bad.append(Bad(d, guard.HANDOFF_REJECTED, detail, agent))
                    continue
                stream, out = forward
                routed.append(out)
                forwards.append((stream, d.raw if out is msg else out))  # unchanged: as read
                continue
            if msg.from_agent != agent:
                msg = msg.model_copy(update={"from_agent": agent})
            routed.append(msg)
            if msg.message_type is T.STATUS_REJECTED:
                rejects.append((d, msg, agent))
            elif msg.message_type in _REGISTRY_TYPES:
                if self.registry.apply(msg):
                    registry_changed.add(agent)
                    to_save.add(agent)
                elif self.partitions > 1:  # another partition's reader may have applied it
                    to_save.add(agent)
            else:
                engine_msgs.append(msg)
        if routed:
            forwards.append((self.keys.audit, _audit_entry(routed)))
            for mt, n in Counter(m.message_type for m in routed).items():
                self.metrics.routed.labels(mt.value).inc(n)
        # Dead letters first, then the step that escalates them and acknowledges the batch:
        # nothing is acknowledged before its dead letter is stored.
        await self.dead.write(bad)
        refused, calls = await self.dead.rejected(rejects)
        bad += refused
        await self.registry.save(to_save)
        if registry_changed:  # a cue waiting for a matching agent may fire now
            await self.agents_changed()
        acked = [d for d in batch if id(d) not in held] if held else batch
        if engine_msgs or bad or calls:
            # one fenced write: the engine's effects, the forwards, the audit and the XACKs
            raw = [*_xadds(forwards), *ack_commands(acked, self.group)]
            ended = await self._ended_runs(engine_msgs)
            step = partial(
                self._apply, messages=engine_msgs, bad=bad, raw=raw, ended=ended, calls=calls
            )
            only_audit = all(stream == self.keys.audit for stream, _ in forwards)
            if self.driver.tracer is not None:  # links to the senders' spans (hub.tracing)
                self.driver.tracer.received(engine_msgs, self.driver.engine)
            # deferred: the next batch is read and handled while Redis writes this one
            quiet = only_audit and not bad and not calls
            await self.driver.step(step, quiet_may_wait=quiet, behind=defer)
        else:
            # forwards land after the step's write left behind: a sender's messages in order
            await self.driver.caught_up()
            if defer and self.transport.writes_ride_reads and (forwards or acked):
                self._deferred = _Deferred(forwards, acked, seen)  # seen once it lands
                return
            await self._forward(forwards, acked)
        self._written(seen)

    def _written(self, seen: set[str]) -> None:
        """Remember as seen what a batch handled, once its write landed.

        Seen only now: a batch whose write failed is read again (the failure ends the
        term, and the next one reclaims it) and handled, not skipped as a duplicate. A
        quiet step's write lingers a moment: until it lands, a message it handled is
        skipped but not acknowledged (its write failing ends the term, and the next one
        handles it again)."""
        last = self.driver.applied  # this batch's step, or a later one
        if self.driver.durable >= last:
            for message_id in seen:
                self._remember(message_id)
        else:
            self._unwritten.update(dict.fromkeys(seen, last))

    def _settle(self) -> None:
        """Remember as seen the messages whose quiet step's write has landed."""
        durable, unwritten = self.driver.durable, self._unwritten
        while unwritten and next(iter(unwritten.values())) <= durable:
            self._remember(unwritten.popitem(last=False)[0])

    def _mine(self, msg: Envelope | None) -> bool:
        """Does this partition handle the entry? Its run's partition does; partition 0
        handles what is about no run and what could not be read."""
        if self.partitions == 1:
            return True
        if msg is None or msg.run_id is None:
            return self.partition == 0
        return partition_of(msg.run_id, self.partitions) == self.partition

    async def _wake_driver(self) -> None:
        await self.driver.agents_changed(self.registry.online())

    async def _ended_runs(self, messages: list[Envelope]) -> list[str]:
        """The runs these messages name that the engine is not running but Redis still
        holds: they ended, so a reply to one is late, not a violation (one round trip for
        the batch; a run id found absent is not asked about again, and each sender may
        have only so many asked about: a flood of made-up ids costs no lookups)."""
        engine = self.driver.engine
        asked = sorted({
            m.run_id for m in messages
            if m.run_id and m.run_id not in engine.runs and m.run_id not in engine.ended
            and m.run_id not in self._absent and self.run_lookups.take(m.from_agent)
        })  # fmt: skip
        if not asked:
            return []
        missing = set(await self.driver.store.missing_runs(asked))
        for run_id in missing:
            self._absent[run_id] = None
            if len(self._absent) > ABSENT_CAPACITY:
                self._absent.popitem(last=False)
        return [r for r in asked if r not in missing]

    def _apply(
        self, engine: Engine, messages: list[Envelope], bad: list[Bad], raw: list[list[Any]],
        ended: Sequence[str] = (), calls: Sequence[Rejection] = (),
    ) -> None:  # fmt: skip
        engine.write_with_step(raw)
        engine.note_ended(ended)
        for msg in messages:
            if msg.message_type in inputs.ENGINE_TYPES:
                inputs.handle(engine, msg)
            else:
                guard.specialist_escalation(engine, msg, self.max_severity)
        for call in calls:  # after its sender's messages before it (a status.failed first)
            guard.rejected_call(
                engine, sender=call.sender, message_type=call.message_type, run_id=call.run_id,
                cue_id=call.cue_id, attempt=call.attempt, reason=call.reason,
                letter_id=call.letter_id,
            )  # fmt: skip
        for b in bad:
            guard.refused_entry(
                engine, kind=b.cause, sender=b.sender, detail=b.detail, stream=b.delivery.stream,
                entry_id=b.delivery.entry_id, letter_id=b.letter_id, run_id=b.run_id,
                cue_id=b.cue_id,
            )  # fmt: skip

    def _runless_handoff(self, msg: Envelope, agent: str) -> tuple[str, Envelope] | str:
        """A handoff outside any run: checked against the registry's contracts, then
        forwarded (the receiver's inbox and the message); or why it is refused."""
        body = msg.body(p.TaskHandoff)
        if body.from_agent != agent:
            return f"its body names {body.from_agent!r} as the sender"
        receiver = self.registry.agents.get(body.to_agent)
        if receiver is None:
            # an inbox of a name no agent has: a key nothing reads, trims or expires, one a
            # handoff to each made-up name (up to a message's size each, without end)
            return f"no agent {body.to_agent!r} has come online"
        if not any(replica.online for replica in receiver.replicas.values()):
            # an agent that went offline reads nothing, and what it has not read is never
            # trimmed: a sender could fill its inbox without end (found by review)
            return f"agent {body.to_agent!r} is offline"
        problem, _ = inputs.handoff_problem(
            agent, self.registry.contract_of(agent),
            body.to_agent, self.registry.contract_of(body.to_agent),
            body.handoff_context.provided_keys(),
        )  # fmt: skip
        if problem:
            return problem
        stamped = {"from_agent": agent, "target_agents": (body.to_agent,)}
        if msg.from_agent == agent and msg.target_agents == stamped["target_agents"]:
            return (self.keys.inbox(body.to_agent), msg)
        forwarded = msg.model_copy(update=stamped)
        return (self.keys.inbox(body.to_agent), forwarded)

    def _remember(self, message_id: str) -> None:
        self._seen[message_id] = None
        if len(self._seen) > SEEN_CAPACITY:
            self._seen.popitem(last=False)


def _xadds(items: list[tuple[str, Envelope | bytes]]) -> list[list[Any]]:
    return [
        ["XADD", stream, "*", STREAM_FIELD, m if isinstance(m, bytes) else encode(m)]
        for stream, m in items
    ]


def _audit_entry(messages: list[Envelope]) -> bytes:
    """One audit entry per routed batch, listing every message in it (id, type, who, run)."""
    return orjson.dumps([
        {"id": m.message_id, "type": m.message_type, "from": m.from_agent,
         "to": [a[:AUDIT_NAME_CHARS] for a in m.target_agents[:AUDIT_RECIPIENTS_MAX]],
         "run": m.run_id, "cue": m.cue_id}
        for m in messages
    ])  # fmt: skip
