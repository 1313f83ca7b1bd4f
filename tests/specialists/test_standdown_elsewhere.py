"""A standdown read by another replica of the agent ends a readiness check and a
preparation on this one too (through the stood-down marker, every claim interval), as it
ended work running. Found by review: a check that never returns held its STANDBY entry for
ever (renewed, so no replica took it over), the standdown hook never ran, a preparation
went on holding what it took, and three such filled the replica's read budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocols.keys import Keys
from protocols.messages import MessageType as M
from protocols.payloads import CoordStanddown
from protocols.settings import Settings
from protocols.transport import Transport
from specialists import Cue, Specialist
from specialists.work import RUNNING
from tests.helpers import eventually
from tests.specialists.conftest import AGENT, HubSide, Starter


class Deaf(Transport):
    """Once `deaf` is set, its reads take nothing: the other replica reads every entry."""

    deaf = asyncio.Event()
    turned = asyncio.Event()  # a read has come back empty since `deaf` was set

    async def read_group(self, streams: Any, group: str, consumer: str, **kw: Any) -> Any:
        if not self.deaf.is_set():
            return await super().read_group(streams, group, consumer, **kw)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), kw["block_ms"] / 1000)
        self.turned.set()
        return await super().read_group([], group, consumer, **kw)


class Hangs(Specialist):
    kind = "hangs"
    released: list[tuple[str, str]] = []
    cancelled: list[str] = []

    async def prepare(self, cue: Cue) -> None:
        if cue.action.get("long_prepare"):
            try:
                await asyncio.Event().wait()  # a reservation, a download...
            except asyncio.CancelledError:
                self.cancelled.append(cue.cue_id)
                raise

    async def ready(self, cue: Cue) -> bool:
        await asyncio.Event().wait()  # a readiness check that never returns
        return True

    async def standdown(self, cue: Cue, reason: str) -> None:
        self.released.append((self.replica, cue.cue_id))


@pytest.fixture
async def deaf(settings: Settings, keys: Keys) -> AsyncIterator[Deaf]:
    """Closed after the replicas using it stop (requested before `start`)."""
    transport = Deaf.from_url(settings.redis_url, keys)
    Deaf.deaf, Deaf.turned = asyncio.Event(), asyncio.Event()
    yield transport
    await transport.close()


async def test_a_standdown_read_elsewhere_ends_a_check_and_a_preparation(
    settings: Settings, keys: Keys, deaf: Deaf, hub: HubSide, start: Starter
) -> None:
    fast = settings.model_copy(update={"block_ms": 200, "claim_interval_ms": 200})
    Hangs.released, Hangs.cancelled = [], []
    a = await start(Hangs, "ra", fast, transport=deaf)
    held = a._runtime.dispatch
    await hub.warning("CUE-1")
    await hub.standby("CUE-1")  # ra: its readiness check never returns
    await hub.warning("CUE-2", long_prepare=True)  # ra: its preparation goes on
    await eventually(lambda: len(held.checking) == 1 and len(held.preps) == 1, 10)
    Deaf.deaf.set()
    await eventually(Deaf.turned.is_set, 10, message="ra reads nothing now")
    await start(Hangs, "rb", fast)
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-1", reason="standby timeout"))
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-2", reason="run cancelled"))
    await eventually(lambda: not held.checking and not held.preps, 10, message="called off")
    assert ("ra", "CUE-1") in Hangs.released and ("ra", "CUE-2") in Hangs.released
    assert Hangs.cancelled == ["CUE-2"]
    pending = await hub.t._client.xpending_range(keys.inbox(AGENT), AGENT, "-", "+", 10)
    assert pending == []  # the STANDBY entry ra held is settled


class Work(Specialist):
    kind = "work"
    executed: list[tuple[str, str]] = []
    release = asyncio.Event()

    async def execute(self, cue: Cue) -> dict[str, str]:
        self.executed.append((self.replica, cue.cue_id))
        if cue.action.get("busy"):
            await self.release.wait()
        return {"by": self.replica}


async def test_a_copy_waiting_for_a_slot_is_not_run_once_another_replica_settled_it(
    settings: Settings, keys: Keys, deaf: Deaf, hub: HubSide, start: Starter
) -> None:
    """A GO waiting for a work slot read its markers only before the wait: a copy of it
    (the hub's XADD sent again) run by another replica meanwhile, its outcome landed, was
    run again here once the slot came free (found by review of the SDK). ra's claim on X
    keeps a copy from running elsewhere while it waits (tests/specialists/test_replicas.py);
    here it has lapsed, as after a stall past its lease, so rb runs the copy."""
    fast = settings.model_copy(update={"block_ms": 200, "min_idle_ms": 30_000})
    Work.executed, Work.release = [], asyncio.Event()
    a = await start(Work, "ra", fast, transport=deaf)  # one slot
    await hub.go("BUSY", busy=True)
    await hub.wait(M.STATUS_STARTED, "BUSY")
    go = await hub.go("X")  # ra reads it, finds no marker, waits for its slot
    await eventually(lambda: a._runtime.waiting == 1, 10, message="X waits for a slot")
    Deaf.deaf.set()
    await eventually(Deaf.turned.is_set, 10, message="ra reads nothing now")
    await start(Work, "rb", fast)
    assert await hub.t._client.delete(keys.done(AGENT, f"run-1:X:1:{RUNNING}")) == 1
    await hub.t.publish(keys.inbox(AGENT), go)  # a copy of X's GO: rb runs it
    await hub.wait(M.STATUS_COMPLETED, "X")
    Work.release.set()  # ra's slot comes free
    await hub.wait(M.STATUS_COMPLETED, "BUSY")
    await eventually(lambda: _settled(hub), 10, message="ra settled its copy of X")
    assert Work.executed.count(("ra", "X")) == 0 and Work.executed.count(("rb", "X")) == 1
    assert len(await hub.of(M.STATUS_COMPLETED, "X")) == 1


async def _settled(hub: HubSide) -> bool:
    return await hub.pending() == 0
