"""Retention and trimming on a real server: a finished run's keys expire and leave the
index; a reopened run is kept; streams are cut to their cap, never past a pending entry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub import commands as c
from hub import upkeep
from hub.engine.escalations import Escalation
from hub.service import Hub
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.errors import NotFound
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import Severity
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
ONE_CUE = "cuelist: kept\ncues:\n  - {id: ONLY, target_agents: [nobody], ack_timeout_s: 60}\n"


@pytest.fixture
async def hub(settings: Settings) -> AsyncIterator[Hub]:
    extra = {"run_retention_s": 1.0, "upkeep_interval_s": 0.2, "stream_maxlen": 10}
    async with running_hub(settings, lease_ms=2000, **extra) as hub:
        yield hub


async def _start(hub: Hub, run_id: str) -> str:
    parsed, version = load_cuelist(ONE_CUE)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), ONE_CUE)
    run = await hub.driver.start_run("kept", version, run_id, {}, False)
    return run.run_id


async def _ttls(hub: Hub, run_id: str) -> list[int]:
    client = hub.transport._client
    keys = [hub.keys.run(run_id), hub.keys.run_events(run_id)]
    return [int(await client.pttl(k)) for k in keys]


async def test_a_finished_run_expires_and_leaves_the_index(hub: Hub) -> None:
    run_id = await _start(hub, "run-expiring")
    assert await _ttls(hub, run_id) == [-1, -1]  # running: kept
    await hub.driver.step(lambda e: e.cancel(run_id))
    ttls = await _ttls(hub, run_id)
    assert all(0 < t <= 1000 for t in ttls), ttls
    assert run_id in await hub.store.recent_run_ids()

    async def forgotten() -> bool:
        return run_id not in await hub.store.recent_run_ids()

    await eventually(forgotten, 10)
    assert await hub.store.run(run_id) is None
    assert await hub.store.events(run_id) == []


async def test_a_running_run_is_never_forgotten(hub: Hub) -> None:
    run_id = await _start(hub, "run-long")
    # older than the retention, still running: the sweep sees its state and keeps it
    await hub.transport._client.zadd(hub.keys.all_runs, {run_id: 1.0})
    assert await hub.upkeep.sweep() is not None
    assert run_id in await hub.store.recent_run_ids()
    assert await hub.store.run(run_id) is not None
    await hub.driver.step(lambda e: e.cancel(run_id))


async def test_expired_runs_behind_a_batch_of_kept_ones_are_forgotten(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round looked at the FORGET_BATCH oldest old entries only: with that many runs still
    held (long-running, or ended within the retention), no expired one behind them was ever
    dropped, and the index grew without bound. Rounds now go on past the ones kept."""
    monkeypatch.setattr(upkeep, "FORGET_BATCH", 3)
    client = hub.transport._client
    for i in range(3):  # old, still held: the state first, or a sweep between finds none
        await client.hset(hub.keys.run(f"held-{i}"), "x", "1")
        await client.zadd(hub.keys.all_runs, {f"held-{i}": 10.0 + i})
    await client.zadd(hub.keys.all_runs, {f"gone-{i}": 20.0 + i for i in range(10)})

    async def left() -> bool:
        ids = await client.zrange(hub.keys.all_runs, 0, -1)
        return not [i for i in ids if i.startswith(b"gone-")]

    await eventually(left, 10, message="the expired runs behind the held ones are forgotten")
    held = await client.zrange(hub.keys.all_runs, 0, 2)
    assert held == [b"held-0", b"held-1", b"held-2"]
    await client.delete(*[hub.keys.run(f"held-{i}") for i in range(3)])


async def test_streams_are_trimmed_to_the_cap_but_never_past_a_pending_entry(hub: Hub) -> None:
    client = hub.transport._client
    out, inbox = hub.keys.out("trimmed"), hub.keys.inbox("trimmed")
    await client.xgroup_create(inbox, "trimmed", id="0", mkstream=True)
    for n in range(30):
        await client.xadd(inbox, {STREAM_FIELD: f"{n}"})
    # the specialist has read 5 and acknowledged none: nothing from the 1st on may go
    await client.xreadgroup("trimmed", "r1", {inbox: ">"}, count=5)
    orphan = hub.keys.inbox("never-started")  # no group: its reader has not come yet
    for n in range(30):
        await client.xadd(orphan, {STREAM_FIELD: f"{n}"})
    # the streams upkeep looks at: these (the router's discovery, beside its reads, would
    # replace a list appended to)
    hub.upkeep.streams = lambda: [out, hub.keys.out("never-started")]
    await hub.upkeep.sweep()
    assert await client.xlen(inbox) == 30  # the pending head holds it
    rows = await client.xreadgroup("trimmed", "r1", {inbox: "0"}, count=10)
    ids = [entry_id for entry_id, _ in rows[0][1]]
    await client.xack(inbox, "trimmed", *ids[:5])
    await client.xreadgroup("trimmed", "r1", {inbox: ">"}, count=20)  # 20 delivered, pending
    await hub.upkeep.sweep()
    assert await client.xlen(inbox) == 25  # only the acknowledged 5: the rest is pending
    await client.xreadgroup("trimmed", "r1", {inbox: ">"})
    rows = await client.xpending_range(inbox, "trimmed", "-", "+", 100)
    await client.xack(inbox, "trimmed", *[r["message_id"] for r in rows])
    await hub.upkeep.sweep()
    assert await client.xlen(inbox) == 10  # all acknowledged: down to the cap
    assert await client.xlen(orphan) == 30  # no reader yet: nothing is dropped


