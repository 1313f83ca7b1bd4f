"""A partition's commands stream holds at most so many commands waiting: with no hub
leading, every request used to be queued (and answered 503 after its timeout), so the
stream grew for as long as the outage lasted, each command up to the API's body limit,
and each was served once a leader came back. Past the cap a request is refused at once
(503), nothing is queued, and its Idempotency-Key is free for the retry."""

from __future__ import annotations

import pytest

from hub.store import commands as store
from protocols.keys import Keys
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.running import api_process, running_hub

pytestmark = pytest.mark.redis
WAITS = "cuelist: waits\ncues:\n  - {id: A, target_agents: [nobody], conditions: [never]}\n"


async def test_with_no_leader_a_few_commands_wait_and_the_rest_are_refused_at_once(
    settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "WAITING_LEADERLESS", 3)
    async with api_process(settings, command_timeout_s=0.3) as api:
        r = await api.post("/v1/cuelists", content=WAITS,
                           headers={"Content-Type": "application/yaml"})  # fmt: skip
        assert r.status_code == 201, r.text
        for _ in range(3):  # queued: a leader that comes will serve them
            r = await api.post("/v1/runs", json={"cuelist": "waits"})
            assert r.status_code == 503 and "no leading hub" in r.json()["detail"], r.text
        key = {"Idempotency-Key": "after-the-outage"}
        for headers in ({}, key, key):  # refused at once, the key let go each time
            r = await api.post("/v1/runs", json={"cuelist": "waits"}, headers=headers)
            assert r.status_code == 503, r.text
            assert "too many commands waiting and no hub leads it" in r.json()["detail"]
            assert r.headers["retry-after"] == "1"
        async with running_hub(settings) as hub:
            stream = keys.commands()

            async def served() -> bool:
                return await hub.transport._client.xlen(stream) == 0

            await eventually(served, 10, message="the three waiting served")
            assert len(await hub.store.recent_run_ids(100)) == 3
            r = await api.post("/v1/runs", json={"cuelist": "waits"}, headers=key)
            assert r.status_code == 201, r.text  # the key was free
            assert len(await hub.store.recent_run_ids(100)) == 4
