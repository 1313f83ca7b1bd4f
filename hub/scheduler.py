"""Cron schedules: the leading hub starts a run of each scheduled cuelist when it is due.

`overlap` decides what happens when the previous scheduled run is still going: `skip`
(default) drops the tick, `buffer_one` keeps one tick to start when it ends, `allow`
starts anyway. The last fire time is stored, so a new leader neither repeats nor loses one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from croniter import croniter

from hub.cuelists import CuelistStore
from hub.store import StateStore
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.states import Overlap

log = logging.getLogger(__name__)

StartRun = Callable[[str, str, str], Awaitable[object]]  # (cuelist, version, run_id)
TICK_S = 1.0


class Scheduler:
    def __init__(
        self, cuelists: CuelistStore, store: StateStore, keys: Keys, start: StartRun
    ) -> None:
        self.cuelists = cuelists
        self.store = store
        self.keys = keys
        self.start = start

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.tick(time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)

    async def tick(self, now: float) -> list[str]:
        """Start every run that is due at `now`; returns the run ids started."""
        started = []
        for name in await self.cuelists.names():
            version = await self.cuelists.latest(name)
            if version is None:
                continue
            cuelist = await self.cuelists.get(name, version)
            if not getattr(cuelist, "schedule", None):
                continue
            run_id = await self._due(name, version, cuelist, now)
            if run_id:
                started.append(run_id)
        return started

    async def _due(self, name: str, version: str, cuelist: object, now: float) -> str | None:
        client = self.store.client
        key = self.keys.schedule(name)
        state = {k.decode(): v.decode() for k, v in (await client.hgetall(key)).items()}
        last = float(state.get("last", 0)) or now
        if "last" not in state:  # first sight: schedule from now, do not fire the past
            await client.hset(key, mapping={"last": now})
            return None
        buffered = state.get("buffered") == "1"
        due = croniter(cuelist.schedule, last).get_next(float) <= now  # type: ignore[attr-defined]
        if not due and not buffered:
            return None
        overlap = Overlap(getattr(cuelist, "overlap", Overlap.SKIP))
        running = await self._running(state.get("run_id"))
        if running and overlap is not Overlap.ALLOW:
            if due and overlap is Overlap.BUFFER_ONE:
                await client.hset(key, mapping={"buffered": 1, "last": now})
            elif due:
                await client.hset(
                    key, mapping={"last": now, "skipped": int(state.get("skipped", 0)) + 1}
                )
            return None
        run_id = new_id()
        await client.hset(key, mapping={"last": now, "run_id": run_id, "buffered": 0})
        await self.start(name, version, run_id)
        log.info("schedule started run %s of %s", run_id, name)
        return run_id

    async def _running(self, run_id: str | None) -> bool:
        if not run_id:
            return False
        run = await self.store.run(run_id)
        return run is not None and not run.status.done
