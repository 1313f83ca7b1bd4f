"""A replica keeps a bounded number of Cues; the ones with something in hand stay. Found by
review: Cues were dropped oldest first, so a long GO whose Cue 1,024 warnings of other
cues had pushed out ran on past its standdown (neither the standdown read here nor its
marker could call it off) and reported a completion after it."""

from __future__ import annotations

import asyncio

import pytest

from protocols.codec import make
from protocols.messages import MessageType as M
from protocols.payloads import CoordStanddown, CoordWarning
from specialists import Cue, Specialist, dispatch
from tests.specialists.conftest import AGENT, RUN, HubSide, Starter


class Long(Specialist):
    kind = "long"

    async def execute(self, cue: Cue) -> dict[str, str]:
        if cue.action.get("long"):
            await asyncio.Event().wait()  # waits on something outside: a standdown ends it
        return {"done": cue.cue_id}


async def test_a_long_go_pushed_past_the_cues_held_is_still_stood_down(
    hub: HubSide, start: Starter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "CUES_HELD", 8)
    await start(Long, "r1", concurrency=2)
    await hub.go("LONG", long=True)
    await hub.wait(M.STATUS_STARTED, "LONG")
    warnings = [
        (hub.keys.inbox(AGENT), make(M.COORD_WARNING, CoordWarning(cue_id=f"W{i}",
         target_agents=[AGENT]), run_id=RUN, cue_id=f"W{i}", target_agents=(AGENT,)))
        for i in range(20)
    ]  # fmt: skip
    await hub.t.publish_many(warnings)
    await hub.wait(M.ACK_WARNING, n=20)
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="LONG", reason="go timeout"))
    (failed,) = await hub.wait(M.STATUS_FAILED, "LONG")
    assert "stood down" in failed.payload.error
    assert not await hub.of(M.STATUS_COMPLETED, "LONG")


class SlowPrep(Long):
    kind = "slow-prep"

    async def prepare(self, cue: Cue) -> None:
        if cue.action.get("slow"):
            await asyncio.Event().wait()  # a download, a warm-up...


async def test_a_go_made_when_every_older_cue_is_in_hand_is_still_stood_down(
    hub: HubSide, start: Starter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Cue kept has a preparation running (warnings are acked at once): the one left
    to drop was the GO's own, made that moment, and its standdown found nothing (found by
    reviewing the fix above)."""
    monkeypatch.setattr(dispatch, "CUES_HELD", 4)
    replica = await start(SlowPrep, "r1", concurrency=2)
    for i in range(4):
        await hub.warning(f"W{i}", slow=True)
    await hub.wait(M.ACK_WARNING, n=4)
    await hub.go("LONG", long=True)
    await hub.wait(M.STATUS_STARTED, "LONG")
    assert (RUN, "LONG", 1) in replica._runtime.dispatch.cues
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="LONG", reason="go timeout"))
    (failed,) = await hub.wait(M.STATUS_FAILED, "LONG")
    assert "stood down" in failed.payload.error
