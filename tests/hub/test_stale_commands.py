"""A hub whose lease moved, before it notices, answers no command: a refusal read from its
stale engine (a 404 for a run the new leader started) deleted the command unserved."""

from __future__ import annotations

import asyncio

import pytest

from hub import commands as c
from hub.service import Hub, HubSettings
from protocols.canonical import canonical_json
from protocols.ids import new_id
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.helpers import eventually

pytestmark = pytest.mark.redis
WAITING = "cuelist: waiting\ncues:\n  - {id: C0, target_agents: [nobody]}\n"


def _hub(settings: Settings, hub_id: str, lease_ms: int) -> Hub:
    return Hub(HubSettings(**{**settings.model_dump(), "hub_id": hub_id, "lease_ms": lease_ms}))


async def test_a_hub_that_lost_its_lease_unawares_leaves_commands_to_the_leader(
    settings: Settings,
) -> None:
    stale, leader = _hub(settings, "hub-a", 6_000), _hub(settings, "hub-b", 900)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(stale.run(stop))]
    try:
        await eventually(lambda: stale.leading.is_set(), 10, message="hub-a leads")
        tasks.append(asyncio.create_task(leader.run(stop)))
        parsed, version = load_cuelist(WAITING)
        await stale.cuelists.put(parsed, version, canonical_json(parsed), WAITING)
        # hub-a's lease lapses unseen (frozen past it): it renews only every 2 s
        await stale.transport._client.delete(stale.keys.leader(0))
        await eventually(lambda: leader.leading.is_set(), 5, message="hub-b leads")
        run_id = new_id()
        await leader.driver.start_run("waiting", version, run_id, {}, False)
        for i in range(10):  # each one the leader's to serve, none refused by hub-a
            await leader.commands.call(c.RaiseCondition(run_id=run_id, name=f"x{i}"), 5)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await stale.close()
        await leader.close()
