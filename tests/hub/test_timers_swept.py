"""Timers outlive their runs: a budget's wall_s timers (a week away) stayed after the run
ended, and each budget change added two more, copies of the last. Past TIMERS_SWEPT_PAST
held, those of runs no longer running, and copies, are swept out."""

from __future__ import annotations

import pytest

from hub import commands as c
from hub.engine import driver as driver_module
from protocols.settings import Settings
from tests.hub.running import running_hub, start

pytestmark = pytest.mark.redis
WALLED = """
cuelist: walled
budget: {wall_s: 604800}
cues:
  - {id: A, target_agents: [nobody], ack_timeout_s: 600}
"""


async def test_timers_of_an_ended_run_and_copies_are_swept(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "TIMERS_SWEPT_PAST", 0)
    monkeypatch.setattr(driver_module, "TIMERS_SWEEP_EVERY_S", 0.0)
    async with running_hub(settings, lease_ms=2000) as hub:
        await start(hub, WALLED, "run-walled")
        for tokens in range(5):  # the same wall_s each time: its two timers again
            change = c.ChangeBudget(run_id="run-walled", changes={"tokens": 1000 + tokens})
            await hub.commands.call(change, 20)
        held = [t for t in hub.driver._timers if t.run_id == "run-walled"]
        assert len(held) == len(set(held)) == 3  # the WARNING's deadline, wall_s's two
        await hub.commands.call(c.Cancel(run_id="run-walled"), 20)
        assert not [t for t in hub.driver._timers if t.run_id == "run-walled"]
