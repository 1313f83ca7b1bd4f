"""What a replica does with each message type it receives (PROTOCOL.md), once per cue attempt."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from protocols.codec import Envelope, make
from protocols.errors import TransportError
from protocols.messages import MessageType
from protocols.payloads import (
    AckStandby,
    AckWarning,
    BroadcastNotice,
    BroadcastShutdown,
    CoordGo,
    CoordStandby,
    CoordStanddown,
    CoordWarning,
    Payload,
    StatusReport,
    TaskAssign,
    TaskHandoff,
    TaskInput,
)
from protocols.transport import Delivery
from specialists.cue import CUE_REASON_CHARS, Cue, token
from specialists.errors import Reject, Retry
from specialists.work import RUNNING, STOOD_DOWN, failure, run_work, settle, settled_before

if TYPE_CHECKING:
    from specialists.runtime import Runtime

log = logging.getLogger("callboard.specialists")

CueKey = tuple[str | None, str, int]  # (run_id, cue_id, attempt)


class Abandon(Exception):  # control flow, not an error
    """Leave the entry unacknowledged: the replica is stopping and never started it."""


class HookTimeout(Exception):
    """A hook ran past `Specialist.hook_timeout_s` and was cancelled."""


class Seen:
    """A bounded memory of keys handled already (LRU): duplicates are recognised, not redone."""

    def __init__(self, size: int = 4096) -> None:
        self._keys: OrderedDict[Hashable, None] = OrderedDict()
        self._size = size

    def first(self, key: Hashable) -> bool:
        """True the first time `key` is offered (and remembers it), False after that."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True

    def forget(self, key: Hashable | None) -> None:
        self._keys.pop(key, None)


# GOs and assigns are not among these: the attempt's claim and markers in Redis say what a
# copy is (work.run_work), and a replica's memory of one it acked as a copy would take the
# entry it copied, reclaimed here after its replica died, for a copy too: lost
_ONCE_PER_ATTEMPT = {
    MessageType.COORD_WARNING: "warning",
    MessageType.COORD_STANDBY: "standby",
}


# a message whose hook an author writes: a copy of it (the same sender and message id, as a
# forward written again after a hub's restart, or on a cluster before its XACK) runs it once
_ONCE_PER_MESSAGE = {MessageType.TASK_HANDOFF: "handoff", MessageType.TASK_INPUT: "input"}


def _once_key(m: Envelope) -> Hashable | None:
    """For the messages a duplicate of which must do nothing: (phase, run, cue, attempt) of
    the cue call's, (kind, sender, message id) of a handoff's or an input's."""
    phase = _ONCE_PER_ATTEMPT.get(m.message_type)
    if phase is None:
        kind = _ONCE_PER_MESSAGE.get(m.message_type)
        return None if kind is None else (kind, m.from_agent, m.message_id)
    p: Any = m.payload
    return (phase, m.run_id, p.cue_id, p.attempt)


CUES_HELD = 1_024  # Cues kept for the phases to come (see Dispatcher._make_room)
ROOM_LOOKS = 16  # Cues with something in hand passed over, at most, to make room for one
PREPS_EVERY = 10  # preparations' stood-down markers are read every this many claim intervals


