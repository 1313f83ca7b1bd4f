"""A target that dead-letters the call of its cue (`status.rejected` naming the GO, the
task.assign, the WARNING or the STANDBY the hub wrote to its inbox) will never answer it:
the attempt fails at once, saying who rejected what and why, instead of at its phase's
timeout (ten minutes for a GO by default). Real hub, real Redis; the agent is the test."""

from __future__ import annotations

from typing import Any

import pytest

from hub.service import Hub
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.states import CueState
from tests.helpers import eventually
from tests.hub.running import start

pytestmark = pytest.mark.redis
ONE = """
cuelist: one
cues:
  - {id: A, target_agents: [ann], coordination: direct, retries: 1}
"""
CUED = """
cuelist: cued
cues:
  - {id: A, target_agents: [ann, bob]}
"""
TOO_BIG = "undecodable: message of 300,000 bytes over the 262,144 limit"


async def _reject(hub: Hub, agent: str, kind: T, attempt: int, reason: str = TOO_BIG) -> None:
    """`agent` rejects the entry of its inbox that calls it (of `kind` and `attempt`)."""
    client = hub.transport._client
    rows = await client.xrange(hub.keys.inbox(agent))
    (entry_id,) = [
        i.decode() for i, f in rows
        if f"\"message_type\":\"{kind.value}\"".encode() in f[STREAM_FIELD.encode()]
        and f"\"attempt\":{attempt}".encode() in f[STREAM_FIELD.encode()]
    ]  # fmt: skip
    body = p.StatusRejected(entry_id=entry_id, reason=reason, deliveries=1)
    rejected = make(T.STATUS_REJECTED, body, from_agent=agent)
    await client.xadd(hub.keys.out(agent), {STREAM_FIELD: encode(rejected)})


async def _calls(hub: Hub, agent: str, kind: T) -> list[Any]:
    rows = await hub.transport._client.xrange(hub.keys.inbox(agent))
    found = [f[STREAM_FIELD.encode()] for _, f in rows]
    return [raw for raw in found if f'"message_type":"{kind.value}"'.encode() in raw]


async def test_a_rejected_assignment_fails_its_attempt_at_once_and_is_retried(hub: Hub) -> None:
    await start(hub, ONE, "run-r")
    await eventually(lambda: _calls(hub, "ann", T.TASK_ASSIGN), 10)
    await _reject(hub, "ann", T.TASK_ASSIGN, 1)
    # retries: 1, so a second attempt, long before the GO's 600 s timeout
    assigns = await eventually(lambda: _n(_calls(hub, "ann", T.TASK_ASSIGN), 2), 10)
    assert b'"attempt":2' in assigns[1]
    events = [e.data for e in await hub.store.events("run-r")]
    (failed,) = [e for e in events if e["type"] == "attempt_failed"]
    assert failed["attempt"] == 1 and failed["error"].startswith("ann rejected its task.assign")
    assert TOO_BIG in failed["error"] and "dead letter " in failed["error"]
    await _reject(hub, "ann", T.TASK_ASSIGN, 2)

    async def failed_cue() -> Any:
        run = await hub.store.run("run-r")
        return run if run is not None and run.cues["A"].state is CueState.FAILED else None

    run = await eventually(failed_cue, 10, message="no attempt left: the cue fails")
    assert run.cues["A"].error.startswith("ann rejected its task.assign")
    assert run.status.value == "failed"
    letters = await hub.transport._client.xrange(hub.keys.dead)
    assert len(letters) == 2  # the record of each rejected entry


async def test_a_target_rejecting_its_warning_stands_the_others_down(hub: Hub) -> None:
    await start(hub, CUED, "run-w")
    await eventually(lambda: _calls(hub, "bob", T.COORD_WARNING), 10)
    await _reject(hub, "ann", T.COORD_WARNING, 1, "rejected: no such tool")
    (standdown,) = await eventually(lambda: _calls(hub, "bob", T.COORD_STANDDOWN), 10)
    assert b"ann rejected its coord.warning" in standdown
    run = await hub.store.run("run-w")
    assert run is not None and run.cues["A"].state is CueState.FAILED
    assert "rejected: no such tool" in (run.cues["A"].error or "")


async def test_a_rejection_of_a_call_the_cue_is_past_changes_nothing(hub: Hub) -> None:
    """bob rejects its WARNING after acknowledging it (the cue is at STANDBY now): the dead
    letter is the record, and the call goes on to its GO."""
    await start(hub, CUED, "run-p")
    await eventually(lambda: _calls(hub, "bob", T.COORD_WARNING), 10)
    await _answer(hub, T.ACK_WARNING, p.AckWarning(attempt=1))
    await eventually(lambda: _calls(hub, "bob", T.COORD_STANDBY), 10)
    await _reject(hub, "bob", T.COORD_WARNING, 1)
    await _answer(hub, T.ACK_STANDBY, p.AckStandby(attempt=1, ready=True))
    # bob's stream is read in order: its rejection was handled before its ack.standby
    await eventually(lambda: _calls(hub, "bob", T.COORD_GO), 10, message="the call goes on")
    assert len(await _letters(hub)) == 1
    events = [e.data for e in await hub.store.events("run-p")]
    assert not [e for e in events if e["type"] == "attempt_failed"]
    assert not await _calls(hub, "ann", T.COORD_STANDDOWN)


async def _answer(hub: Hub, kind: T, body: p.Payload) -> None:
    for agent in ("ann", "bob"):
        msg = make(kind, body, from_agent=agent, run_id="run-p", cue_id="A")
        await hub.transport._client.xadd(hub.keys.out(agent), {STREAM_FIELD: encode(msg)})


async def _letters(hub: Hub) -> list[Any]:
    rows: list[Any] = await hub.transport._client.xrange(hub.keys.dead)
    return rows


async def _n(found: Any, n: int) -> list[Any] | None:
    items: list[Any] = await found
    return items if len(items) >= n else None
