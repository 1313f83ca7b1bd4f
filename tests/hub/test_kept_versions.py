"""The leader keeps a bounded number of cuelist versions parsed and planned. Before, every
version it ever ran stayed in memory (its model and its plan), deleted ones too: a review
measured 1.3 MiB a 300-cue version, 78.7 MiB after 60 versions stored, run and deleted.
A version dropped from memory is read and planned again when a run needs it."""

from __future__ import annotations

import pytest

from hub.engine import driver
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