class Dispatcher:
    """Routes each inbox delivery to its handler; the handler returning means XACK."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.spec = rt.spec
        self.seen = Seen()
        self.cues: OrderedDict[CueKey, Cue] = OrderedDict()
        self._checks = 0  # calls of call_off_stood_down (preparations every PREPS_EVERY)
        self.working: dict[CueKey, asyncio.Task[Any]] = {}  # GO/assign work in progress
        self.claims: dict[CueKey, str] = {}  # the entry whose work holds each (work.RUNNING)
        self.handling: dict[CueKey, asyncio.Task[Any]] = {}  # GOs/assigns being handled
        self.checking: dict[CueKey, asyncio.Task[Any]] = {}  # STANDBY readiness checks
        self.stood_down: dict[CueKey, str] = {}  # work the hub called off, with its reason
        self.preps: dict[CueKey, asyncio.Task[None]] = {}
        self._awaited: set[CueKey] = set()
        self._routes: dict[MessageType, Callable[[Delivery, Envelope], Awaitable[bool]]] = {
            MessageType.COORD_WARNING: self._warning,
            MessageType.COORD_STANDBY: self._standby,
            MessageType.COORD_GO: self._work,
            MessageType.TASK_ASSIGN: self._work,
            MessageType.COORD_STANDDOWN: self._standdown,
            MessageType.TASK_HANDOFF: self._handoff,
            MessageType.TASK_INPUT: self._input,
            MessageType.STATUS_REQUEST: self._status_request,
        }

    def message(self, message_type: MessageType, payload: Payload, **fields: Any) -> Envelope:
        return make(message_type, payload, from_agent=self.spec.agent_id, **fields)

    def reply(
        self, to: Envelope, message_type: MessageType, payload: Payload, **f: Any
    ) -> Envelope:
        if self.spec.tracer is not None and "traceparent" not in f:
            f["traceparent"] = self.trace_context()
        return to.reply(message_type, payload, from_agent=self.spec.agent_id, **f)

    def trace_context(self) -> str | None:
        """The traceparent of the span open in this task (the work's), if any."""
        tracer = self.spec.tracer
        return tracer.current_traceparent() if tracer is not None else None

    async def handle(self, d: Delivery) -> None:
        rt = self.rt
        m = d.message
        if m is None:
            reason = d.error.reason if d.error is not None else "undecodable entry"
            await rt.reject(d, reason)
            return
        route = self._routes.get(m.message_type)
        if route is None:
            reason = f"{m.message_type} is not for a specialist's inbox"
            await rt.reject(d, reason)
            return
        key = _once_key(m)
        if key is not None and not self.seen.first(key):  # a duplicate: nothing to do
            await rt.send(ack=[d])
            return
        try:
            if await route(d, m):
                await rt.send(ack=[d])
        except Abandon:
            log.info("left %s unacknowledged for another replica", d.entry_id)
            self.seen.forget(key)
        except Exception:  # a bug or Redis trouble: the entry stays pending and is reclaimed
            log.exception("handling %s %s failed", m.message_type, d.entry_id)
            self.seen.forget(key)  # so that the redelivery is handled, not taken for a duplicate

    # -- coord.* -------------------------------------------------------------------------

    def cue(self, m: Envelope, cue_id: str, attempt: int) -> Cue:
        """The Cue this replica keeps for (run, cue, attempt), made on first sight."""
        key = (m.run_id, cue_id, attempt)
        cue = self.cues.get(key)
        if cue is not None:
            self.cues.move_to_end(key)  # the least recently seen go first (see `_make_room`)
        else:
            cue = Cue(
                agent_id=self.spec.agent_id,
                replica=self.spec.replica,
                run_id=m.run_id,
                cue_id=cue_id,
                attempt=attempt,
                message=m,
                markers=self.rt.markers,
                reader=self.rt.context_reader,
                say=lambda mt, payload: self._say(cue_id, key, mt, payload),
            )
            if len(self.cues) >= CUES_HELD:
                self._make_room()
            self.cues[key] = cue
        cue.message = m
        return cue

    def _make_room(self) -> None:
        """Forget the least recently seen cue that has nothing in hand here: one with work,
        a readiness check or a preparation would no longer be called off by its standdown
        (found by review: a long GO evicted by 1,100 warnings of other cues ran on past its
        standdown). Those passed over go to the back, so the next look starts past them;
        a look stops after ROOM_LOOKS of them (past CUES_HELD while so many are in hand)."""
        held = self.working, self.checking, self.preps
        for _ in range(min(ROOM_LOOKS, len(self.cues))):
            oldest = next(iter(self.cues))
            if not any(oldest in h for h in held):
                del self.cues[oldest]
                return
            self.cues.move_to_end(oldest)

    async def _say(self, cue_id: str, key: CueKey, mt: MessageType, payload: Payload) -> None:
        """A message about the cue while its work goes on, in reply to the phase at hand."""
        cue = self.cues.get(key)
        if cue is None:
            raise RuntimeError(f"cue {cue_id} is no longer held by this replica")
        await self.rt.send(self.reply(cue.message, mt, payload, cue_id=cue_id))

    async def _warning(self, d: Delivery, m: Envelope) -> bool:
        p = m.body(CoordWarning)
        key = (m.run_id, p.cue_id, p.attempt)
        cue = self.cue(m, p.cue_id, p.attempt)
        cue.action = dict(p.action)
        cue.preparation_required = list(p.preparation_required)
        # Registered before the first await: a STANDBY handled right behind must find it.
        self.preps[key] = self.rt.spawn(self._prepare(key, cue))
        ack = self.reply(m, MessageType.ACK_WARNING, AckWarning(attempt=p.attempt), cue_id=p.cue_id)
        await self._answer(d, ack)
        return False

    async def _prepare(self, key: CueKey, cue: Cue) -> None:
        try:
            await self.spec.prepare(cue)
        except asyncio.CancelledError:
            cue.prepare_error = "preparation was cancelled"
            raise
        except Exception as exc:
            log.warning("prepare of %r failed: %s", cue, exc, exc_info=True)
            cue.prepare_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.preps.pop(key, None)

    async def _standby(self, d: Delivery, m: Envelope) -> bool:
        p = m.body(CoordStandby)
        key = (m.run_id, p.cue_id, p.attempt)
        cue = self.cue(m, p.cue_id, p.attempt)
        cue.ready_check = list(p.ready_check)
        task = asyncio.current_task()
        if task is not None:
            self.checking[key] = task
        try:
            ready, reason = await self._readiness(key, cue)
        except asyncio.CancelledError:
            if self.stood_down.pop(key, None) is None or task is None:
                raise  # shutting down: the entry stays pending for another replica
            task.uncancel()  # the hub stood the cue down and waits for no answer
            return True
        finally:
            self.checking.pop(key, None)
        # cut: a reason past a message's size (a remote's every tool, named) never arrived
        ack = AckStandby(attempt=p.attempt, ready=ready, reason=reason[:CUE_REASON_CHARS])
        await self._answer(d, self.reply(m, MessageType.ACK_STANDBY, ack, cue_id=p.cue_id))
        return False

    async def _answer(self, d: Delivery, answer: Envelope) -> None:
        """Publish the answer and XACK the entry in one round trip, the XADD first (as the
        router does); the handler then returns False: the entry is settled."""
        await self.rt.send(answer, ack=[d])

    async def _readiness(self, key: CueKey, cue: Cue) -> tuple[bool, str]:
        prep = self.preps.get(key)
        if prep is not None:  # prepared here; with several replicas it may have been elsewhere
            self._awaited.add(key)
            try:
                await asyncio.wait([prep])
            finally:
                self._awaited.discard(key)
        if cue.prepare_error is not None:
            return False, f"prepare failed: {cue.prepare_error}"
        try:
            answer = await self.spec.ready(cue)
        except Exception as exc:
            return False, f"ready check failed: {type(exc).__name__}: {exc}"
        if isinstance(answer, tuple):
            return bool(answer[0]), str(answer[1]) if len(answer) > 1 else ""
        return (answer is None or bool(answer)), ""

    def cancel_idle_preparations(self) -> None:
        """On drain: preparations no STANDBY waits for are of no use to a leaving replica."""
        for key, task in list(self.preps.items()):
            if key not in self._awaited:
                task.cancel()

    async def _standdown(self, d: Delivery, m: Envelope) -> bool:
        p = m.body(CoordStanddown)
        keys = [k for k in self.cues if k[:2] == (m.run_id, p.cue_id) and k[2] <= p.attempt]
        # a copy of this standdown may take a cue while our hook awaits: None then
        called_off = [cue for key in keys if (cue := self.call_off(key, p.reason)) is not None]
        # One replica of the agent gets the standdown; the attempt's work may be on another
        # (or be reclaimed by one later): it reads this marker before it starts the attempt
        # and while it holds it (`call_off_stood_down`). The XACK goes with the marker,
        # written while the hooks run (it may wait behind a write in flight).
        marker = token(m.run_id, p.cue_id, p.attempt, STOOD_DOWN)
        set_marker = self.rt.markers.set_command(marker, p.reason or "stood down")
        written = asyncio.ensure_future(self.rt.send(ack=[d], then=[set_marker]))
        for cue in called_off:  # honoured above; the hook only releases
            await self._release(cue, p.reason)
        await written
        return False

    def call_off(self, key: CueKey, reason: str) -> Cue | None:
        """Stop preparing, checking readiness and working on `key`: the run was cancelled,
        the cue pre-empted or its ack late (a readiness check that never returns would hold
        its entry for ever). The Cue, for the `standdown` hook; None when not held here."""
        cue = self.cues.pop(key, None)
        if cue is None:
            return None
        prep = self.preps.pop(key, None)
        if prep is not None:
            prep.cancel()
        for task in (self.working.get(key), self.checking.get(key)):
            if task is not None:
                self.stood_down[key] = reason or "stood down"
                task.cancel()
        return cue

    async def call_off_stood_down(self) -> None:
        """Call off what is in hand (work running or waiting for a slot, a readiness check,
        a preparation) whose attempt another replica stood down: their markers read in one
        round trip, every claim interval (a preparation's every PREPS_EVERY). A check or a
        preparation left out held its STANDBY entry for ever (renewed, so no other replica
        took it), its standdown hook never ran, and three such filled the replica's read
        budget (found by review)."""
        self._checks += 1
        # a preparation holds no entry: its marker is read less often (there may be many)
        preps: list[CueKey] = list(self.preps) if self._checks % PREPS_EVERY == 0 else []
        keys = list(dict.fromkeys([*self.working, *self.checking, *preps]))
        if not keys:
            return
        reasons = await self.rt.markers.read_each([token(*key, STOOD_DOWN) for key in keys])
        for key, reason in zip(keys, reasons, strict=True):
            # not if settled meanwhile (`settle` takes the work out of `working` first)
            held = key in self.working or key in self.checking or key in self.preps
            if reason is not None and held:
                cue = self.call_off(key, reason)
                if cue is not None:
                    self.rt.spawn(self._release(cue, reason))

    async def renew_claims(self) -> None:
        """Another lease for the claim of each attempt whose work is in hand here. A failed
        renewal (Redis refusing writes, say) holds up nothing else: a claim that lapses
        meanwhile is made again by the next one."""
        claims = {token(*key, RUNNING): entry for key, entry in self.claims.items()}
        try:
            await self.rt.markers.renew(claims)
        except TransportError as exc:
            log.info("renewing %d claims failed: %s", len(claims), exc)

    async def _release(self, cue: Cue, reason: str) -> None:
        """The author's `standdown` hook, bounded: it may not hold anything for ever."""
        try:
            await self.bounded("standdown", self.spec.standdown(cue, reason))
        except Exception:
            log.exception("standdown hook of %r failed", cue)

    async def _work(self, d: Delivery, m: Envelope) -> bool:
        """A GO or task.assign: one attempt's entries are handled here one at a time (a
        copy read while another entry of the attempt is in hand waits for it, then finds
        its claim or its outcome), so each has the attempt's Cue and registers to itself."""
        p = m.body(CoordGo) if m.message_type is MessageType.COORD_GO else m.body(TaskAssign)
        key = (m.run_id, p.cue_id, p.attempt)
        task = asyncio.current_task()
        # `working` is left while the outcome is written (a standdown no longer applies):
        # the handling itself is waited for, until it is over
        while (other := self.handling.get(key)) is not None and other is not task:
            await asyncio.wait([other])
        if task is not None:
            self.handling[key] = task
        cue = self.cue(m, p.cue_id, p.attempt)
        cue.action = dict(p.action)
        cue.description = p.description
        cue.deliveries = d.deliveries
        cue.context.clear()
        cue.context.update(p.context)
        self.preps.pop(key, None)
        if task is not None:
            self.working[key] = task
        try:
            return await run_work(self, d, m, cue)
        except asyncio.CancelledError:
            reason = self.stood_down.pop(key, None)
            if reason is None:
                raise  # shutting down: the entry stays pending for another replica
            if task is not None:
                task.uncancel()  # the cancel was ours and is handled: report it, with the ack
            # a replayed GO whose replayed standdown came while its marker was checked: the
            # attempt's outcome is written already, and it has one
            if await settled_before(cue):
                return True
            await settle(self, d, m, cue, failure(self, m, cue, f"stood down: {reason}"))
            return False  # settled
        finally:  # the attempt's one handling here: what it registered is its own
            self.working.pop(key, None)
            self.claims.pop(key, None)
            self.cues.pop(key, None)
            self.handling.pop(key, None)

    # -- task.handoff, status.request, broadcasts ----------------------------------------

    async def _handoff(self, d: Delivery, m: Envelope) -> bool:
        handoff = m.body(TaskHandoff)
        return await self._hook(d, "on_handoff", lambda: self.spec.on_handoff(handoff, m))

    async def _input(self, d: Delivery, m: Envelope) -> bool:
        answer = m.body(TaskInput)
        return await self._hook(d, "on_input", lambda: self.spec.on_input(answer, m))

    async def _hook(self, d: Delivery, name: str, call: Callable[[], Awaitable[None]]) -> bool:
        """Run a hook for an inbox entry: `Retry` tries again (then dead-letters), `Reject`
        or an error dead-letters the entry with the reason."""
        tries = d.deliveries
        while True:
            try:
                await self.bounded(name, call())
                return True
            except Retry as exc:
                if tries >= self.rt.settings.max_deliveries:
                    reason = f"{name} retried {tries} times: {exc.reason or 'giving up'}"
                    await self.rt.reject(d, reason)
                    return False
                tries += 1
                await self.sleep_or_abandon(exc.delay_s)
            except Reject as exc:
                await self.rt.reject(d, f"rejected: {exc.reason}")
                return False
            except HookTimeout as exc:
                await self.rt.reject(d, str(exc))
                return False
            except Exception as exc:
                reason = f"{name} failed: {type(exc).__name__}: {exc}"
                await self.rt.reject(d, reason)
                return False

    async def bounded(self, name: str, hook: Awaitable[None]) -> None:
        """Await a hook for up to `hook_timeout_s`: one that never returns (a remote
        dripping its answer under the client's per-read timeout) would hold its entry for
        ever, and after `prefetch` of them the replica would read nothing more."""
        limit_s = self.spec.hook_timeout_s
        try:
            async with asyncio.timeout(limit_s) as bound:
                await hook
        except TimeoutError:
            if not bound.expired():
                raise  # the hook's own
            raise HookTimeout(f"{name} did not return within {limit_s:g} s") from None

    async def sleep_or_abandon(self, delay_s: float) -> None:
        """Wait out a Retry delay; a stop meanwhile leaves the entry to another replica."""
        try:
            await asyncio.wait_for(self.rt.stopping.wait(), delay_s)
        except TimeoutError:
            return
        raise Abandon

    async def _status_request(self, d: Delivery, m: Envelope) -> bool:
        rt = self.rt
        detail = {
            "kind": self.spec.kind,
            "concurrency": self.spec.concurrency,
            "waiting": rt.waiting,
            "cues": sorted(k[1] for k in self.cues),
        }
        report = StatusReport(
            replica=self.spec.replica, state=rt.state, in_flight=rt.busy, detail=detail
        )
        await rt.send(self.reply(m, MessageType.STATUS_REPORT, report))
        return True

    async def broadcast(self, d: Delivery) -> None:
        m = d.message
        if m is None or (m.target_agents and self.spec.agent_id not in m.target_agents):
            return
        if m.message_type == MessageType.BROADCAST_PAUSE:
            self.rt.pause(True)
        elif m.message_type == MessageType.BROADCAST_RESUME:
            self.rt.pause(False)
        elif m.message_type == MessageType.BROADCAST_SHUTDOWN:
            shutdown = m.body(BroadcastShutdown)
            self.rt.stop(f"broadcast.shutdown: {shutdown.reason}".rstrip(": "))
        elif m.message_type == MessageType.BROADCAST_NOTICE:
            # a task of its own: a hook that does not return must not stop the reading of
            # broadcasts (a pause, a shutdown) behind it
            self.rt.spawn(self._notice(m.body(BroadcastNotice), m))

    async def _notice(self, notice: BroadcastNotice, m: Envelope) -> None:
        try:
            await self.spec.on_broadcast(notice, m)
        except Exception:
            log.exception("on_broadcast failed")
