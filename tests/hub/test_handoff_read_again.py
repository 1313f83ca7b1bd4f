"""A `task.handoff` the next leader reads again (its sender's XADD sent twice, the hub that
forwarded the first gone) is not forwarded, recorded or checked twice: the cue keeps that
its handoff was taken (`handoff_ok`, written with the step that forwarded it). Its context,
held for the receiver's GO, is read back by the next leader from a field of its own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hub.store.layout import HANDOFF, HEADER
from protocols import payloads as p
from protocols.codec import Envelope, encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub, start

pytestmark = pytest.mark.redis
HANDING = """
cuelist: handing
specialists:
  ann: {provides: [code], handoff_to: [bob]}
  bob: {requires: [code]}
cues:
  - {id: CODE, target_agents: [ann], coordination: direct, handoff: {to: bob}, auto_follow: TEST}
  - {id: TEST, target_agents: [bob], coordination: direct}
"""


async def test_a_handoff_read_again_by_the_next_leader_is_forwarded_once(
    settings: Settings, real_redis: Any
) -> None:
    keys, client = settings.keys, real_redis
    async with running_hub(settings, lease_ms=1000) as first:
        await start(first, HANDING, "run-hand")
        (task,) = await eventually(lambda: inbox(first, "ann"), 10)
        raw = encode(_handoff(task))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})
        await eventually(lambda: inbox(first, "bob", T.TASK_HANDOFF), 10, message="forwarded")
    await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})  # the same message again
    async with running_hub(settings, lease_ms=1000) as second:
        done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})
        # ann's stream is read in order: TEST is assigned after the copy was handled
        await eventually(lambda: inbox(second, "bob", T.TASK_ASSIGN), 10, message="TEST assigned")
        assert len(await inbox(second, "bob", T.TASK_HANDOFF)) == 1
        events = [e.data for e in await second.store.events("run-hand")]
        assert [e["to"] for e in events if e["type"] == "handoff"] == ["bob"]
        run = await second.store.run("run-hand")
        assert run is not None and run.cues["CODE"].state.value == "completed"


async def test_a_held_handoff_context_is_a_field_the_next_leader_gives_once(
    settings: Settings, real_redis: Any
) -> None:
    """The context waits for its receiver's GO in a field of the run's hash of its own, not
    in the header every step writes; a new leader reads it back, gives it with the
    receiver's assignment, and the same write deletes it."""
    keys, client = settings.keys, real_redis
    field = f"{HANDOFF}bob".encode()

    async def held() -> dict[bytes, bytes] | None:
        fields: dict[bytes, bytes] = await client.hgetall(keys.run("run-held"))
        return fields if field in fields else None

    async with running_hub(settings, lease_ms=1000) as first:
        await start(first, HANDING, "run-held")
        (task,) = await eventually(lambda: inbox(first, "ann"), 10)
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(_handoff(task))})
        fields = await eventually(held, 10, message="the context held in its field")
        assert json.loads(fields[field])["code"] == "src/x.py"
        assert b"src/x.py" not in fields[HEADER.encode()]
    async with running_hub(settings, lease_ms=1000) as second:
        done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})
        (test,) = await eventually(lambda: inbox(second, "bob", T.TASK_ASSIGN), 10)
        assert test.body(p.TaskAssign).context["code"] == "src/x.py"
        assert field not in await client.hgetall(keys.run("run-held"))  # given: gone with it
        run = await second.store.run("run-held")
        assert run is not None and run.handoffs == {}


def _handoff(task: Envelope) -> Envelope:
    """ann's handoff to bob of the context bob requires, answering its task."""
    body = p.TaskHandoff(
        from_agent="ann", to_agent="bob", task_id="CODE",
        handoff_context=p.HandoffContext(code="src/x.py"),  # type: ignore[call-arg]
    )  # fmt: skip
    return task.reply(T.TASK_HANDOFF, body).model_copy(update={"from_agent": "ann"})
