"""Cron schedules start runs; `overlap` decides what a tick does while the last run is going."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from callboard.embedded_cluster import EmbeddedCluster
from hub.engine.state import RunState
from hub.scheduler import Scheduler
from hub.store import CuelistStore, ScheduleStore, StateStore
from hub.store.layout import Op
from hub.store.schedules import ScheduleState
from protocols.canonical import canonical_json
from protocols.errors import NotFound, StaleLeader, Unreachable
from protocols.keys import Keys
from protocols.settings import Settings
from protocols.states import RunStatus
from protocols.transport import Redis, Storage
from protocols.validation import load_cuelist
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
T0 = 1_800_000_000.0  # a Unix time on a whole minute (…:00)


class Harness:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.cuelists = CuelistStore(Storage(client), keys)
        self.store = StateStore(Storage(client), keys)
        self.started: list[str] = []
        self.asked: list[str] = []  # every run id a start was asked for, in order
        # how the next starts go: "lost" (Redis fails before the run's write lands), "cut"
        # (the write lands, then the leader stops), "stale" (the leader lost its lease: the
        # write is refused), "refused" (the engine says no)
        self.faults: list[str] = []
        self.schedules = ScheduleStore(Storage(client), keys)
        self.scheduler = Scheduler(
            self.cuelists, self.store, self.schedules, self._start, self._write
        )

    async def _write(self, write: list[Op]) -> None:
        """As the driver writes a step's raw operations (a MULTI here)."""
        async with self.client.pipeline(transaction=True) as pipe:
            for op in write:
                pipe.execute_command(*op)
            await pipe.execute()

    async def _start(self, name: str, version: str, run_id: str, write: list[Op]) -> None:
        """As the driver starts a run: the run and `write` in one write (a MULTI here)."""
        self.asked.append(run_id)
        fault = self.faults.pop(0) if self.faults else None
        if fault == "lost":
            raise Unreachable("Redis went away")
        if fault == "stale":
            raise StaleLeader("STALE: the lease is another hub's")
        if fault == "refused":
            raise NotFound(f"no cuelist named {name}")
        self.started.append(run_id)
        run = RunState(run_id=run_id, cuelist=name, version=version, created_at=T0)
        await self.store.save_run(run)
        await self._write(write)
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


async def test_a_schedule_paused_before_it_exists_starts_paused(
    harness: Harness, keys: Keys
) -> None:
    plain = "cuelist: nightly\ncues:\n  - {id: A, target_agents: [a]}\n"
    cuelist, version = load_cuelist(plain)
    await harness.cuelists.put(cuelist, version, canonical_json(cuelist), plain)
    await harness.schedules.set_paused("nightly", True)  # nothing scheduled yet
    await harness.submit("allow")  # the version with a schedule comes later
    tick = harness.scheduler.tick
    assert await tick(T0) == [] and await tick(T0 + 61) == []  # stored paused: nothing
    assert (await harness.schedules.get("nightly")).paused  # first sight kept the pause
    await harness.schedules.set_paused("nightly", False)
    assert len(await tick(T0 + 125)) == 1


@pytest.mark.parametrize("fault", ["lost", "stale"])
async def test_a_tick_whose_write_did_not_land_fires_on_the_next_tick(
    harness: Harness, fault: str
) -> None:
    """The leader failed before the run's write landed (Redis went away, or its lease was
    another hub's): the tick is still due, and the next tick, on whichever hub leads, fires
    it; one run in all."""
    tick = await harness.seen("skip", fault)
    with pytest.raises((Unreachable, StaleLeader)):
        await tick(T0 + 61)
    assert harness.started == []
    [fired] = await tick(T0 + 62)
    assert harness.started == [fired]
    assert await tick(T0 + 63) == []  # taken: nothing more until the next one is due


async def test_a_tick_whose_write_landed_before_its_leader_stopped_is_not_fired_again(
    harness: Harness, keys: Keys
) -> None:
    tick = await harness.seen("allow", "cut")
    with pytest.raises(Unreachable):
        await tick(T0 + 61)
    assert await tick(T0 + 62) == []  # taken with its run: not asked for again
    [run_id] = harness.asked
    assert harness.started == [run_id]
    state = await ScheduleStore(Storage(harness.client), keys).get("nightly")
    assert (state.last, state.run_id) == (T0 + 61, run_id)
    assert len(await tick(T0 + 121)) == 1


