"""The leader keeps a bounded number of cuelist versions parsed and planned. Before, every
version it ever ran stayed in memory (its model and its plan), deleted ones too: a review
measured 1.3 MiB a 300-cue version, 78.7 MiB after 60 versions stored, run and deleted.
A version dropped from memory is read and planned again when a run needs it."""

from __future__ import annotations

from typing import Any

import pytest

from hub.engine import driver
from hub.engine.plan import Plan
from hub.store import cuelists
from protocols.canonical import canonical_json
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis


async def test_versions_run_and_deleted_do_not_stay_in_memory(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "PLANS_KEPT", 3)
    monkeypatch.setattr(cuelists, "CUELISTS_KEPT", 3)
    async with running_hub(settings) as hub:
        versions = []
        for i in range(8):
            text = (
                f"cuelist: kept\ndescription: v{i}\ncues:\n  - {{id: A, target_agents: [nobody]}}\n"
            )
            parsed, version = load_cuelist(text)
            await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
            await hub.driver.start_run("kept", version, f"run-{i}", {}, True)  # a dry run
            versions.append(version)
        assert len(hub.driver._plans) <= 3 and len(hub.cuelists._cache) <= 3
        # the first version, long dropped from memory, still runs: read and planned again
        await hub.driver.start_run("kept", versions[0], "run-again", {}, True)

        async def dry_done() -> bool:
            run = await hub.store.run("run-again")
            return run is not None and run.status.done

        await eventually(dry_done, 10, message="the dry run of the first version completed")


async def test_runs_of_more_versions_than_kept_build_each_plan_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More versions in use than plans kept: a term's load went through the runs in time
    order, versions interleaved, and built a plan for every run, each holding its own copy
    (found by review: 70 versions of 5 runs built 350). A run's plan is shared now."""
    monkeypatch.setattr(driver, "PLANS_KEPT", 2)
    builds: list[str] = []
    build = Plan.build

    def counted(cuelist: Any, version: str) -> Plan:
        builds.append(version)
        return build(cuelist, version)

    monkeypatch.setattr(Plan, "build", counted)
    async with running_hub(settings, lease_ms=1000) as hub:
        versions = []
        for i in range(4):
            cue = "{id: A, target_agents: [nobody], conditions: [never]}"
            text = f"cuelist: kept\ndescription: v{i}\ncues:\n  - {cue}\n"
            parsed, version = load_cuelist(text)
            await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
            versions.append(version)
        for n in range(12):  # interleaved: v0, v1, v2, v3, v0...
            await hub.driver.start_run("kept", versions[n % 4], f"run-{n:02}", {}, False)
        builds.clear()
        term = hub.leadership.token
        hub.partitions[0].yielding.set()  # a new term loads the 12 runs again
        await eventually(lambda: hub.leading.is_set() and hub.leadership.token != term, 15)
        assert sorted(builds) == sorted(versions)  # once each, not once a run
        plans = {id(p) for p in hub.driver.engine.plans.values()}
        assert len(plans) == 4


async def test_the_scheduler_reads_no_cuelist_again_each_tick(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More cuelists than versions kept: every tick read and parsed every cuelist again
    (found by review: 260 cuelists, 942 ms a tick on the loop, against 31 ms for 250)."""
    monkeypatch.setattr(cuelists, "CUELISTS_KEPT", 2)
    async with running_hub(settings) as hub:
        for i in range(5):
            cue = "{id: A, target_agents: [a]}"
            text = f'cuelist: tick-{i}\nschedule: "0 3 * * *"\ncues:\n  - {cue}\n'
            parsed, version = load_cuelist(text)
            await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
        await hub.scheduler.tick(1_800_000_000.0)
        reads: list[str] = []
        get = hub.cuelists.get

        async def counted(name: str, version: str) -> Any:
            reads.append(name)
            return await get(name, version)

        monkeypatch.setattr(hub.cuelists, "get", counted)
        await hub.scheduler.tick(1_800_000_060.0)
        assert reads == []
