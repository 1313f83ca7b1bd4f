"""A run whose first write never landed (refused: the lease was lost between the start's
step and its write) is not a run whose state Redis lost. Before, the next term failed it
("Redis lost its data") from the last term's memory, and the StartRun served again
answered with that failed run: an operator's run ended as it started, on a lease blip
(CI saw it in tests/hub/test_partitions.py on a loaded machine). Now the command served
again makes the run, once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hub import commands as c
from hub.engine.outbox import Outbox
from protocols.canonical import canonical_json
from protocols.errors import StaleLeader
from protocols.ids import new_id
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
WAITS = "cuelist: unwritten\ncues:\n  - {id: A, target_agents: [nobody], conditions: [never]}\n"


async def test_a_start_whose_write_was_refused_is_made_again_not_failed_as_lost(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_hub(settings, lease_ms=1500) as hub:
        parsed, version = load_cuelist(WAITS)
        await hub.cuelists.put(parsed, version, canonical_json(parsed), WAITS)
        run_id = new_id()
        store, real = hub.driver.store, hub.driver.store.commit
        refused: list[str] = []

        async def commit(out: Outbox, *args: Any, **kw: Any) -> Any:
            if run_id in out.started and not refused:
                refused.append(run_id)
                raise StaleLeader("the lease moved (this test)")
            return await real(out, *args, **kw)

        store.commit = commit  # type: ignore[method-assign]
        caplog.set_level(logging.ERROR)
        start = c.StartRun(cuelist="unwritten", version=version, run_id=run_id)
        reply = await hub.commands.call(start, timeout_s=30)
        assert refused == [run_id]  # its first write was refused, the command served again
        assert reply.run_id == run_id and reply.status == "holding", reply
        run = await hub.store.run(run_id)
        assert run is not None and run.status.value == "holding"
        assert run.cues["A"].state.value == "waiting"
        assert "state is gone" not in caplog.text
