"""Cron schedules: the leading hub starts a run of each scheduled cuelist when it is due.

`overlap` decides what happens when the previous scheduled run is still going: `skip`
(default) drops the tick, `buffer_one` keeps one tick to start when it ends, `allow`
starts anyway. The last fire time is stored, so a new leader neither repeats nor loses one.
A paused schedule's ticks pass without a run (none is made up on resume). The scheduler
also sweeps deleted cuelist versions no active run uses any more (hub.store.cuelists).

A tick that fires saves its run's id, marked `starting`, before it starts the run, and
clears the mark once the run is written. A leader that stops in between (or whose start
failed on Redis) leaves the mark: the next tick, on whichever hub leads, starts that run
unless it exists (a start is done once per run id), so a failover neither loses a tick's
run nor starts it twice. A start the engine refuses (its cuelist version deleted meanwhile)
is logged and dropped, not tried every tick, and does not end the term.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from croniter import croniter

from hub.store.cuelists import CuelistStore
from hub.store.schedules import ScheduleState, ScheduleStore
from hub.store.state import StateStore
from protocols.cuelist import Cuelist
from protocols.errors import CallboardError, TransportError
from protocols.ids import new_id
from protocols.states import Overlap

log = logging.getLogger(__name__)

StartRun = Callable[[str, str, str], Awaitable[object]]  # (cuelist, version, run_id)
TICK_S = 1.0
SWEEP_EVERY_S = 30.0  # how often deleted cuelist versions are checked for runs using them


class Scheduler:
    def __init__(
        self,
        cuelists: CuelistStore,
        store: StateStore,
        schedules: ScheduleStore,
        start: StartRun,
        new_run_id: Callable[[], str] = new_id,
    ) -> None:
        """`new_run_id`: ids of runs `start` can start (with partitions: partition 0's)."""
        self.cuelists = cuelists
        self.store = store
        self.schedules = schedules
        self.start = start
        self.new_run_id = new_run_id

    async def run(self, stop: asyncio.Event) -> None:
        swept = 0.0
        while not stop.is_set():
            await self.tick(time.time())
            if time.monotonic() - swept > SWEEP_EVERY_S:
                swept = time.monotonic()
                await self.cuelists.sweep_deleted()
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
            if not cuelist.schedule:
                continue
            run_id = await self._due(name, version, cuelist, now)
            if run_id:
                started.append(run_id)
        return started

    async def _due(self, name: str, version: str, cuelist: Cuelist, now: float) -> str | None:
        state = await self.schedules.get(name)
        if state.starting and state.run_id:  # a tick's run not known to be started
            return await self._finish_start(name, version, state)
        if state.last is None:  # first sight: schedule from now, do not fire the past
            await self.schedules.save(name, ScheduleState(last=now))
            return None
        schedule = cuelist.schedule or ""
        due = croniter(schedule, state.last or now).get_next(float) <= now
        if state.paused:
            if due:  # the tick passes: resuming starts nothing for the time paused
                state.last, state.buffered = now, False
                await self.schedules.save(name, state)
            return None
        if not due and not state.buffered:
            return None
        running = await self._running(state.run_id)
        if running and cuelist.overlap is not Overlap.ALLOW:
            if due and cuelist.overlap is Overlap.BUFFER_ONE:
                state.buffered, state.last = True, now
                await self.schedules.save(name, state)
            elif due:
                state.last, state.skipped = now, state.skipped + 1
                await self.schedules.save(name, state)
            return None
        run_id = self.new_run_id()
        state.last, state.run_id, state.buffered, state.starting = now, run_id, False, True
        await self.schedules.save(name, state)
        return await self._start(name, version, state)

    async def _finish_start(self, name: str, version: str, state: ScheduleState) -> str | None:
        """The run a tick asked for, started unless it exists (its leader stopped, or its
        start failed on Redis, before the mark was cleared); its id when started here."""
        assert state.run_id is not None
        if await self.store.run(state.run_id) is not None:
            state.starting = False
            await self.schedules.save(name, state)
            return None
        log.warning("schedule of %s: run %s was asked for and not written; starting it",
                    name, state.run_id)  # fmt: skip
        return await self._start(name, version, state)

    async def _start(self, name: str, version: str, state: ScheduleState) -> str | None:
        """Start the run `state` names and clear its mark. Redis failing leaves the mark
        (raised: the next tick starts it); a refusal clears it (logged: no run)."""
        run_id = state.run_id
        assert run_id is not None
        try:
            await self.start(name, version, run_id)
        except TransportError:
            raise
        except CallboardError as exc:  # refused: this tick has no run
            log.error("schedule of %s: run %s refused: %s", name, run_id, exc)
            run_id = None
        else:
            log.info("schedule started run %s of %s", run_id, name)
        state.starting = False
        await self.schedules.save(name, state)
        return run_id

    async def _running(self, run_id: str | None) -> bool:
        if not run_id:
            return False
        run = await self.store.run(run_id)
        return run is not None and not run.status.done