async def test_a_refused_start_takes_the_tick_without_a_run_and_the_term_goes_on(
    harness: Harness,
) -> None:
    tick = await harness.seen("allow", "refused")
    assert await tick(T0 + 61) == []  # logged, not raised: the term goes on
    assert await tick(T0 + 62) == []  # and not tried again every tick
    assert len(harness.asked) == 1 and harness.started == []
    assert len(await tick(T0 + 121)) == 1


async def test_a_schedule_with_no_next_time_is_passed_over_and_the_others_fire(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A schedule stored when it had a next time may have none later (its last year gone
    by, or taken before validation refused it): its tick raised, which ended partition 0's
    term on every hub, every time, and no schedule after it in the list was looked at."""
    text = 'cuelist: aaa-never\nschedule: "* * * * *"\ncues:\n  - {id: A, target_agents: [a]}\n'
    valid, version = load_cuelist(text)
    never = valid.model_copy(update={"schedule": "0 0 30 2 *"})
    await harness.cuelists.put(never, version, canonical_json(never), text)
    await harness.submit("skip")  # "nightly", every minute, after it in the list
    tick = harness.scheduler.tick
    assert await tick(T0) == []
    assert len(await tick(T0 + 61)) == 1  # the other schedule fires; nothing raised
    assert len(await tick(T0 + 122)) == 0  # still running: skipped
    assert caplog.text.count("schedule of aaa-never has no next time") == 1  # said once


async def test_a_real_hub_takes_the_tick_in_its_runs_own_write(
    settings: Settings, keys: Keys, real_redis: Any
) -> None:
    """The hub's scheduler starts the tick's run through the driver: the schedule's state
    and the run land in one fenced write."""
    await _tick_taken_with_its_run(settings, real_redis, keys)


async def test_on_a_cluster_the_tick_is_taken_in_its_runs_own_write(
    settings: Settings, keys: Keys, redis_cluster: EmbeddedCluster, cluster_redis: Any
) -> None:
    """As above, the schedule's key in another slot than the partition's."""
    on_cluster = Settings(**{**settings.model_dump(), "redis_url": redis_cluster.url})
    await _tick_taken_with_its_run(on_cluster, cluster_redis, keys)


async def _tick_taken_with_its_run(settings: Settings, client: Any, keys: Keys) -> None:
    """The schedule was last taken at T0, in the future: the hub's own ticks, at the real
    time, find nothing due; the tick asked for at T0 + 61 fires through the driver."""
    harness = Harness(client, keys)
    await harness.submit("skip")
    await harness._write([harness.schedules.save_op("nightly", ScheduleState(last=T0))])
    async with running_hub(settings, lease_ms=1500) as hub:
        [run_id] = await hub.scheduler.tick(T0 + 61)
        run = await hub.store.run(run_id)
        assert run is not None and run.cuelist == "nightly"
        state = await hub.stores.schedules.get("nightly")
        assert (state.last, state.run_id) == (T0 + 61, run_id)


async def test_a_stale_leaders_skip_is_refused_by_the_fence(
    settings: Settings, keys: Keys, real_redis: Any
) -> None:
    """A leader whose lease another hub took ticks on: its skip (which writes back the run
    id it read, so a late one could put back an older run and lose the overlap's guard) is
    refused whole; the schedule stays as the new leader left it."""
    harness = Harness(real_redis, keys)
    await harness.submit("skip")
    run = RunState(run_id="r-new", cuelist="nightly", version="v", created_at=T0)
    await harness.store.save_run(run)  # the new leader's run, still going
    taken = ScheduleState(last=T0, run_id="r-new")
    await harness._write([harness.schedules.save_op("nightly", taken)])
    async with running_hub(settings, lease_ms=1500) as hub:
        await real_redis.set(keys.leader(), "another hub's fencing token", px=10_000)
        with pytest.raises(StaleLeader):
            await hub.scheduler.tick(T0 + 61)  # due, and its last run is going: a skip
    state = await harness.schedules.get("nightly")
    assert (state.last, state.run_id, state.skipped) == (T0, "r-new", 0)


async def test_a_version_deleted_while_the_tick_reads_it_starts_nothing(
    harness: Harness, keys: Keys
) -> None:
    """Deleted from another hub's API as the tick reads it: the tick raised NotFound (ending
    partition 0's term, again each term), or started a run of the version it had cached,
    which no next leader could load."""
    await harness.seen("skip", "none")
    await harness.submit("allow")  # a second version, the latest: the tick reads and caches it
    await harness.scheduler.tick(T0 + 1)
    other = CuelistStore(Storage(harness.client), keys)  # another hub's API
    real_latest = harness.cuelists.latest

    async def latest_then_deleted(name: str) -> str | None:
        found = await real_latest(name)
        if found is not None:
            await other.delete(name, found)  # the first version stays: so does the schedule
        return found

    harness.cuelists.latest = latest_then_deleted  # type: ignore[method-assign]
    assert await harness.scheduler.tick(T0 + 120) == []
    assert harness.asked == []


async def _put_nightly(h: Harness, schedule: str | None, description: str = "") -> None:
    text = f"cuelist: nightly\ndescription: '{description}'\n"
    text += f'schedule: "{schedule}"\n' if schedule else ""
    text += "cues:\n  - {id: A, target_agents: [a]}\n"
    cuelist, version = load_cuelist(text)
    await h.cuelists.put(cuelist, version, canonical_json(cuelist), text)


async def test_a_schedule_taken_out_and_put_back_starts_from_then(harness: Harness) -> None:
    """A version without a schedule, then the schedule put back days later: its last tick
    was kept, and the first tick after fired at once, off schedule (found by review: a
    03:00 schedule put back at 08:00 started a run at 08:00)."""
    tick, day = harness.scheduler.tick, 86_400
    await _put_nightly(harness, "0 3 * * *")
    assert await tick(T0) == []  # first sight
    await _put_nightly(harness, None)
    assert await tick(T0 + 3600) == []
    await _put_nightly(harness, "0 3 * * *", "again")  # put back, three days later
    assert await tick(T0 + 3 * day) == []  # seen anew: the past does not fire
    assert len(await tick(T0 + 4 * day)) == 1  # the next 03:00 does


async def test_a_changed_schedule_starts_from_the_change(harness: Harness) -> None:
    """From daily to hourly: the hourly schedule's ticks since the daily one's last fire
    are the past; they fired at once before."""
    tick = harness.scheduler.tick
    await _put_nightly(harness, "0 3 * * *")
    assert await tick(T0) == []
    await _put_nightly(harness, "0 * * * *", "hourly")
    assert await tick(T0 + 7200) == []  # seen anew under its new schedule
    assert len(await tick(T0 + 7200 + 3600)) == 1


async def test_an_old_version_stored_again_leaves_the_schedule_be(harness: Harness) -> None:
    """Storing again a version without a schedule that is not the latest (it exists: the
    latest stays) must not clear the latest's tick: a missed 03:00 did not fire."""
    tick, day = harness.scheduler.tick, 86_400
    await _put_nightly(harness, None, "old")
    await _put_nightly(harness, "0 3 * * *")
    assert await tick(T0) == []  # first sight at 08:00
    await _put_nightly(harness, None, "old")  # stored again: still not the latest
    assert len(await tick(T0 + day)) == 1  # the 03:00 missed meanwhile fires


async def test_a_put_whose_tick_reset_failed_resets_it_when_sent_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put's transaction landed, the schedule's reset (a second call) failed: the put
    answered an error, and sent again it was not new, so the reset never came and the
    schedule, put back, fired at once, off schedule."""
    tick, day = harness.scheduler.tick, 86_400
    await _put_nightly(harness, "0 3 * * *")
    assert await tick(T0) == []
    db = harness.cuelists.db
    command = db.command

    async def failing(*args: Any) -> Any:
        if args[0] == "HDEL":
            raise Unreachable("the reset's reply was lost")
        return await command(*args)

    monkeypatch.setattr(db, "command", failing)
    with pytest.raises(Unreachable):
        await _put_nightly(harness, None)
    monkeypatch.setattr(db, "command", command)
    await _put_nightly(harness, None)  # the operator sends it again
    await _put_nightly(harness, "0 3 * * *", "again")  # put back, three days later
    assert await tick(T0 + 3 * day) == []  # seen anew: the past does not fire
    assert len(await tick(T0 + 4 * day)) == 1
