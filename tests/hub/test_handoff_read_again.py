"""A `task.handoff` the next leader reads again (its sender's XADD sent twice, the hub that
forwarded the first gone) is not forwarded, recorded or checked twice: the cue keeps that
its handoff was taken (`handoff_ok`, written with the step that forwarded it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hub.store.layout import HANDOFF, HEADER
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import Envelope, decode, encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import running_hub

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
    parsed, version = load_cuelist(HANDING)
    keys, client = settings.keys, real_redis

    async def inbox(agent: str) -> list[Envelope]:
        entries = await client.xrange(keys.inbox(agent))
        return [decode(f[STREAM_FIELD.encode()]) for _, f in entries]

    async def of_type(agent: str, kind: T) -> list[Envelope]:
        return [m for m in await inbox(agent) if m.message_type is kind]

    async with running_hub(settings, lease_ms=1000) as first:
        await first.cuelists.put(parsed, version, canonical_json(parsed), HANDING)
        await first.driver.start_run("handing", version, "run-hand", {}, False)
        (task,) = await eventually(lambda: inbox("ann"), 10)
        body = p.TaskHandoff(
            from_agent="ann", to_agent="bob", task_id="CODE",
            handoff_context=p.HandoffContext(code="src/x.py"),  # type: ignore[call-arg]
        )  # fmt: skip
        handoff = task.reply(T.TASK_HANDOFF, body).model_copy(update={"from_agent": "ann"})
        raw = encode(handoff)
        await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})
        await eventually(lambda: of_type("bob", T.TASK_HANDOFF), 10, message="forwarded")
    await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})  # the same message again
    async with running_hub(settings, lease_ms=1000) as second:
        done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})
        # ann's stream is read in order: TEST is assigned after the copy was handled
        await eventually(lambda: of_type("bob", T.TASK_ASSIGN), 10, message="TEST assigned")
        assert len(await of_type("bob", T.TASK_HANDOFF)) == 1
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
    parsed, version = load_cuelist(HANDING)
    keys, client = settings.keys, real_redis
    field = f"{HANDOFF}bob".encode()

    async def assigned(agent: str) -> list[Envelope]:
        entries = await client.xrange(keys.inbox(agent))
        found = [decode(f[STREAM_FIELD.encode()]) for _, f in entries]
        return [m for m in found if m.message_type is T.TASK_ASSIGN]

    async with running_hub(settings, lease_ms=1000) as first:
        await first.cuelists.put(parsed, version, canonical_json(parsed), HANDING)
        await first.driver.start_run("handing", version, "run-held", {}, False)
        (task,) = await eventually(lambda: assigned("ann"), 10)
        body = p.TaskHandoff(
            from_agent="ann", to_agent="bob", task_id="CODE",
            handoff_context=p.HandoffContext(code="src/x.py"),  # type: ignore[call-arg]
        )  # fmt: skip
        handoff = task.reply(T.TASK_HANDOFF, body).model_copy(update={"from_agent": "ann"})
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(handoff)})

        async def held() -> dict[bytes, bytes] | None:
            fields: dict[bytes, bytes] = await client.hgetall(keys.run("run-held"))
            return fields if field in fields else None

        fields = await eventually(held, 10, message="the context held in its field")
        assert json.loads(fields[field])["code"] == "src/x.py"
        assert b"src/x.py" not in fields[HEADER.encode()]
    async with running_hub(settings, lease_ms=1000) as second:
        done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})
        (test,) = await eventually(lambda: assigned("bob"), 10, message="TEST assigned")
        assert test.body(p.TaskAssign).context["code"] == "src/x.py"
        assert field not in await client.hgetall(keys.run("run-held"))  # given: gone with it
        run = await second.store.run("run-held")
        assert run is not None and run.handoffs == {}
