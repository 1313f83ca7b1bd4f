"""A run whose cuelist version is gone (deleted in a race with its start or a retry: a
delete keeps only the versions active runs use when it looks) ends, saying why, when a hub
loads it, instead of stopping every hub from leading its partition."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from hub.engine.driver import GONE_REASON
from hub.service import Hub
from protocols.canonical import canonical_json
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import CueState, RunStatus
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub, start

pytestmark = pytest.mark.redis
RUNS = ("run-gone", "run-gone-too")  # the second got the first's stand-in plan, as its own
TEXT = """
cuelist: gone
cues:
  - {id: A, target_agents: [gone-a]}
  - {id: B, target_agents: [gone-b], depends_on: [A]}
"""


async def _warned(hub: Hub) -> bool:
    return len(await inbox(hub, "gone-a", T.COORD_WARNING)) == len(RUNS)


async def test_a_run_whose_version_is_gone_ends_and_the_next_hub_leads(
    settings: Settings, real_redis: aioredis.Redis, keys: Keys
) -> None:
    _, version = load_cuelist(TEXT)
    async with running_hub(settings, lease_ms=1500) as hub:
        for run_id in RUNS:
            await start(hub, TEXT, run_id)
        await eventually(lambda: _warned(hub), 10, message="A's WARNINGs sent")
    # what the race leaves: the run active, its version's document and listing deleted
    await real_redis.hdel(keys.cuelist("gone"), version)
    await real_redis.zrem(keys.cuelist_versions("gone"), version)
    async with running_hub(settings, lease_ms=1500) as hub:  # it leads: it never did
        for run_id in RUNS:
            run = await eventually(lambda r=run_id: _ended(hub, r), 10, message="ended")
            assert run.status is RunStatus.FAILED
            error = run.cues["A"].error or ""
            assert run.cues["A"].state is CueState.FAILED and GONE_REASON in error
            assert run.cues["B"].state is CueState.FAILED
            assert run_id not in await hub.store.active_run_ids()
        standdowns = await inbox(hub, "gone-a", T.COORD_STANDDOWN)
        assert sorted(m.run_id for m in standdowns) == sorted(RUNS)
        assert all(GONE_REASON in m.payload.reason for m in standdowns)  # type: ignore[attr-defined]


async def _ended(hub: Hub, run_id: str) -> object:
    run = await hub.store.run(run_id)
    return run if run is not None and run.status.done else None


async def test_a_start_served_after_a_delete_runs_on_and_a_new_hub_resumes_it(
    settings: Settings,
) -> None:
    """The API checks the version is listed, then queues the start; a delete in between
    found no active run on the version and deleted its document: the start was refused
    after the API's check passed, or, started from the leader's cached plan, the run was
    failed by the next hub as gone. The document is kept (DELETED_KEPT_S)."""
    async with running_hub(settings, lease_ms=1500) as hub:
        parsed, version = load_cuelist(TEXT)
        await hub.cuelists.put(parsed, version, canonical_json(parsed), TEXT)
        assert await hub.cuelists.listed("gone", version)  # the API's check
        await hub.cuelists.delete("gone")
        await hub.driver.start_run("gone", version, "run-queued", {}, False)  # then served
    async with running_hub(settings, lease_ms=1500) as hub:
        assert "run-queued" in await hub.store.active_run_ids()
        run = hub.driver.engine.runs["run-queued"]
        assert not run.status.done and "gone-a" in run.cues["A"].targets
