"""The behaviours the kit checks (PROTOCOL.md, "Conformance"), each in a run of its own.

A check returns what it saw when the behaviour holds and raises `Failed` when it does not.
Actions are the conformance actions every tested agent implements (the echo vocabulary).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from callboard.conformance.stage import Failed, Sent, Stage
from callboard.conformance.watch import Seen
from protocols.ids import new_id
from protocols.messages import MessageType as T
from protocols.payloads import (
    AckStandby,
    CoordStanddown,
    StatusCompleted,
    StatusFailed,
    TaskContext,
    TaskHandoff,
)

Check = Callable[[Stage], Awaitable[str]]
PEER = "conformance-peer"  # the receiver named in the scripted handoff


def _token() -> str:
    return new_id()[-12:]


async def acks_warning(stage: Stage) -> str:
    run, cue = new_id(), "CUE-W"
    sent = await stage.send(T.COORD_WARNING, stage.warning(cue, {}), run, cue)
    ack = await stage.reply(sent, T.ACK_WARNING, stage.timing.ack_timeout_s)
    await stage.acknowledged(sent)
    return f"ack.warning for entry {sent.entry_id} as {ack.entry_id}"


async def acks_standby(stage: Stage) -> str:
    run, cue = new_id(), "CUE-S"
    warning = await stage.send(T.COORD_WARNING, stage.warning(cue, {}), run, cue)
    await stage.reply(warning, T.ACK_WARNING, stage.timing.ack_timeout_s)
    sent = await stage.send(T.COORD_STANDBY, stage.standby(cue), run, cue)
    ack = (await stage.reply(sent, T.ACK_STANDBY, stage.timing.ack_timeout_s)).body(AckStandby)
    if not ack.ready:
        raise Failed(f"ack.standby says not ready: {ack.reason}")
    await stage.acknowledged(sent)
    return "ready"


async def _completed_once(stage: Stage, action: dict[str, Any], cue: str) -> tuple[Sent, Seen]:
    """Call the cue, GO, and the one completion (nothing else about the run may follow)."""
    run = await stage.call(cue, action)
    go = await stage.send(T.COORD_GO, stage.go(cue, action), run, cue)
    done = await stage.reply(go, T.STATUS_COMPLETED, stage.timing.go_timeout_s)
    await asyncio.sleep(stage.timing.settle_s)
    outcomes = [s for s in stage.about(go) if s.msg.message_type in _OUTCOMES]
    if len(outcomes) > 1:
        kinds = ", ".join(s.msg.message_type.value for s in outcomes)
        raise Failed(f"{len(outcomes)} outcomes for one GO ({kinds}): executed more than once")
    await stage.acknowledged(go)
    return go, done


_OUTCOMES = (T.STATUS_COMPLETED, T.STATUS_FAILED)


async def executes_once_on_go(stage: Stage) -> str:
    result = {"conformance": _token()}
    go, done = await _completed_once(stage, {"result": result}, "CUE-GO")
    got = done.body(StatusCompleted).result
    if got != result:
        raise Failed(f"status.completed result {got!r}, not the scripted {result!r}")
    started = stage.about(go, T.STATUS_STARTED)
    if started and started[0].index > done.index:
        raise Failed("status.started came after status.completed")
    return f"completed once{' (started first)' if started else ''}"


async def ignores_duplicate_go(stage: Stage) -> str:
    go, _ = await _completed_once(stage, {"result": {"n": 1}}, "CUE-DUP")
    mark = stage.watch.mark
    copy = await stage.resend(go)
    await asyncio.sleep(stage.timing.settle_s)
    extra = stage.about(go, after=mark)
    if extra:
        kinds = ", ".join(s.msg.message_type.value for s in extra)
        raise Failed(f"answered a copy of a GO it had done: {kinds}")
    await stage.acknowledged(copy)
    return "the copy was acknowledged and changed nothing"


async def reports_not_ready(stage: Stage) -> str:
    run, cue = new_id(), "CUE-NR"
    action = {"ready": False, "ready_reason": "conformance: told not to be ready"}
    warning = await stage.send(T.COORD_WARNING, stage.warning(cue, action), run, cue)
    await stage.reply(warning, T.ACK_WARNING, stage.timing.ack_timeout_s)
    sent = await stage.send(T.COORD_STANDBY, stage.standby(cue), run, cue)
    ack = (await stage.reply(sent, T.ACK_STANDBY, stage.timing.ack_timeout_s)).body(AckStandby)
    if ack.ready:
        raise Failed("ack.standby says ready: true, though the action says ready: false")
    if not ack.reason:
        raise Failed("ack.standby ready: false gives no reason")
    await stage.acknowledged(sent)
    return f"not ready: {ack.reason}"


async def reports_failure(stage: Stage) -> str:
    cue, action = "CUE-F", {"fail": True}
    run = await stage.call(cue, action)
    go = await stage.send(T.COORD_GO, stage.go(cue, action), run, cue)
    failed = (await stage.reply(go, T.STATUS_FAILED, stage.timing.go_timeout_s)).body(StatusFailed)
    if not failed.error:
        raise Failed("status.failed has an empty error")
    await asyncio.sleep(stage.timing.settle_s)
    if stage.about(go, T.STATUS_COMPLETED):
        raise Failed("reported status.completed as well as status.failed")
    await stage.acknowledged(go)
    return f"failed: {failed.error[:80]}"


def _before_completion(stage: Stage, go: Sent, done: Seen, mt: T) -> list[Seen]:
    found = stage.about(go, mt)
    if not found:
        raise Failed(f"no {mt.value} before status.completed")
    for seen in found:
        stage.check_reply(go, seen)
        if seen.msg.in_reply_to != go.message.message_id:
            raise Failed(f"{mt.value} has in_reply_to {seen.msg.in_reply_to!r}, not the GO")
        if seen.index > done.index:
            raise Failed(f"{mt.value} came after status.completed")
    return found


async def writes_context(stage: Stage) -> str:
    value = {"token": _token(), "n": [1, 2]}
    go, done = await _completed_once(stage, {"context": {"conformance_key": value}}, "CUE-CTX")
    found = _before_completion(stage, go, done, T.TASK_CONTEXT)
    written = {c.key: c.value for c in (s.body(TaskContext) for s in found)}
    if written.get("conformance_key") != value:
        raise Failed(f"task.context wrote {written!r}, not {{'conformance_key': {value!r}}}")
    return "task.context conformance_key, then status.completed"


async def hands_off(stage: Stage) -> str:
    token = _token()
    action = {"handoff": {"to": PEER, "context": {"handed_over": token}}}
    go, done = await _completed_once(stage, action, "CUE-HO")
    handoff = _before_completion(stage, go, done, T.TASK_HANDOFF)[-1].body(TaskHandoff)
    got = (handoff.from_agent, handoff.to_agent, handoff.task_id, handoff.attempt)
    if got != (stage.agent, PEER, "CUE-HO", 1):
        raise Failed(f"task.handoff (from, to, task_id, attempt) is {got}")
    extra = handoff.handoff_context.model_extra or {}
    if extra.get("handed_over") != token:
        raise Failed(f"handoff_context lacks handed_over={token!r}: {extra!r}")
    return f"task.handoff to {PEER}, then status.completed"


async def honours_standdown(stage: Stage) -> str:
    cue, ms = "CUE-SD", stage.timing.standdown_execute_ms
    action = {"execute_ms": ms, "result": {"too": "late"}}
    run = await stage.call(cue, action)
    go = await stage.send(T.COORD_GO, stage.go(cue, action), run, cue)
    started = await stage.watch.wait(
        lambda m: m.message_type is T.STATUS_STARTED and m.run_id == run, 1.0
    )
    if not started:
        await asyncio.sleep(0.3)  # started is optional: give the work a moment to begin
    early = stage.about(go, T.STATUS_COMPLETED)
    if early:
        raise Failed(f"completed at once, before the standdown (execute_ms {ms} not honoured)")
    stop = CoordStanddown(cue_id=cue, attempt=1, reason="conformance: stood down")
    sent = await stage.send(T.COORD_STANDDOWN, stop, run, cue)
    await asyncio.sleep(ms / 1000 + stage.timing.settle_s)
    if stage.about(go, T.STATUS_COMPLETED):
        raise Failed("completed the work after it was stood down")
    await stage.acknowledged(sent)
    failed = stage.about(go, T.STATUS_FAILED)
    said = f"status.failed: {failed[0].body(StatusFailed).error[:60]}" if failed else "nothing"
    return f"stopped; reported {said}"


async def survives_redelivery(stage: Stage) -> str:
    cue, result = "CUE-RD", {"reclaimed": _token()}
    run = await stage.call(cue, {"result": result})
    go = await stage.send_to_ghost(T.COORD_GO, stage.go(cue, {"result": result}), run, cue)
    done = await stage.reply(go, T.STATUS_COMPLETED, stage.timing.reclaim_timeout_s)
    if done.body(StatusCompleted).result != result:
        raise Failed(f"completed with {done.body(StatusCompleted).result!r}, not {result!r}")
    await asyncio.sleep(stage.timing.settle_s)
    if len(stage.about(go, T.STATUS_COMPLETED)) > 1:
        raise Failed("completed the reclaimed GO more than once")
    await stage.acknowledged(go)
    return "an abandoned GO was reclaimed, executed once and acknowledged"


CHECKS: dict[str, Check] = {
    "acks-warning": acks_warning,
    "acks-standby": acks_standby,
    "executes-once-on-go": executes_once_on_go,
    "ignores-duplicate-go": ignores_duplicate_go,
    "reports-not-ready": reports_not_ready,
    "reports-failure": reports_failure,
    "writes-context": writes_context,
    "hands-off": hands_off,
    "honours-standdown": honours_standdown,
    "survives-redelivery": survives_redelivery,
}
