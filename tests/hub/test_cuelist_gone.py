"""A run whose cuelist version is gone (deleted in a race with its start or a retry: a
delete keeps only the versions active runs use when it looks) ends, saying why, when a hub
loads it, instead of stopping every hub from leading its partition."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from hub.engine.driver import GONE_REASON
from hub.service import Hub
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import CueState, RunStatus
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub, start

pytestmark = pytest.mark.redis
TEXT = """
cuelist: gone
cues:
  - {id: A, target_agents: [gone-a]}
  - {id: B, target_agents: [gone-b], depends_on: [A]}
"""


async def _warned(hub: Hub) -> bool:
    return bool(await inbox(hub, "gone-a", T.COORD_WARNING))


async def test_a_run_whose_version_is_gone_ends_and_the_next_hub_leads(
    settings: Settings, real_redis: aioredis.Redis, keys: Keys
) -> None:
    _, version = load_cuelist(TEXT)
    async with running_hub(settings, lease_ms=1500) as hub:
        await start(hub, TEXT, "run-gone")
        await eventually(lambda: _warned(hub), 10, message="A's WARNING sent")
    # what the race leaves: the run active, its version's document and listing deleted
    await real_redis.hdel(keys.cuelist("gone"), version)
    await real_redis.zrem(keys.cuelist_versions("gone"), version)
    async with running_hub(settings, lease_ms=1500) as hub:  # it leads: it never did
        run = await eventually(lambda: _ended(hub), 10, message="the run ended")
        assert run.status is RunStatus.FAILED
        assert run.cues["A"].state is CueState.FAILED and GONE_REASON in (run.cues["A"].error or "")
        assert run.cues["B"].state is CueState.FAILED
        (standdown,) = await inbox(hub, "gone-a", T.COORD_STANDDOWN)
        assert GONE_REASON in standdown.payload.reason  # type: ignore[attr-defined]
        assert "run-gone" not in await hub.store.active_run_ids()


async def _ended(hub: Hub) -> object:
    run = await hub.store.run("run-gone")
    return run if run is not None and run.status.done else None
