"""One attempt across an agent's replicas: a standdown handled by one calls off the work on
another, a copy of a settled attempt runs nowhere, a claim is renewed only while it is ours."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import pytest

from protocols.messages import MessageType
from protocols.payloads import CoordStanddown
from protocols.settings import Settings
from specialists.work import RUNNING
from tests.helpers import eventually
from tests.specialists.conftest import AGENT, DeafTransport, HubSide, Starter
from tests.specialists.sample import Scripted

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("scripted")]

M = MessageType
STANDDOWN = CoordStanddown(cue_id="CUE-1", reason="run cancelled")


async def test_a_standdown_handled_by_another_replica_calls_the_work_off(
    deaf: DeafTransport, start: Starter, hub: HubSide
) -> None:
    """The hub writes one standdown to the agent's inbox, and one replica reads it: here r2,
    while r1 runs the GO. r2 marks the attempt stood down; r1 finds the marker at its next
    claim tick, stops the work and reports it stood down, never completed. On the code
    before, r2 found nothing of the cue's and only acked; r1 completed the called-off work."""
    await start(Scripted, "r1", transport=deaf)
    await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    deaf.deaf.set()
    await eventually(lambda: deaf.deaf_reads, message="r1's read in flight is over")
    await start(Scripted, "r2")
    await hub.send(M.COORD_STANDDOWN, STANDDOWN)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert (failed.payload.replica, failed.payload.error) == ("r1", "stood down: run cancelled")
    assert Scripted.running == 0  # interrupted, not left running
    assert Scripted.stood_down == ["CUE-1"]  # r1's hook released the cue
    await eventually(lambda: _none_pending(hub), message="GO and standdown acknowledged")
    assert await hub.of(M.STATUS_COMPLETED) == []


async def test_a_go_reclaimed_after_its_standdown_is_not_run(
    start: Starter, hub: HubSide, fast: Settings
) -> None:
    """A replica read the GO and died; the standdown came next, and the replica that took
    it over read the standdown before the GO was idle long enough to be reclaimed. The GO
    is then reported stood down, and not executed. On the code before, it ran and completed
    after the cue was called off."""
    inbox = hub.keys.inbox(AGENT)
    await hub.t.ensure_group(inbox, AGENT)
    await hub.go("CUE-1", plain=True)
    [_] = await hub.t.read_group([inbox], AGENT, "ghost", block_ms=None)
    await hub.send(M.COORD_STANDDOWN, STANDDOWN)
    await start(Scripted, "r1", settings_=fast)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == "stood down: run cancelled"
    await eventually(lambda: _none_pending(hub), message="GO and standdown acknowledged")
    assert ("execute", "CUE-1") not in Scripted.calls
    assert await hub.of(M.STATUS_COMPLETED) == []


async def test_a_copy_of_a_settled_go_as_a_new_entry_is_not_run_again(
    start: Starter, hub: HubSide
) -> None:
    """A GO written twice (two entries, the same attempt) reaching a replica that does not
    remember the first (restarted, or another) is acknowledged without running: its
    done-marker says the attempt has its outcome. On the code before, the marker was read
    only for an entry delivered more than once, and the copy ran and completed again."""
    r1 = await start(Scripted, "r1")
    go = await hub.go("CUE-1", plain=True)
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    r1.stop("restart")
    await hub.wait(M.STATUS_OFFLINE)
    await start(Scripted, "r2")
    await hub.t.publish(hub.keys.inbox(AGENT), go)  # the same GO, a new entry
    await hub.warning("CUE-2")  # answered after the copy was handled
    await hub.wait(M.ACK_WARNING, "CUE-2")
    await eventually(lambda: _none_pending(hub), message="the copy acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert len(await hub.of(M.STATUS_COMPLETED, "CUE-1")) == 1


async def test_a_renewal_does_not_take_back_an_entry_another_replica_reclaimed(
    deaf: DeafTransport, start: Starter, hub: HubSide
) -> None:
    """r1 stalled past the claim window; another replica reclaimed the GO and works on it.
    r1's renewals go on for the entries still its own and leave that one where it is. On
    the code before, the renewal (XCLAIM, min-idle 0) took it back from the replica that
    now ran it, and both went on to run it and report it."""
    await start(Scripted, "r1", transport=deaf)
    await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    inbox = hub.keys.inbox(AGENT)
    [taken] = await hub.t.reclaim(inbox, AGENT, "r2", min_idle_ms=0)  # r1 seemed dead
    renewals = deaf.renewals
    await eventually(lambda: deaf.renewals >= renewals + 2, message="r1 renewed since")
    assert await _owners(hub) == {taken.entry_id: "r2"}
    assert Scripted.release is not None
    Scripted.release.set()  # r1's work ends (the double run a stall leaves: PROTOCOL.md)


async def test_a_copy_read_by_another_replica_while_the_go_runs_is_not_run(
    deaf: DeafTransport, start: Starter, hub: HubSide
) -> None:
    """The hub's XADD of a GO sent again (its reply lost) is a second entry of the same
    attempt; r2 reads it while r1 runs the first. r2 finds the attempt claimed by the
    other entry and acks its copy; r1's work completes once. On the code before, no
    marker said the attempt was running: r2 ran it as well, and both reported it."""
    await start(Scripted, "r1", transport=deaf)
    go = await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    deaf.deaf.set()
    await eventually(lambda: deaf.deaf_reads, message="r1's read in flight is over")
    await start(Scripted, "r2")
    await hub.t.publish(hub.keys.inbox(AGENT), go)  # the same GO, a new entry
    await hub.warning("CUE-2")  # read by r2 after the copy
    await hub.wait(M.ACK_WARNING, "CUE-2")
    await eventually(lambda: _pending_is(hub, 1), message="r2 acked its copy; r1's GO held")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    await eventually(lambda: _none_pending(hub), message="r1's GO acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert [m.payload.replica for m in await hub.of(M.STATUS_COMPLETED, "CUE-1")] == ["r1"]
    claims = [k async for k in hub.t._client.scan_iter(match="*__running__")]
    assert claims == []  # deleted with the outcome


async def test_the_go_of_a_replica_that_died_holding_its_claim_is_run_by_another(
    start: Starter, hub: HubSide, fast: Settings
) -> None:
    """A replica read the GO, claimed the attempt and died; a copy came meanwhile. The
    replica that reads the copy acks it (the claim is the other entry's), then reclaims
    the dead replica's entry and runs it: its claim is that entry's, so it is taken over.
    Nothing is lost and the attempt runs once."""
    inbox = hub.keys.inbox(AGENT)
    await hub.t.ensure_group(inbox, AGENT)
    go = await hub.go("CUE-1", plain=True)
    [held] = await hub.t.read_group([inbox], AGENT, "ghost", block_ms=None)
    claim = hub.keys.done(AGENT, f"run-1:CUE-1:1:{RUNNING}")
    await hub.t._client.set(claim, held.entry_id, px=60_000)  # the dead replica's, unexpired
    await hub.t.publish(inbox, go)  # the copy
    await start(Scripted, "r2", settings_=fast)
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.replica == "r2"
    await eventually(lambda: _none_pending(hub), message="both entries acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert await hub.t._client.exists(claim) == 0


async def _pending_is(hub: HubSide, n: int) -> bool:
    return await hub.pending() == n


async def _owners(hub: HubSide) -> dict[str, str]:
    rows = await hub.t._client.xpending_range(hub.keys.inbox(AGENT), AGENT, "-", "+", 10)
    return {r["message_id"].decode(): r["consumer"].decode() for r in rows}


async def _none_pending(hub: HubSide) -> bool:
    return await hub.pending() == 0
