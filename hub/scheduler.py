"""Cron schedules: the leading hub starts a run of each scheduled cuelist when it is due.

`overlap` decides what happens when the previous scheduled run is still going: `skip`
(default) drops the tick, `buffer_one` keeps one tick to start when it ends, `allow`
starts anyway. The last fire time is stored, so a new leader neither repeats nor loses one.
A paused schedule's ticks pass without a run (none is made up on resume). The scheduler
also sweeps deleted cuelist versions no active run uses any more (hub.store.cuelists).

A tick that fires takes itself (its time, its run's id) in the fenced write that starts
its run: a leader that stops before that write lands leaves the tick due, and whoever
leads next fires it; one whose write landed left both. So a failover neither loses a
tick's run nor starts it twice, and a stale leader's tick is refused whole. A start the
engine refuses (the cuelist's version deleted meanwhile) takes the tick without a run,
logged, and does not end the term. The tick's other saves (first seen, skipped, buffered,
passed while paused, refused) go through `write`, fenced as well: a stale leader that wakes
mid-tick cannot put back an older run id, and so lose `skip`'s or `buffer_one`'s guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from hub.store.cuelists import CuelistStore
from hub.store.layout import Op
from hub.store.schedules import ScheduleState, ScheduleStore
from hub.store.state import StateStore
from protocols.cuelist import Cuelist, next_fire
from protocols.errors import CallboardError, NotFound, StaleLeader, TransportError
from protocols.ids import new_id
from protocols.recent import Recent
from protocols.states import Overlap

log = logging.getLogger(__name__)

# (cuelist, version, run_id, operations to land in the run's own fenced write)
StartRun = Callable[[str, str, str, list[Op]], Awaitable[object]]
Write = Callable[[list[Op]], Awaitable[object]]  # operations, in a fenced write of their own
TICK_S = 1.0
SWEEP_EVERY_S = 30.0  # how often deleted cuelist versions are checked for runs using them
TIMINGS_KEPT = 4096  # versions whose schedule and overlap are kept (a few words each)


class Timing:
    """What a tick asks of a cuelist version: its schedule and its overlap."""

    __slots__ = ("overlap", "schedule")

    def __init__(self, cuelist: Cuelist) -> None:
        self.schedule = cuelist.schedule
        self.overlap = cuelist.overlap


class Scheduler:
    def __init__(
        self,
        cuelists: CuelistStore,
        store: StateStore,
        schedules: ScheduleStore,
        start: StartRun,
        write: Write,
        new_run_id: Callable[[], str] = new_id,
    ) -> None:
        """`new_run_id`: ids of runs `start` can start (with partitions: partition 0's)."""
        self.cuelists = cuelists
        self.store = store
        self.schedules = schedules
        self.start = start
        self.write = write
        self.new_run_id = new_run_id
        # the versions whose schedule has no next time, said once each (a version's
        # schedule never changes; bounded as the versions stored are)
        self._never: set[tuple[str, str]] = set()
        # each version's schedule and overlap: every cuelist is looked at every tick, and
        # its whole model need not be kept (or parsed again) for that
        self._timings: Recent[tuple[str, str], Timing] = Recent(TIMINGS_KEPT)

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
            timing = self._timings.get((name, version))
            if timing is None:
                try:
                    cuelist = await self.cuelists.get(name, version)
                except NotFound:  # deleted since `latest` (another hub's API): nothing due
                    continue
                timing = self._timings.put((name, version), Timing(cuelist))
            if not timing.schedule:
                continue
            run_id = await self._due(name, version, timing, now)
            if run_id:
                started.append(run_id)
        return started

    async def _due(self, name: str, version: str, cuelist: Timing, now: float) -> str | None:
        state = await self.schedules.get(name)
        schedule = cuelist.schedule or ""
        # first sight, or a schedule changed since its last tick (a version without one
        # clears it: CuelistStore.put): from now on, the past does not fire
        if state.last is None or state.schedule not in (None, schedule):
            reset = state.model_copy(update={"last": now, "schedule": schedule, "buffered": False})
            await self._save(name, reset)
            return None
        state.schedule = schedule
        fires_at = next_fire(schedule, state.last or now)
        if fires_at is None:  # none comes (stored before validation refused it, or its
            # years have gone by): passed over, said once a version
            if (name, version) not in self._never:
                self._never.add((name, version))
                log.error("schedule of %s has no next time (%r): it starts no run", name,
                          schedule)  # fmt: skip
            return None
        due = fires_at <= now
        if state.paused:
            if due:  # the tick passes: resuming starts nothing for the time paused
                state.last, state.buffered = now, False
                await self._save(name, state)
            return None
        if not due and not state.buffered:
            return None
        running = await self._running(state.run_id)
        if running and cuelist.overlap is not Overlap.ALLOW:
            if due and cuelist.overlap is Overlap.BUFFER_ONE:
                state.buffered, state.last = True, now
                await self._save(name, state)
            elif due:
                state.last, state.skipped = now, state.skipped + 1
                await self._save(name, state)
            return None
        if not await self.cuelists.listed(name, version):
            # deleted since it was read (another hub's API: this hub's copy is cached): a run
            # of it would hold no version a next leader could load
            return None
        run_id = self.new_run_id()
        taken = state.model_copy(update={"last": now, "run_id": run_id, "buffered": False})
        try:
            await self.start(name, version, run_id, [self.schedules.save_op(name, taken)])
        except (TransportError, StaleLeader):  # not known written: the next leader decides
            raise
        except CallboardError as exc:  # refused: the tick passes without a run
            log.error("schedule of %s: its run was refused: %s", name, exc)
            state.last, state.buffered = now, False
            await self._save(name, state)
            return None
        log.info("schedule started run %s of %s", run_id, name)
        return run_id

    async def _save(self, name: str, state: ScheduleState) -> None:
        await self.write([self.schedules.save_op(name, state)])

    async def _running(self, run_id: str | None) -> bool:
        if not run_id:
            return False
        run = await self.store.run(run_id)
        return run is not None and not run.status.done
