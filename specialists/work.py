"""Running a GO or task.assign: started, the author's `execute`, then context, handoff and
the outcome in one atomic write; `Retry`, `Reject` and failures reported as PROTOCOL.md says."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from protocols.codec import Envelope, encode
from protocols.messages import MessageType
from protocols.payloads import StatusCompleted, StatusFailed, StatusStarted, TaskContext
from protocols.transport import Delivery
from specialists.cue import Cue, Entry, Result
from specialists.errors import Reject, Retry

if TYPE_CHECKING:
    from specialists.dispatch import Dispatcher

log = logging.getLogger("callboard.specialists")
# done-marker set with an attempt's outcome, whichever it is (named when only completions
# were marked; the name stays, so markers set before still count)
SETTLED = "__completed__"
# done-marker holding the reason of an attempt's coord.standdown, set by the replica that
# handled it: a standdown reaches one replica of the agent, its work may be on another
STOOD_DOWN = "__stood_down__"
# done-marker claiming an attempt for the inbox entry whose work runs it (a lease, renewed
# while it runs, deleted with the outcome): a copy of the GO, a new entry read by another
# replica meanwhile, finds it and leaves the attempt to that entry
RUNNING = "__running__"


async def run_work(dp: Dispatcher, d: Delivery, m: Envelope, cue: Cue) -> bool:
    """Execute `cue` once; True when the entry is to be acked, False when it was settled.

    The slot is held for `execute` only: the outcome is written (with the XACK and the
    done-marker, atomically: see `settle`) while the next piece of work already runs, and
    writes made meanwhile share one round trip. status.started goes out unless the outcome
    is ready before it could be written; then the outcome alone says it (see `Write`).

    First the attempt is claimed for this entry and its markers are read, in one round trip
    shared with the GOs handled meanwhile (see `_claimed`); again once a slot is taken, if
    the work waited for one. None of these is executed: a copy of an attempt that has its
    outcome (acked), one whose work another entry holds (a copy: acked; that entry stays
    pending until its outcome is written, and is reclaimed and run if its replica dies),
    one stood down on another replica (reported so). The same entry taken over from a
    replica that stopped renewing it runs."""
    rt, spec = dp.rt, dp.spec
    work = (m.run_id, cue.cue_id, cue.attempt)
    go_on = await _claimed(dp, d, m, cue)
    if go_on is not None:
        return go_on
    waits = rt.paused or rt.busy >= spec.concurrency  # for a slot: the markers may change
    async with rt.work_slot():
        # looked at again once a slot is taken (found by review: a copy that waited ran
        # after the attempt's outcome had landed from another replica)
        if waits and (go_on := await _claimed(dp, d, m, cue)) is not None:
            return go_on
        with _invoking(dp, m, cue):
            started = StatusStarted(attempt=cue.attempt, replica=spec.replica)
            # built later, by the writer: the span's context is taken now
            traced = {"traceparent": dp.trace_context()} if spec.tracer is not None else {}
            rt.post(
                lambda: _reply(dp, m, cue, MessageType.STATUS_STARTED, started, **traced),
                superseded=work,
            )
            tries = d.deliveries
            outcome: Sequence[Envelope | bytes]
            while True:
                try:
                    result = Result.coerce(await spec.execute(cue))
                    outcome = _completion(dp, m, cue, result)
                    break
                except Retry as exc:
                    if tries < rt.settings.max_deliveries:
                        tries += 1
                        await dp.sleep_or_abandon(exc.delay_s)
                        continue
                    error = f"gave up after {tries} tries: {exc.reason or 'Retry'}"
                    outcome = [*failure(dp, m, cue, error), rt.rejection(d, error)]
                    break
                except Reject as exc:
                    error = f"rejected: {exc.reason}"
                    outcome = [*failure(dp, m, cue, error), rt.rejection(d, error)]
                    break
                except Exception as exc:
                    # the hub gets one line; the traceback goes to this replica's own log
                    log.exception("execute of %r failed", cue)
                    outcome = failure(dp, m, cue, f"{type(exc).__name__}: {exc}")
                    break
    await settle(dp, d, m, cue, outcome)
    return False


async def _claimed(dp: Dispatcher, d: Delivery, m: Envelope, cue: Cue) -> bool | None:
    """Claim the attempt for entry `d` and read its markers: None when its work is this
    entry's to run (the claim then renewed while it is in hand), else what `run_work`
    returns. Every GO is looked at, whatever its deliveries: a copy may be a new entry
    (the hub's write sent again)."""
    rt, work, claim = dp.rt, (m.run_id, cue.cue_id, cue.attempt), cue.token(RUNNING)
    markers = [cue.token(SETTLED), cue.token(STOOD_DOWN)]
    holder, (settled, stood_down) = await rt.markers.begin(claim, d.entry_id, markers)
    # None: held, and gone by the time it was read (an outcome's DEL, then `settled` below
    # says so; or the lease of a replica that stopped ran out: taken over)
    mine = holder in (None, d.entry_id)
    if settled is not None:  # a copy of an attempt that has its outcome
        if mine:  # claimed just now: given back with the ack
            await rt.send(ack=[d], then=[rt.markers.release_command(claim)])
            return False
        return True
    if not mine:  # another entry's work holds the attempt
        return True
    dp.claims[work] = d.entry_id  # renewed while the work is in hand (Runtime._keep_claims)
    if stood_down is not None:  # called off (on another replica) before it started here
        await settle(dp, d, m, cue, failure(dp, m, cue, f"stood down: {stood_down}"))
        return False
    return None


async def settled_before(cue: Cue) -> bool:
    """Whether the attempt's outcome is written already (by this replica or another)."""
    return await cue.already_done(SETTLED)


async def settle(
    dp: Dispatcher, d: Delivery, m: Envelope, cue: Cue, outcome: Sequence[Envelope | bytes]
) -> None:
    """Write the attempt's outcome, the XACK of its entry and its done-marker in one atomic
    write: a replica dying any time leaves either all three or none (and a redelivery of
    the attempt is run again), never an outcome whose entry is run again. From here on a
    standdown no longer calls the work off: one attempt has one outcome. The attempt's
    claim is deleted in the same write."""
    rt, work = dp.rt, (m.run_id, cue.cue_id, cue.attempt)
    dp.working.pop(work, None)
    dp.claims.pop(work, None)  # not renewed past its DEL below (it would linger a lease)
    marker = rt.markers.set_command(cue.token(SETTLED))
    release = rt.markers.release_command(cue.token(RUNNING))
    rt.settling += 1
    try:
        await rt.send(*outcome, ack=[d], then=[marker, release], settles=work)
    finally:
        rt.settling -= 1


def _invoking(dp: Dispatcher, m: Envelope, cue: Cue) -> AbstractContextManager[None]:
    """The `invoke_agent` span of this execution when tracing is on (specialists.tracing)."""
    tracer = dp.spec.tracer
    if tracer is None:
        return nullcontext()
    return tracer.invoke(m, cue.cue_id, cue.attempt, dp.spec.kind)


def _reply(
    dp: Dispatcher, m: Envelope, cue: Cue, mt: MessageType, payload: Any, **f: Any
) -> Envelope:
    return dp.reply(m, mt, payload, cue_id=cue.cue_id, **f)


def _context(dp: Dispatcher, m: Envelope, cue: Cue, items: dict[str, Any]) -> list[Envelope]:
    out = []
    for key, value in items.items():
        entry = value if isinstance(value, Entry) else Entry(value)
        payload = TaskContext(
            key=key, value=entry.value, tags=list(entry.tags), metadata=dict(entry.metadata)
        )
        out.append(_reply(dp, m, cue, MessageType.TASK_CONTEXT, payload))
    return out


def _encoded(dp: Dispatcher, messages: list[Envelope]) -> list[bytes]:
    """Encode now, so a value that is not JSON or too big fails the cue, not the transport."""
    limit = dp.rt.settings.max_message_bytes
    batch = [encode(message) for message in messages]
    for message, raw in zip(messages, batch, strict=True):
        if len(raw) > limit:
            raise ValueError(f"{message.message_type} of {len(raw)} bytes over the {limit} limit")
    return batch


def _completion(dp: Dispatcher, m: Envelope, cue: Cue, result: Result) -> list[bytes]:
    """Context entries, then the handoff, then status.completed, encoded."""
    spec = dp.spec
    messages = _context(dp, m, cue, {**cue.pending_context, **result.context})
    if result.handoff is not None:
        handoff = result.handoff.payload(spec.agent_id, cue.cue_id, cue.attempt)
        messages.append(_reply(dp, m, cue, MessageType.TASK_HANDOFF, handoff))
    done = StatusCompleted(
        attempt=cue.attempt, result=result.result, replica=spec.replica,
        usage=result.usage_payload(),
    )  # fmt: skip
    messages.append(_reply(dp, m, cue, MessageType.STATUS_COMPLETED, done))
    return _encoded(dp, messages)


def failure(dp: Dispatcher, m: Envelope, cue: Cue, error: str) -> list[bytes]:
    """Context written so far, then status.failed (the error cut to a readable size),
    encoded, for `settle`."""
    if dp.spec.tracer is not None:  # the work's span (when this runs inside it) failed
        dp.spec.tracer.failed(error)
    failed = StatusFailed(attempt=cue.attempt, error=error[-4000:], replica=dp.spec.replica)
    messages = [_reply(dp, m, cue, MessageType.STATUS_FAILED, failed)]
    try:
        return _encoded(dp, [*_context(dp, m, cue, cue.pending_context), *messages])
    except (ValueError, TypeError):  # the context cannot go: report the failure alone
        return _encoded(dp, messages)
