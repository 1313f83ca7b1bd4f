"""A run's params (as big as a request) are written once, in a field of their own, and
read back with the run: not written again with each of its steps."""

from __future__ import annotations

from typing import Any

import pytest

from hub.service import Hub
from hub.store.layout import HEADER, PARAMS
from protocols import payloads as p
from protocols.codec import encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub, start

pytestmark = pytest.mark.redis
TWO = """
cuelist: two
cues:
  - {id: A, target_agents: [ann], coordination: direct, auto_follow: B}
  - {id: B, target_agents: [ann], coordination: direct}
"""


async def test_a_runs_params_are_written_once_and_read_back(
    settings: Settings, real_redis: Any
) -> None:
    keys, client = settings.keys, real_redis
    params = {"doc": "y" * 200_000, "n": 3}
    async with running_hub(settings, lease_ms=1000) as hub:
        await start(hub, TWO, "run-big", params)
        (task,) = await eventually(lambda: inbox(hub, "ann"), 10)
        done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1))
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})
        await eventually(lambda: _second(hub), 10, message="B assigned")
        fields: dict[bytes, bytes] = await client.hgetall(keys.run("run-big"))
        assert len(fields[HEADER.encode()]) < 2_000  # the steps since the start left them out
        assert len(fields[PARAMS.encode()]) > 200_000
        run = await hub.store.run("run-big")
        assert run is not None and run.params == params


async def _second(hub: Hub) -> bool:
    return len(await inbox(hub, "ann")) == 2
