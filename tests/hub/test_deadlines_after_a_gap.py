"""A reply an agent sent in time, waiting in its stream while no hub read it, counts before
the deadline it beat. Found by review: after a failover (the next hub rebuilds the cue's
deadline from Redis, already past) or a freeze of the leader (its loop stopped past the
deadline), the deadline fired before the router had read the streams. The cue failed on
`ack_timeout_s` for an ack sent in time, or was called again after `go_timeout_s` for work
already done. Now the first deadlines of a term, and those after the process stalled, wait
until the router has handled what the streams held."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis as syncredis

from hub.service import Hub
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import encode, make
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import CueState
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub

pytestmark = pytest.mark.redis
CUE = "{id: C, target_agents: [ana], ack_timeout_s: 2, standby_timeout_s: 30"
ACKS = f"cuelist: gap\ncues:\n  - {CUE}}}\n"
WORK = f"cuelist: gap\ncues:\n  - {CUE}, go_timeout_s: 2, retries: 1}}\n"


def _from_ana(kind: T, body: Any, run_id: str) -> dict[str, bytes]:
    msg = make(kind, body, from_agent="ana", run_id=run_id, cue_id="C")
    return {STREAM_FIELD: encode(msg)}


async def _online(hub: Hub) -> None:
    online = make(T.STATUS_ONLINE, p.StatusOnline(replica="ana-1"), from_agent="ana")
    await hub.transport._client.xadd(hub.keys.out("ana"), {STREAM_FIELD: encode(online)})
    await eventually(lambda: "ana" in hub.registry.agents, 10, message="ana online")


async def _start(hub: Hub, text: str, run_id: str) -> None:
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    await hub.driver.start_run("gap", version, run_id, {}, False)
    await eventually(lambda: inbox(hub, "ana", T.COORD_WARNING), 10, message="warned")


async def _state(hub: Hub, run_id: str, *left: CueState) -> Any:
    async def moved() -> Any:
        run = await hub.store.run(run_id)
        return run if run is not None and run.cues["C"].state not in left else None

    return await eventually(moved, 15, message=f"C left {left}")


async def _deadline(hub: Hub, run_id: str) -> float:
    run = await hub.store.run(run_id)
    assert run is not None and run.cues["C"].deadline is not None
    return float(run.cues["C"].deadline)


async def test_an_ack_sent_before_a_failover_beats_its_rebuilt_deadline(
    settings: Settings,
) -> None:
    async with running_hub(settings, lease_ms=1000) as first:
        await _online(first)
        await _start(first, ACKS, "run-ack")
        deadline = await _deadline(first, "run-ack")
    # no hub leads; the agent acks within ack_timeout_s
    sync = syncredis.Redis.from_url(settings.redis_url)
    entry = sync.xadd(settings.keys.out("ana"), _from_ana(T.ACK_WARNING, p.AckWarning(), "run-ack"))
    assert int(entry.split(b"-")[0]) / 1000 < deadline  # sent in time (Redis's clock)
    # the next leader comes after the deadline (time passing, not a wait for an event)
    await asyncio.sleep(max(0.0, deadline + 0.5 - time.time()))
    async with running_hub(settings, lease_ms=1000) as second:
        run = await _state(second, "run-ack", CueState.WARNING)
        assert run.cues["C"].state is CueState.STANDBY, run.cues["C"].error
        assert not await second.store.escalations()
    sync.close()


async def test_work_done_before_a_failover_is_not_called_again(settings: Settings) -> None:
    async with running_hub(settings, lease_ms=1000) as first:
        await _online(first)
        await _start(first, WORK, "run-go")
        client = first.transport._client
        await client.xadd(first.keys.out("ana"), _from_ana(T.ACK_WARNING, p.AckWarning(), "run-go"))
        await eventually(lambda: inbox(first, "ana", T.COORD_STANDBY), 10, message="standby")
        await client.xadd(first.keys.out("ana"), _from_ana(T.ACK_STANDBY, p.AckStandby(), "run-go"))
        await eventually(lambda: inbox(first, "ana", T.COORD_GO), 10, message="GO")
        deadline = await _deadline(first, "run-go")
    sync = syncredis.Redis.from_url(settings.redis_url)
    done = _from_ana(T.STATUS_COMPLETED, p.StatusCompleted(), "run-go")
    entry = sync.xadd(settings.keys.out("ana"), done)
    assert int(entry.split(b"-")[0]) / 1000 < deadline
    await asyncio.sleep(max(0.0, deadline + 0.5 - time.time()))
    async with running_hub(settings, lease_ms=1000) as second:
        run = await _state(second, "run-go", CueState.GO)
        assert run.cues["C"].state is CueState.COMPLETED, run.cues["C"].error
        assert run.cues["C"].attempt == 1 and not run.record.late_replies
        assert len(await inbox(second, "ana", T.COORD_GO)) == 1
    sync.close()


async def test_an_ack_that_came_while_the_leader_was_frozen_beats_the_deadline(
    settings: Settings,
) -> None:
    async with running_hub(settings, lease_ms=10_000) as hub:  # the freeze keeps the lease
        await _online(hub)
        await _start(hub, ACKS, "run-frozen")
        deadline = await _deadline(hub, "run-frozen")
        sync = syncredis.Redis.from_url(settings.redis_url)
        sync.xadd(hub.keys.out("ana"), _from_ana(T.ACK_WARNING, p.AckWarning(), "run-frozen"))
        assert time.time() < deadline
        # the leader's process stops past the deadline (SIGSTOP, swap, a long pause): a
        # freeze of this loop, injected, not a wait
        time.sleep(max(0.0, deadline + 0.5 - time.time()))  # noqa: ASYNC251 (the freeze)
        run = await _state(hub, "run-frozen", CueState.WARNING)
        assert run.cues["C"].state is CueState.STANDBY, run.cues["C"].error
        sync.close()
