"""The SDK's wire behaviour, with replicas in this process and the test in the hub's place."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocols.codec import decode, make
from protocols.errors import OutOfMemory
from protocols.messages import MessageType
from protocols.payloads import (
    BroadcastNotice,
    BroadcastPause,
    BroadcastResume,
    BroadcastShutdown,
    CoordStanddown,
    HandoffContext,
    StatusRequest,
    TaskAssign,
    TaskHandoff,
    TaskInput,
)
from protocols.settings import Settings
from protocols.transport import Transport, WriteAhead
from specialists import Cue, Specialist
from tests.helpers import eventually, run_out_of_memory
from tests.specialists.conftest import AGENT, RUN, HubSide, Starter
from tests.specialists.sample import Scripted

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("scripted")]

M = MessageType


async def test_online_announces_replica_kind_and_concurrency(start: Starter, hub: HubSide) -> None:
    await start(Scripted, "r1", concurrency=3)
    [online] = await hub.of(M.STATUS_ONLINE)
    assert online.payload.model_dump(include={"replica", "kind", "concurrency"}) == {
        "replica": "r1",
        "kind": "scripted",
        "concurrency": 3,
    }


async def test_warning_acks_at_once_then_standby_waits_for_preparation(
    start: Starter, hub: HubSide
) -> None:
    await start(Scripted)
    warning = await hub.warning("CUE-1", prepare_ms=300)
    [ack] = await hub.wait(M.ACK_WARNING, "CUE-1")
    assert (ack.in_reply_to, ack.run_id, ack.payload.attempt) == (warning.message_id, RUN, 1)
    assert await hub.of(M.ACK_STANDBY) == []
    standby = await hub.standby("CUE-1")
    [ready] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    assert ready.in_reply_to == standby.message_id
    assert (ready.payload.ready, ready.payload.reason) == (True, "")
    assert Scripted.calls == [("prepare", "CUE-1"), ("ready", "CUE-1")]
    await eventually(lambda: _zero(hub), message="entries acked")


async def test_standby_not_ready_with_reason(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.warning("CUE-1", ready=False, reason="disk full")
    await hub.standby("CUE-1")
    await hub.warning("CUE-2", prepare_fails=True)
    await hub.standby("CUE-2")
    [one] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    [two] = await hub.wait(M.ACK_STANDBY, "CUE-2")
    assert (one.payload.ready, one.payload.reason) == (False, "disk full")
    assert two.payload.ready is False
    assert two.payload.reason == "prepare failed: RuntimeError: no disk"


async def test_a_long_not_ready_reason_is_cut_not_sent_whole(start: Starter, hub: HubSide) -> None:
    """A reason of 300,000 characters (the `mcp` kind names a server's every tool when the
    cue's is not among them) went whole into ack.standby: 300,307 bytes, past the 256 KiB a
    message may be, which the hub dead-letters as oversized, so the reason never reached
    the cue. It is cut to the size of a blocked reason (2,000 characters)."""
    await start(Scripted)
    await hub.warning("CUE-1", ready=False, reason="tool-x, ", reason_times=37_500)
    await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    assert ack.payload.ready is False
    assert ack.payload.reason.startswith("tool-x, tool-x, ")
    assert len(ack.payload.reason) <= 2000


async def test_go_reports_started_context_handoff_completed_in_order(
    start: Starter, hub: HubSide
) -> None:
    await start(Scripted)
    go = await hub.go("CUE-1", go_context={"spec": "v1"}, block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")  # written while the work still runs
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    out = [m for m in await hub.out() if m.cue_id == "CUE-1"]
    assert [m.message_type for m in out] == [
        M.STATUS_STARTED,
        M.TASK_CONTEXT,
        M.TASK_CONTEXT,
        M.TASK_CONTEXT,
        M.TASK_HANDOFF,
        M.STATUS_COMPLETED,
    ]
    assert all(m.run_id == RUN and m.in_reply_to == go.message_id for m in out)
    started, seen, k1, k2, handoff, done = (m.payload for m in out)
    assert started.model_dump() == {"attempt": 1, "replica": "r1"}
    assert (seen.key, seen.value) == ("seen_context", {"spec": "v1"})
    assert (k1.key, k1.value, k1.tags) == ("k1", 1, [])
    assert (k2.key, k2.value, k2.tags, k2.metadata) == ("k2", "two", ["t"], {"m": 1})
    assert (handoff.from_agent, handoff.to_agent, handoff.task_id) == (AGENT, "agent-b", "CUE-1")
    assert handoff.handoff_context.provided_keys() == {"impl", "work_completed"}
    assert done.model_dump() == {
        "attempt": 1, "result": {"tries": 1}, "replica": "r1", "usage": None,
    }  # fmt: skip
    await eventually(lambda: _zero(hub), message="GO acked")


async def test_work_done_before_started_is_written_reports_the_outcome_alone(
    start: Starter, hub: HubSide
) -> None:
    """status.started and the completion of quick work share one write: the completion
    says it started, so status.started is left out."""
    await start(Scripted)
    await hub.go("CUE-1")
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    out = [m.message_type for m in await hub.out() if m.cue_id == "CUE-1"]
    assert M.STATUS_STARTED not in out
    assert out[-1] is M.STATUS_COMPLETED


async def _zero(hub: HubSide) -> bool:
    return await hub.pending() == 0


async def test_task_assign_runs_like_go_and_a_dict_is_the_result(
    start: Starter, hub: HubSide
) -> None:
    await start(Scripted)
    await hub.send(M.TASK_ASSIGN, TaskAssign(cue_id="T-1", action={"plain": True}))
    [done] = await hub.wait(M.STATUS_COMPLETED, "T-1")
    assert done.payload.result == {"plain": True}


async def test_exception_reports_failed_and_acks(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.go("CUE-1", boom=True)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == "ValueError: boom"
    await eventually(lambda: _zero(hub))
    assert await hub.of(M.STATUS_COMPLETED) == []


async def test_duplicate_go_does_nothing_but_a_new_attempt_runs(
    start: Starter, hub: HubSide
) -> None:
    await start(Scripted)
    await hub.go("CUE-1")
    await hub.go("CUE-1")
    await hub.warning("CUE-1")
    await hub.warning("CUE-1")
    await hub.wait(M.ACK_WARNING, "CUE-1")
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    await eventually(lambda: _zero(hub))
    assert len(await hub.of(M.STATUS_COMPLETED)) == 1  # worked once
    assert len(await hub.of(M.ACK_WARNING)) == 1
    await hub.go("CUE-1", attempt=2)
    done = await hub.wait(M.STATUS_COMPLETED, "CUE-1", n=2)
    assert [m.payload.attempt for m in done] == [1, 2]


async def test_retry_handles_the_entry_again(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.go("CUE-1", retries=2)
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result == {"tries": 3}
    assert len(await hub.of(M.STATUS_STARTED)) == 1
    await eventually(lambda: _zero(hub))


async def test_retry_gives_up_after_max_deliveries(
    start: Starter, hub: HubSide, settings: Settings
) -> None:
    await start(Scripted, settings_=settings.model_copy(update={"max_deliveries": 2}))
    await hub.go("CUE-1", retries=10)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error.startswith("gave up after 2 tries")
    [rejected] = await hub.rejected()
    assert rejected.reason.startswith("gave up after 2 tries")
    assert rejected.deliveries == 1 and rejected.replica == "r1"
    assert await hub.pending() == 0


async def test_reject_fails_and_dead_letters_at_once(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.go("CUE-1", reject="bad input")
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == "rejected: bad input"
    [rejected] = await hub.rejected()
    assert rejected.reason == "rejected: bad input"
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert await hub.pending() == 0


async def test_undecodable_entry_is_dead_lettered(
    start: Starter, hub: HubSide, keys: object
) -> None:
    await start(Scripted)
    entry_id = await hub.t.publish(hub.keys.inbox(AGENT), b"{not json")
    [rejected] = await hub.rejected()
    assert rejected.entry_id == entry_id  # the hub copies the entry by its id
    assert rejected.reason.startswith("not JSON")
    await eventually(lambda: _zero(hub))


async def test_poison_is_rejected_with_its_delivery_count(
    start: Starter, hub: HubSide, fast: Settings
) -> None:
    """An entry delivered `max_deliveries` times already (to replicas that died with it) is
    not run again: the replica that reclaims it asks the hub to dead-letter it."""
    inbox = hub.keys.inbox(AGENT)
    await hub.t.ensure_group(inbox, AGENT)
    go = await hub.go("CUE-P")
    [first] = await hub.t.read_group([inbox], AGENT, "ghost-1", block_ms=None)
    await eventually(lambda: hub.t.reclaim(inbox, AGENT, "ghost-2", min_idle_ms=50))
    await start(Scripted, settings_=fast.model_copy(update={"max_deliveries": 2}))
    [rejected] = await hub.rejected()
    assert (rejected.entry_id, rejected.deliveries) == (first.entry_id, 2)
    assert rejected.reason == "poison: delivered 2 times"
    [message] = await hub.of(M.STATUS_REJECTED)
    assert (message.run_id, message.cue_id) == (go.run_id, "CUE-P")
    assert ("execute", "CUE-P") not in Scripted.calls
    await eventually(lambda: _zero(hub))


async def test_standdown_cancels_preparation_and_acks_nothing(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.warning("CUE-1", prepare_ms=10_000)
    await hub.wait(M.ACK_WARNING, "CUE-1")
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-1", reason="lost the lease"))
    await eventually(lambda: Scripted.stood_down == ["CUE-1"])
    await eventually(lambda: _zero(hub))
    assert [m.message_type for m in await hub.out()] == [M.STATUS_ONLINE, M.ACK_WARNING]


async def test_standdown_ends_a_readiness_check_that_never_returns(
    start: Starter, hub: HubSide
) -> None:
    """The hub stands a cue down when its ack.standby is late: a `ready` that never returns
    (a remote that drips its answer) is then cancelled and its entry acknowledged. On the
    code before, each such check held its entry for ever: after `prefetch` of them (4) the
    replica read nothing more, and a GO behind them never ran."""
    await start(Scripted)
    for n in range(5):
        await hub.warning(f"CUE-H{n}", ready_hangs=True)
        await hub.standby(f"CUE-H{n}")
        await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id=f"CUE-H{n}", reason="timeout"))
    await hub.go("CUE-OK", plain=True)
    await hub.wait(M.STATUS_COMPLETED, "CUE-OK")
    await eventually(lambda: Scripted.stood_down == [f"CUE-H{n}" for n in range(5)])
    await eventually(lambda: _zero(hub))  # every entry acknowledged: none held for ever
    assert await hub.of(M.ACK_STANDBY) == []  # the hub no longer waits for these answers


class SlowRelease(Scripted):
    async def standdown(self, cue: Cue, reason: str) -> None:
        self.stood_down.append(cue.cue_id)
        await asyncio.sleep(0.05)  # releases something over the network


async def test_a_repeated_standdown_with_a_hook_that_awaits_is_harmless(
    start: Starter, hub: HubSide, caplog: pytest.LogCaptureFixture
) -> None:
    """Two copies of a standdown of a cue held at two attempts, the hook awaiting: the copy
    handled second takes the attempt the first has not reached yet, and both entries are
    acknowledged. On the code before, the first copy then failed on the attempt it no
    longer found (KeyError), and its entry stayed pending for another replica."""
    await start(SlowRelease)
    await hub.warning("CUE-1", attempt=1)
    await hub.warning("CUE-1", attempt=2)
    await hub.wait(M.ACK_WARNING, "CUE-1", n=2)
    standdown = CoordStanddown(cue_id="CUE-1", attempt=2, reason="run cancelled")
    await hub.send(M.COORD_STANDDOWN, standdown)
    await hub.send(M.COORD_STANDDOWN, standdown)  # a copy
    await eventually(lambda: len(SlowRelease.stood_down) == 2, message="both attempts released")
    await eventually(lambda: _zero(hub), message="both standdowns acknowledged")
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


class Hasty(Scripted):
    hook_timeout_s = 0.2


async def _hanging_hook(hub: HubSide, hook: str, cue: str) -> None:
    """An inbox entry whose `hook` never returns."""
    if hook == "standdown":
        await hub.warning(cue)
        await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id=cue, reason="hang"))
    elif hook == "on_input":
        answer = TaskInput(cue_id=cue, escalation_id=f"e-{cue}", answer="hang")
        await hub.send(M.TASK_INPUT, answer)
    else:
        handoff = TaskHandoff(from_agent="agent-z", to_agent=AGENT, task_id="hang")
        await hub.send(M.TASK_HANDOFF, handoff, cue_id=cue)


@pytest.mark.parametrize("hook", ["standdown", "on_input", "on_handoff"])
async def test_a_hook_that_never_returns_gives_its_entry_up(
    start: Starter, hub: HubSide, hook: str
) -> None:
    """`standdown`, `on_input` and `on_handoff` are cancelled past `hook_timeout_s`: a
    standdown is acknowledged (the work was called off before the hook), an input or a
    handoff dead-lettered, saying so. On the code before, each held its entry for ever (an
    `a2a` standdown cancelling a task on a remote that drips its answer): after `prefetch`
    of them (4) the replica read nothing more, and a GO behind them never ran."""
    await start(Hasty)
    for n in range(5):
        await _hanging_hook(hub, hook, f"CUE-H{n}")
    await hub.go("CUE-OK", plain=True)
    await hub.wait(M.STATUS_COMPLETED, "CUE-OK")
    await eventually(lambda: _zero(hub))  # every entry acknowledged: none held for ever
    if hook != "standdown":
        rejected = await hub.rejected(5)
        assert {r.reason for r in rejected} == {f"{hook} did not return within 0.2 s"}
    else:
        assert Hasty.stood_down == [f"CUE-H{n}" for n in range(5)]
        assert await hub.of(M.STATUS_REJECTED) == []


async def test_concurrency_limit_and_acks_flow_while_busy(start: Starter, hub: HubSide) -> None:
    await start(Scripted, concurrency=2)
    for n in range(4):
        await hub.go(f"CUE-{n}", block=True)
    await hub.wait(M.STATUS_STARTED, n=2)
    await hub.warning("CUE-W")
    await hub.wait(M.ACK_WARNING, "CUE-W")  # acks are answered with every slot busy
    assert len(await hub.of(M.STATUS_STARTED)) == 2
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, n=4)
    assert Scripted.most_running == 2


async def test_two_replicas_share_the_work(start: Starter, hub: HubSide) -> None:
    await start(Scripted, "r1")
    await start(Scripted, "r2")
    for n in range(4):
        await hub.go(f"CUE-{n}", block=True)
    started = await hub.wait(M.STATUS_STARTED, n=2)
    assert {m.payload.replica for m in started} == {"r1", "r2"}
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, n=4)


async def test_pause_holds_new_work_but_acks_flow(start: Starter, hub: HubSide) -> None:
    spec = await start(Scripted)
    await hub.broadcast(M.BROADCAST_PAUSE, BroadcastPause(reason="maintenance"))
    # Broadcasts and the inbox are separate streams: wait until the pause has landed.
    await eventually(lambda: spec.state == "paused")
    await hub.send(M.STATUS_REQUEST, StatusRequest(), cue_id=None)
    [report] = await hub.wait(M.STATUS_REPORT)
    assert report.payload.state == "paused"
    await hub.go("CUE-1")
    await hub.warning("CUE-2")
    await hub.wait(M.ACK_WARNING, "CUE-2")
    assert await hub.of(M.STATUS_STARTED) == []
    await hub.broadcast(M.BROADCAST_RESUME, BroadcastResume())
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")


async def test_status_request_gets_a_report(start: Starter, hub: HubSide) -> None:
    await start(Scripted, concurrency=2)
    request = await hub.send(M.STATUS_REQUEST, StatusRequest(reason="why"), cue_id=None)
    [report] = await hub.wait(M.STATUS_REPORT)
    assert report.in_reply_to == request.message_id
    assert report.payload.model_dump(include={"replica", "state", "in_flight"}) == {
        "replica": "r1",
        "state": "running",
        "in_flight": 0,
    }
    assert report.payload.detail["concurrency"] == 2


async def test_forwarded_handoff_reaches_on_handoff(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    handoff = TaskHandoff(
        from_agent="agent-z",
        to_agent=AGENT,
        task_id="CUE-9",
        handoff_context=HandoffContext(work_completed=["built"], binary="app.tar"),
    )
    await hub.send(M.TASK_HANDOFF, handoff, cue_id="CUE-9")
    await eventually(lambda: Scripted.handoffs == [handoff])
    await eventually(lambda: _zero(hub))


async def test_a_handoff_delivered_twice_reaches_on_handoff_once(
    start: Starter, hub: HubSide
) -> None:
    """The same forward written twice (a hub restarted before it acknowledged the first, or
    a cluster's forward landed before its XACK): one call of the hook. Another handoff, and
    the same message id from another sender, are handled."""
    await start(Scripted)
    ctx = HandoffContext(work_completed=["built"])
    first = TaskHandoff(from_agent="agent-z", to_agent=AGENT, task_id="T-1", handoff_context=ctx)
    sent = await hub.send(M.TASK_HANDOFF, first, run_id=None, from_agent="agent-z")
    await hub.t.publish(hub.keys.inbox(AGENT), sent)  # the same envelope, again
    second = first.model_copy(update={"task_id": "T-2"})
    await hub.send(M.TASK_HANDOFF, second, run_id=None, from_agent="agent-z")
    other = sent.model_copy(update={"from_agent": "agent-y"})  # its id, another sender
    await hub.t.publish(hub.keys.inbox(AGENT), other)
    await eventually(lambda: _zero(hub))
    assert sorted(h.task_id for h in Scripted.handoffs) == ["T-1", "T-1", "T-2"]


async def test_notice_and_shutdown_broadcasts(start: Starter, hub: HubSide) -> None:
    await start(Scripted)
    await hub.broadcast(M.BROADCAST_NOTICE, BroadcastNotice(text="hello all"))
    await eventually(lambda: Scripted.notices == ["hello all"])
    await hub.broadcast(M.BROADCAST_SHUTDOWN, BroadcastShutdown(reason="bye"))
    [offline] = await hub.wait(M.STATUS_OFFLINE)
    assert offline.payload.model_dump() == {"replica": "r1", "reason": "broadcast.shutdown: bye"}


async def test_a_notice_hook_that_does_not_return_leaves_broadcasts_flowing(
    start: Starter, hub: HubSide
) -> None:
    """on_broadcast ran inside the loop that reads broadcasts: while one did not return,
    the replica saw no other broadcast, a pause or a shutdown included (5 s and more)."""
    await start(Scripted)
    await hub.broadcast(M.BROADCAST_NOTICE, BroadcastNotice(text="hang"))
    await eventually(lambda: Scripted.notices == ["hang"])
    await hub.broadcast(M.BROADCAST_NOTICE, BroadcastNotice(text="after"))
    await eventually(lambda: Scripted.notices == ["hang", "after"])
    assert Scripted.release is not None
    Scripted.release.set()


async def test_broadcasts_from_before_start_are_not_replayed(start: Starter, hub: HubSide) -> None:
    await hub.broadcast(M.BROADCAST_PAUSE, BroadcastPause())
    await start(Scripted)
    await hub.go("CUE-1")
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")


async def test_stop_drains_work_in_progress(settings: Settings, hub: HubSide) -> None:
    spec = Scripted(AGENT, "r1", settings)
    task = asyncio.create_task(spec.run())
    await hub.wait(M.STATUS_ONLINE)
    await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED)
    spec.stop("test")
    await hub.go("CUE-2")  # arrives while draining: left for another replica
    assert Scripted.release is not None
    Scripted.release.set()
    await asyncio.wait_for(task, 10)
    kinds = [m.message_type for m in await hub.out()]
    assert kinds[-2:] == [M.STATUS_COMPLETED, M.STATUS_OFFLINE]
    assert await hub.of(M.STATUS_STARTED, "CUE-2") == []


async def test_done_markers_once_across_replicas(start: Starter, hub: HubSide) -> None:
    spec = await start(Scripted)
    assert spec is not None
    from specialists.cue import Cue
    from specialists.markers import DoneMarkers

    markers = DoneMarkers(hub.t, hub.keys, AGENT, ttl_s=60)
    go = make(M.TASK_ASSIGN, TaskAssign(cue_id="C"), run_id=RUN)
    cue = Cue(
        agent_id=AGENT, replica="r1", run_id=RUN, cue_id="C", attempt=1, message=go, markers=markers
    )
    assert not await cue.already_done("x")
    with pytest.raises(RuntimeError):
        async with cue.once("x") as first:
            assert first
            raise RuntimeError("failed half way")
    assert not await cue.already_done("x")  # a failed block can be tried again
    async with cue.once("x") as first:
        assert first
    async with cue.once("x") as again:
        assert not again
    assert await cue.mark_done("y") and not await cue.mark_done("y")
    assert await cue.already_done("y")


def test_bad_names_are_refused(settings: Settings) -> None:
    with pytest.raises(ValueError, match="agent id"):
        Specialist("Agent A", "r1", settings)
    with pytest.raises(ValueError, match="replica"):
        Specialist(AGENT, "r:1", settings)


async def test_standdown_stops_work_in_progress_and_reports_it(
    start: Starter, hub: HubSide
) -> None:
    """A cancelled run stands down a GO'd cue: the work stops, is reported, is settled."""
    await start(Scripted)
    await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-1", reason="run cancelled"))
    (failed,) = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == "stood down: run cancelled"  # type: ignore[attr-defined]
    assert Scripted.running == 0  # the execute hook was interrupted, not left running
    await eventually(lambda: _zero(hub))  # acknowledged: not redelivered to anyone
    assert not await hub.of(M.STATUS_COMPLETED)


async def test_a_replica_holds_at_most_prefetch_entries(
    start: Starter, hub: HubSide, settings: Settings
) -> None:
    """Concurrency 1, prefetch 2: one entry runs, one waits for the slot, the rest stay in
    the stream for any replica; all are worked once the slot frees."""
    await start(Scripted, settings_=settings.model_copy(update={"prefetch": 2}))
    for n in range(5):
        await hub.go(f"CUE-{n}", block=True)
    await eventually(lambda: _held(hub, 2), message="two entries read")
    assert Scripted.running == 1
    assert await hub.pending() == 2
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, n=5)
    assert Scripted.most_running == 1


async def test_while_redis_refuses_writes_a_replica_takes_no_more_work(
    start: Starter, hub: HubSide, settings: Settings
) -> None:
    """Redis out of memory: the outcomes of the work a replica holds cannot be written (it
    tries again, for up to `refused_write_retry_s`), and it reads no more GOs meanwhile, as
    each would only add an outcome that cannot be written; once a write lands it reads on.
    On the code before, work whose outcome was being written did not count against
    `prefetch`: the replica read and executed every GO of its inbox, holding them all."""
    spec = await start(Scripted, settings_=settings.model_copy(update={"prefetch": 2}))
    rt = spec._runtime
    for n in range(12):
        await hub.go(f"CUE-{n}", plain=True, block=True)
    await eventually(lambda: _held(hub, 2), message="two entries read")
    restore = await run_out_of_memory(hub.t._client)
    try:
        assert Scripted.release is not None
        Scripted.release.set()

        def only_writing() -> bool:  # all it holds is done, its outcome refused
            return rt.refused and rt.busy == 0 and rt.settling == len(rt.in_flight)

        await eventually(only_writing, message="the work held done, its writes refused")
        assert rt.read_budget() == 0
        # past prefetch by one read at most: the read that brought the first refusal back
        assert len(rt.in_flight) <= 2 * rt.prefetch + 1 < 12
        assert len(Scripted.calls) == len(rt.in_flight)  # executed: only what it holds
        assert await hub.of(M.STATUS_COMPLETED) == []
    finally:
        await restore()
    await hub.wait(M.STATUS_COMPLETED, n=12, timeout_s=10)
    assert sorted(Scripted.calls) == sorted(("execute", f"CUE-{n}") for n in range(12))
    await eventually(lambda: _zero(hub))


async def _held(hub: HubSide, n: int) -> bool:
    return await hub.pending() >= n


async def test_a_reader_waiting_for_room_wakes_when_a_warning_is_answered(
    start: Starter, hub: HubSide, settings: Settings
) -> None:
    """The one slot busy and the prefetched WARNINGs still being answered leave no room to
    read: answering them makes room, and wakes the reader (not its block_ms later)."""
    from specialists.builtin.echo import Echo

    slow = settings.model_copy(update={"prefetch": 4, "block_ms": 3_000})
    await start(Echo, settings_=slow)
    await hub.go("LONG", execute_ms=2_500, block=True)
    await eventually(lambda: _held(hub, 1), message="the GO is read")
    for n in range(8):
        await hub.warning(f"CUE-{n}")
    await hub.wait(M.ACK_WARNING, n=8, timeout_s=1.5)  # the GO takes 2.5 s


class _Spy(Transport):
    """A transport that keeps the writes each read carried ahead of it; with `refuse`, Redis
    refuses the first such write (out of memory: nothing of it applied), as a full server
    would, and the read itself goes on."""

    carried: list[list[Any]]
    refuse = False
    refused = 0

    async def read_group(self, *args: Any, ahead: WriteAhead | None = None, **kw: Any) -> Any:
        if ahead is not None and self.refuse and not self.refused:
            self.refused += 1
            ahead.tell(OutOfMemory("OOM command not allowed when used memory > 'maxmemory'"))
            ahead = None
        if ahead is not None:
            self.carried.append(list(ahead.commands))
        return await super().read_group(*args, ahead=ahead, **kw)

    def sent_ahead(self) -> set[str]:
        """The ids of the messages that went ahead of a read."""
        return {decode(c[4]).message_id for cs in self.carried for c in cs if c[0] == "XADD"}


@pytest.fixture
async def spy(settings: Settings) -> AsyncIterator[_Spy]:
    """Set up before the `start` fixture, so closed after the replicas it started stop."""
    made = _Spy.from_url(settings.redis_url, settings.keys)
    made.carried = []
    yield made
    await made.close()


async def test_answers_go_in_the_round_trip_of_the_next_read(
    spy: _Spy, start: Starter, hub: HubSide
) -> None:
    """What a replica answers at once (an ack, a GO's status.started) goes ahead of its next
    read of the inbox, in one write to Redis, and lands with the entry it answers acked."""
    await start(Scripted, transport=spy)
    await hub.warning("CUE-1")
    standby = await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    assert ack.in_reply_to == standby.message_id
    assert ack.message_id in spy.sent_ahead()
    acks = [c for cs in spy.carried for c in cs if c[0] == "XACK"]
    assert acks  # the entries answered were acknowledged in the same write
    await eventually(lambda: _zero(hub), message="entries acked")


async def test_an_answer_refused_ahead_of_a_read_is_written_again_not_lost(
    spy: _Spy, start: Starter, hub: HubSide
) -> None:
    """A write Redis refused whole goes back to the replica's writer, which writes it (it
    backs off while Redis refuses): the ack lands once, and the entry is acknowledged."""
    spy.refuse = True
    await start(Scripted, transport=spy)
    warning = await hub.warning("CUE-1")
    [ack] = await hub.wait(M.ACK_WARNING, "CUE-1")
    assert spy.refused == 1 and ack.in_reply_to == warning.message_id
    await eventually(lambda: _zero(hub), message="entries acked")
    assert len(await hub.of(M.ACK_WARNING, "CUE-1")) == 1
    await hub.standby("CUE-1")  # once a write landed, answers go ahead of reads again
    [ready] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    assert ready.message_id in spy.sent_ahead()
