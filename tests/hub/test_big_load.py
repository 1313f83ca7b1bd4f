"""A term that loads many active runs keeps its lease while it loads: the load of a big
partition outlasting the lease had its last (fenced) write refused, on every hub in turn."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hub import commands as c
from hub.service import Hub, HubSettings
from protocols.canonical import canonical_json
from protocols.ids import new_id
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.helpers import eventually

pytestmark = pytest.mark.redis
RUNS = 8_000  # about 3 s to load here, 1.5 times the lease
LEASE_MS = 2_000  # 1,500 lost the lease to a stall of the loaded, slow machine (CI, twice)
WAITING = "cuelist: waiting\ncues:\n" + "".join(
    f"  - {{id: C{i}, target_agents: [nobody]}}\n" for i in range(5)
)


def _hub(settings: Settings, hub_id: str) -> Hub:
    return Hub(HubSettings(**{**settings.model_dump(), "hub_id": hub_id, "lease_ms": LEASE_MS}))


async def _leading(hub: Hub) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(hub.run(stop))
    await eventually(lambda: hub.leading.is_set(), 60, message=f"{hub.hub_id} leads")
    return stop, task


async def test_a_partition_of_many_runs_is_led_on_the_first_load(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    first = _hub(settings, "hub-a")
    stop, task = await _leading(first)
    parsed, version = load_cuelist(WAITING)
    await first.cuelists.put(parsed, version, canonical_json(parsed), WAITING)
    for _ in range(0, RUNS, 250):
        start = c.StartRun(cuelist="waiting", version=version, run_id="")
        await asyncio.gather(*(
            first.commands.call(start.model_copy(update={"run_id": new_id()}), timeout_s=60)
            for _ in range(250)
        ))  # fmt: skip
    stop.set()
    await task
    await first.close()
    caplog.clear()
    caplog.set_level(logging.WARNING)
    second = _hub(settings, "hub-b")
    stop, task = await _leading(second)
    try:
        assert len(second.partitions[0].driver.engine.runs) == RUNS
        assert "could not load" not in caplog.text  # its first load led, none was refused
    finally:
        stop.set()
        await task
        await second.close()
