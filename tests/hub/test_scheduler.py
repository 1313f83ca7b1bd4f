"""Cron schedules start runs; `overlap` decides what a tick does while the last run is going."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from hub.engine.state import RunState
from hub.scheduler import Scheduler
from hub.store import CuelistStore, ScheduleStore, StateStore
from protocols.canonical import canonical_json
from protocols.errors import NotFound, Unreachable
from protocols.keys import Keys
from protocols.states import RunStatus
from protocols.transport import Redis, Storage
from protocols.validation import load_cuelist

pytestmark = pytest.mark.redis
T0 = 1_800_000_000.0  # a Unix time on a whole minute (…:00)


class Harness:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.cuelists = CuelistStore(Storage(client), keys)
        self.store = StateStore(Storage(client), keys)
        self.started: list[str] = []
        self.asked: list[str] = []  # every run id a start was asked for, in order
        # how the next starts go: "lost" (Redis fails before the run is written), "cut"
        # (the run is written, then the leader stops), "refused" (the engine says no)
        self.faults: list[str] = []
        self.scheduler = Scheduler(
            self.cuelists, self.store, ScheduleStore(Storage(client), keys), self._start
        )

    async def _start(self, name: str, version: str, run_id: str) -> None:
        self.asked.append(run_id)
        fault = self.faults.pop(0) if self.faults else None
        if fault == "lost":
            raise Unreachable("Redis went away")
        if fault == "refused":
            raise NotFound(f"no cuelist named {name}")
        self.started.append(run_id)
        run = RunState(run_id=run_id, cuelist=name, version=version, created_at=T0)
        await self.store.save_run(run)
        if fault == "cut":
            raise Unreachable("Redis went away after the run was written")

    async def submit(self, overlap: str) -> None:
        text = f'cuelist: nightly\nschedule: "* * * * *"\noverlap: {overlap}\n'
        text += "cues:\n  - {id: A, target_agents: [a]}\n"
        cuelist, version = load_cuelist(text)
        await self.cuelists.put(cuelist, version, canonical_json(cuelist), text)

    async def seen(self, overlap: str, fault: str) -> Callable[[float], Awaitable[list[str]]]:
        """The cuelist submitted and first seen at T0; its next start goes as `fault`."""
        await self.submit(overlap)
        await self.scheduler.tick(T0)
        self.faults[:] = [fault]
        return self.scheduler.tick

    async def finish_last(self) -> None:
        run = await self.store.run(self.started[-1])
        assert run is not None
        run.status = RunStatus.SUCCESS
        await self.store.save_run(run)


@pytest.fixture
async def harness(real_redis: Any, keys: Keys) -> AsyncIterator[Harness]:
    yield Harness(real_redis, keys)


async def test_schedule_starts_runs_and_skips_overlaps(harness: Harness) -> None:
    await harness.submit("skip")
    tick = harness.scheduler.tick
    assert await tick(T0) == []  # first sight: nothing from the past fires
    assert await tick(T0 + 30) == []
    (first,) = await tick(T0 + 61)
    assert await tick(T0 + 125) == []  # still running: skipped, not queued
    await harness.finish_last()
    assert await tick(T0 + 150) == []  # the skipped tick is gone
    (second,) = await tick(T0 + 185)
    assert harness.started == [first, second]


async def test_buffer_one_keeps_one_tick_for_when_the_run_ends(harness: Harness) -> None:
    await harness.submit("buffer_one")
    tick = harness.scheduler.tick
    await tick(T0)
    await tick(T0 + 61)
    assert await tick(T0 + 125) == []  # buffered
    assert await tick(T0 + 185) == []  # still one buffered, not two
    await harness.finish_last()
    assert len(await tick(T0 + 190)) == 1  # the buffered tick, at once
    await harness.finish_last()
    assert await tick(T0 + 200) == []  # nothing else was kept


async def test_a_paused_schedule_starts_nothing_and_resumes_without_making_up(
    harness: Harness, keys: Keys
) -> None:
    schedules = ScheduleStore(Storage(harness.client), keys)
    await harness.submit("allow")
    tick = harness.scheduler.tick
    await tick(T0)
    await schedules.set_paused("nightly", True)
    assert await tick(T0 + 61) == [] and await tick(T0 + 125) == []  # paused: nothing
    assert (await schedules.get("nightly")).paused
    await schedules.set_paused("nightly", False)
    assert await tick(T0 + 130) == []  # the ticks missed while paused are not made up
    assert len(await tick(T0 + 185)) == 1  # the next one starts a run
    assert not (await schedules.get("nightly")).paused  # the scheduler's saves kept it


async def test_a_ticks_run_lost_with_its_leader_is_started_by_the_next_tick_once(
    harness: Harness, keys: Keys
) -> None:
    """The leader saved the tick and failed before its run was written (Redis went away,
    the term ended): the next tick, on whichever hub leads, starts that run, with its id,
    though no tick is due; then nothing more until the next one is."""
    tick = await harness.seen("skip", "lost")
    with pytest.raises(Unreachable):
        await tick(T0 + 61)
    [asked] = harness.asked
    assert harness.started == []
    assert await tick(T0 + 62) == [asked]  # not due by the clock: the lost run, at once
    assert harness.started == [asked]
    assert not (await ScheduleStore(Storage(harness.client), keys).get("nightly")).starting
    assert await tick(T0 + 63) == []
    await harness.finish_last()
    assert len(await tick(T0 + 121)) == 1  # the next tick as usual
    assert len(harness.started) == 2


async def test_a_ticks_run_written_before_its_leader_stopped_is_not_started_again(
    harness: Harness,
) -> None:
    tick = await harness.seen("allow", "cut")
    with pytest.raises(Unreachable):
        await tick(T0 + 61)
    assert await tick(T0 + 62) == []  # it exists: not asked for again
    assert len(harness.asked) == 1 and len(harness.started) == 1
    assert len(await tick(T0 + 121)) == 1


async def test_a_refused_start_drops_the_ticks_run_and_does_not_end_the_term(
    harness: Harness,
) -> None:
    tick = await harness.seen("allow", "refused")
    assert await tick(T0 + 61) == []  # logged, not raised: the term goes on
    assert await tick(T0 + 62) == []  # and not tried again every tick
    assert len(harness.asked) == 1 and harness.started == []
    assert len(await tick(T0 + 121)) == 1