async def test_a_retried_run_is_kept_again(settings: Settings) -> None:
    extra = {"run_retention_s": 600.0, "upkeep_interval_s": 60.0}
    async with running_hub(settings, lease_ms=2000, **extra) as hub:
        text = (
            "cuelist: brief\ncues:\n  - {id: ONLY, target_agents: [nobody], ack_timeout_s: 0.2}\n"
        )
        parsed, version = load_cuelist(text)
        await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
        run_id = (await hub.driver.start_run("brief", version, "run-retried", {}, False)).run_id

        async def ended() -> bool:
            run = await hub.store.run(run_id)
            return run is not None and run.status.done

        await eventually(ended, 10)
        assert all(0 < t <= 600_000 for t in await _ttls(hub, run_id))
        await hub.commands.call(c.Retry(run_id=run_id, cue_id="ONLY"))
        assert await _ttls(hub, run_id) == [-1, -1]  # running again: kept for ever again


async def test_groups_of_partitions_that_no_longer_exist_are_dropped(hub: Hub) -> None:
    """The count was lowered (to this hub's one partition): the groups `hub-p1`.. left on
    the out streams would hold their trimming back for ever; the hub's own and an agent's
    stay."""
    client = hub.transport._client
    out = hub.keys.out("lowered")
    for group in ("hub", "hub-p1", "hub-p3", "lowered-tool"):
        await client.xgroup_create(out, group, id="0", mkstream=True)
    hub.router.streams.append(out)
    await hub.upkeep.sweep()
    assert sorted(await hub.transport.group_names(out)) == ["hub", "lowered-tool"]


async def test_escalations_leave_with_their_run_and_closed_ones_after_the_retention(
    hub: Hub,
) -> None:
    """Escalations were kept for ever, and so was their index: every timeout, conflict or
    specialist's escalation of every run, long after the run itself had expired."""
    run_id = await _start(hub, "run-escalated")

    def escalate(engine: Any) -> None:
        body = p.EscalationError(cause="disk", detail="full")
        engine.escalate(engine.runs[run_id], None, T.ESCALATION_ERROR, body)

    await hub.driver.step(escalate)
    (esc,) = [e for e in await hub.store.escalations() if e.run_id == run_id]
    client = hub.transport._client
    closed, still = (
        Escalation(type=T.ESCALATION_ERROR, severity=Severity.MEDIUM, cause=cause,
                   status=status, created_at=1.0, updated_at=1.0)
        for cause, status in (("closed", "resolved"), ("still", "open"))
    )  # fmt: skip
    for old in (closed, still):  # of no run, raised long ago
        await client.set(hub.keys.escalation(old.id), old.model_dump_json())
        await client.zadd(hub.keys.escalations, {old.id: 1.0})
    await client.zadd(hub.keys.escalations, {"gone-already": 1.0})
    await hub.driver.step(lambda e: e.cancel(run_id))

    async def forgotten() -> bool:
        ids = {i.decode() for i in await client.zrange(hub.keys.escalations, 0, -1)}
        return not ids & {esc.id, closed.id, "gone-already"}

    await eventually(forgotten, 10, message="the run's, the closed one and the missing one go")
    assert await hub.store.escalation(esc.id) is None
    assert await hub.store.escalation(closed.id) is None
    assert await hub.store.escalation(still.id) is not None  # open: an operator's to close
    assert await client.zscore(hub.keys.escalations, still.id) == 1.0


async def test_consumers_of_hubs_replaced_are_dropped_once_idle_and_holding_nothing(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default hub id is host and pid: each restart left a consumer in every partition's
    group of each out stream, and of the commands stream, for ever. A group with one
    consumer is not listed (the reader's), so one may stay; never more. This hub's own is
    kept, idle or not. (One holding an entry stays: `drop_consumers`' script, tested in
    test_registry_consumers.)"""
    monkeypatch.setattr(upkeep, "HUB_CONSUMER_IDLE_MS", 0)
    client = hub.transport._client
    out, commands = hub.keys.out("replaced"), hub.keys.commands()
    await client.xgroup_create(out, "hub", id="0", mkstream=True)
    for name in ("hub-gone-1", "hub-gone-2", hub.hub_id):
        await client.xgroup_createconsumer(out, "hub", name)
        await client.xgroup_createconsumer(commands, "engine", name)
    hub.upkeep.streams = lambda: [out]

    async def names(stream: str, group: str) -> set[str]:
        return {row["name"].decode() for row in await client.xinfo_consumers(stream, group)}

    async def dropped() -> bool:
        left = await names(commands, "engine") | await names(out, "hub")
        return not left & {"hub-gone-1", "hub-gone-2"}

    await eventually(dropped, 10)
    assert hub.hub_id in await names(out, "hub")
    with pytest.raises(NotFound):  # the leader still reads commands, and answers them
        await hub.commands.call(c.Cancel(run_id="run-none"))
