"""Specialists used only by the fault suite, runnable as
`python -m callboard.specialist_cmd tests.faults.agents:Effects --agent X`.

`Effects` does direct tasks (task.assign) as their `action` scripts them:
    execute_ms   how long the work lasts (after the side effect)
    poison       "exit": the process dies (os._exit) `crash_after_ms` into the work, every
                 time; "retry": the handler raises Retry every time
Every execution is counted in `{prefix}execs:{agent}`; the side effect, guarded by the
SDK's done-marker (`cue.once`), in `{prefix}effects:{agent}` (field `{run_id}:{cue_id}`).
`NoRenew` is the same specialist with claim renewal switched off: the control run of row 2.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from protocols.transport import Redis, connect
from specialists import Specialist
from specialists.cue import Cue
from specialists.errors import Retry

EXIT_CODE = 3


def effects_key(prefix_keys: Any, agent: str) -> str:
    return f"{prefix_keys.prefix}effects:{agent}"


def execs_key(prefix_keys: Any, agent: str) -> str:
    return f"{prefix_keys.prefix}execs:{agent}"


class Effects(Specialist):
    kind = "faults-effects"
    redis: Redis

    async def setup(self) -> None:
        self.redis = connect(self.settings.redis_url)

    async def teardown(self) -> None:
        await self.redis.aclose()

    async def execute(self, cue: Cue) -> dict[str, Any]:
        keys, action = self.settings.keys, cue.action
        field = f"{cue.run_id}:{cue.cue_id}"
        await self.redis.hincrby(execs_key(keys, self.agent_id), field, 1)
        poison = action.get("poison")
        if poison == "exit":
            await asyncio.sleep(float(action.get("crash_after_ms", 0)) / 1000)
            os._exit(EXIT_CODE)
        if poison == "retry":
            raise Retry(0.01, "poison: fails every time")
        async with cue.once("effect") as first:
            if first:
                await self.redis.hincrby(effects_key(keys, self.agent_id), field, 1)
        await asyncio.sleep(float(action.get("execute_ms", 0)) / 1000)
        return {"replica": self.replica}


class NoRenew(Effects):
    """Control for row 2: the replica never renews its claims. It does not reclaim either:
    XAUTOCLAIM of its own idle entry would reset the idle time, a renewal by accident."""

    async def setup(self) -> None:
        await super().setup()

        async def no_renew(*args: Any, **kwargs: Any) -> None:
            return None

        async def no_reclaim(*args: Any, **kwargs: Any) -> list[Any]:
            return []

        transport = self._runtime.transport
        transport.renew = no_renew
        transport.reclaim = no_reclaim
