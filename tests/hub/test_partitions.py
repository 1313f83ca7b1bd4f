"""The partitioned engine in one process: hubs share the partitions out and take a stopped
hub's, runs go to their partition's leader, resource runs live in partition 0, a pause in
one partition reaches all, and a hub with another partition count is refused."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from hub import commands as c
from hub.api.app import supervise
from hub.service import Hub, HubSettings
from hub.store.members import MemberStore
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import encode, make
from protocols.contracts import Contract
from protocols.errors import Conflict, EngineError
from protocols.ids import new_id_in
from protocols.keys import STREAM_FIELD, partition_of
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.transport import Storage
from protocols.validation import load_cuelist
from specialists.builtin.echo import Echo
from tests.helpers import eventually

pytestmark = pytest.mark.redis
PARTITIONS = 4
LEASE_MS = 900
PLAIN = "cuelist: plain\ncues:\n  - {id: ONLY, target_agents: [p-echo]}\n"
LOCKED = "cuelist: locked\ncues:\n  - {id: ONLY, target_agents: [p-echo], resources: [db]}\n"


class Cluster:
    """Hubs of one prefix in this process, each started and stopped on its own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.hubs: dict[str, tuple[Hub, asyncio.Event, asyncio.Task[None]]] = {}

    def start(self, name: str) -> Hub:
        hub = Hub(HubSettings(**{**self.settings.model_dump(), "hub_id": name,
                                 "lease_ms": LEASE_MS, "partitions": PARTITIONS}))  # fmt: skip
        stop = asyncio.Event()
        self.hubs[name] = (hub, stop, asyncio.create_task(hub.run(stop)))
        return hub

    async def stop(self, name: str) -> None:
        hub, stop, task = self.hubs.pop(name)
        stop.set()
        await asyncio.wait_for(task, 15)
        await hub.close()

    def led(self, name: str) -> list[int]:
        return [p.index for p in self.hubs[name][0].led()]


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[Cluster]:
    hubs = Cluster(settings)
    echo = Echo("p-echo", settings=settings, concurrency=8)
    agent = asyncio.create_task(echo.run())
    try:
        yield hubs
    finally:
        echo.stop()
        for name in list(hubs.hubs):
            with contextlib.suppress(Exception):
                await hubs.stop(name)
        await asyncio.wait_for(agent, 15)


async def _stored(hub: Hub, text: str) -> str:
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    return version


async def _finished(hub: Hub, run_ids: list[str]) -> bool:
    runs = await hub.store.runs(run_ids)
    return len(runs) == len(run_ids) and all(r.status.value == "success" for r in runs)


async def test_two_hubs_share_the_partitions_and_one_takes_all_when_the_other_stops(
    cluster: Cluster,
) -> None:
    a = cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="a leads 4")
    cluster.start("hub-b")
    await eventually(
        lambda: len(cluster.led("hub-a")) == 2 and len(cluster.led("hub-b")) == 2, 10,
        message="2 partitions each",
    )  # fmt: skip
    assert sorted(cluster.led("hub-a") + cluster.led("hub-b")) == list(range(PARTITIONS))
    # a run in every partition, each started through the hub that does not lead it
    version = await _stored(a, PLAIN)
    run_ids = [new_id_in(p, PARTITIONS) for p in range(PARTITIONS)]
    for run_id in run_ids:
        await a.commands.call(c.StartRun(cuelist="plain", version=version, run_id=run_id))
    await eventually(lambda: _finished(a, run_ids), 15, message="a run per partition done")
    await cluster.stop("hub-b")  # it leaves the members set: a takes its share at once
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="a takes 4")
    again = [new_id_in(p, PARTITIONS) for p in range(PARTITIONS)]
    for run_id in again:
        await a.commands.call(c.StartRun(cuelist="plain", version=version, run_id=run_id))
    await eventually(lambda: _finished(a, again), 15, message="runs done on one hub")


async def test_runs_claiming_resources_live_in_partition_0(cluster: Cluster) -> None:
    hub = cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="leads 4")
    version = await _stored(hub, LOCKED)
    elsewhere = new_id_in(3, PARTITIONS)
    with pytest.raises(EngineError, match="claims resources"):
        await hub.commands.call(c.StartRun(cuelist="locked", version=version, run_id=elsewhere))
    run_id = hub.new_run_id(claims_resources=True)
    assert partition_of(run_id, PARTITIONS) == 0
    await hub.commands.call(c.StartRun(cuelist="locked", version=version, run_id=run_id))
    await eventually(lambda: _finished(hub, [run_id]), 15, message="locked run done")
    # a rerun's id is made in its source's partition
    assert partition_of(hub.new_run_id(beside=elsewhere), PARTITIONS) == 3


async def test_a_pause_reaches_every_partition_and_so_does_the_resume(cluster: Cluster) -> None:
    hub = cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="leads 4")
    # paused by an engine of one partition (what a critical escalation in a run of it does)
    await hub.partitions[2].driver.step(lambda e: e.pause("critical escalation e-1"))
    await eventually(
        lambda: all(p.driver.engine.paused == "critical escalation e-1" for p in hub.partitions),
        5, message="every partition follows the pause",
    )  # fmt: skip
    await hub.commands.call(c.Broadcast(message_type="broadcast.resume", payload={}))
    assert all(p.driver.engine.paused is None for p in hub.partitions)
    assert await hub.store.paused() is None
    version = await _stored(hub, PLAIN)
    run_id = new_id_in(1, PARTITIONS)
    await hub.commands.call(c.StartRun(cuelist="plain", version=version, run_id=run_id))
    await eventually(lambda: _finished(hub, [run_id]), 15, message="runs go after the resume")


async def test_a_hub_with_another_partition_count_is_refused(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    members = MemberStore(Storage.dedicated(settings.redis_url, max_connections=2), settings.keys)
    try:
        await members.agree(4)
        await members.agree(4)
        with pytest.raises(Conflict, match="CALLBOARD_PARTITIONS=2"):
            await members.agree(2)
    finally:
        await members.db.close()
    hub = Hub(HubSettings(**{**settings.model_dump(), "partitions": 2}))
    with pytest.raises(Conflict):
        await asyncio.wait_for(hub.run(asyncio.Event()), 10)
    # as the API process runs it: one line, and no retrying (the count will not change)
    await asyncio.wait_for(supervise(hub, asyncio.Event()), 10)
    assert "cannot lead: CALLBOARD_PARTITIONS=2, but the hubs" in caplog.text
    await hub.close()


async def test_a_hub_of_one_partition_agrees_on_the_count_too(settings: Settings) -> None:
    """A hub of one never looked at the count: beside hubs of four it served runs of every
    partition as its own, and its upkeep dropped their consumer groups."""
    one = Hub(HubSettings(**{**settings.model_dump(), "partitions": 1}))
    four = Hub(HubSettings(**{**settings.model_dump(), "partitions": 4}))
    try:
        stop = asyncio.Event()
        leading = asyncio.create_task(four.run(stop))
        await eventually(lambda: _stored_count(four), 10)
        with pytest.raises(Conflict, match="CALLBOARD_PARTITIONS=1, but the hubs"):
            await asyncio.wait_for(one.run(asyncio.Event()), 10)
        stop.set()
        await leading
    finally:
        await one.close()
        await four.close()


async def _stored_count(hub: Hub) -> bool:
    return await hub.members.db.get(hub.settings.keys.partitions) == b"4"


async def test_a_hostile_sender_is_refused_once_whatever_the_partitions(cluster: Cluster) -> None:
    """Garbage and a spoofed message (about a run of partition 3) on a sender's own out
    stream: each is dead-lettered once, by the partition that owns it, not once per
    partition's reader; every group acknowledges everything; a real run still finishes."""
    hub = cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="leads 4")
    client = hub.transport._client
    out = hub.keys.out("mallory")
    spoofed = make(
        T.TASK_HANDOFF,
        p.TaskHandoff(from_agent="alice", to_agent="bob", task_id="T-1",
                      handoff_context=p.HandoffContext()),
        from_agent="alice", target_agents=("bob",), run_id=new_id_in(3, PARTITIONS),
    )  # fmt: skip
    await client.xadd(out, {STREAM_FIELD: b"\xff not json"})
    await client.xadd(out, {STREAM_FIELD: encode(spoofed)})
    version = await _stored(hub, PLAIN)
    run_id = new_id_in(1, PARTITIONS)
    await hub.commands.call(c.StartRun(cuelist="plain", version=version, run_id=run_id))
    await eventually(lambda: _finished(hub, [run_id]), 15, message="a real run finishes")

    async def settled() -> bool:
        groups = await client.xinfo_groups(out)
        return len(groups) == PARTITIONS and all(
            g["pending"] == 0 and g["entries-read"] == 2 for g in groups
        )

    await eventually(settled, 10, message="every partition's group read and acknowledged both")
    letters = [fields[b"reason"].decode() for _, fields in await client.xrange(hub.keys.dead)]
    assert len(letters) == 2, letters
    assert any("spoofed_sender" in r for r in letters) and any("mallory" in r for r in letters)


async def test_a_registry_message_naming_another_agent_is_applied_by_no_partition(
    cluster: Cluster,
) -> None:
    """Partitions other than the owner's applied a registry message as its body said, before
    any check: one agent wrote another's contract, took its replica offline, and made up
    agents a `target:` would then call. Now every partition applies it as from the agent its
    stream names, and one whose body names another agent nowhere (the owner dead-letters it)."""
    hub = cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="leads 4")
    client = hub.transport._client
    honest = p.StatusOnline(replica="v1", kind="builder", contract=Contract(provides=("build",)))
    victim = make(T.STATUS_ONLINE, honest, from_agent="victim")
    await client.xadd(hub.keys.out("victim"), {STREAM_FIELD: encode(victim)})
    await eventually(lambda: "victim" in hub.registry.online(), 10, message="victim online")
    out = hub.keys.out("mallory")
    made_up = p.StatusOnline(replica="r", contract=Contract(provides=("build",)))
    spoofs = [
        make(T.STATUS_ONLINE, p.StatusOnline(replica="m", kind="evil"), from_agent="victim"),
        make(T.STATUS_OFFLINE, p.StatusOffline(replica="v1"), from_agent="victim"),
        *[make(T.STATUS_ONLINE, made_up, from_agent=f"fake-{i}") for i in range(20)],
        # its own, with no sender in the body: applied as from mallory, by every reader
        make(T.STATUS_ONLINE, p.StatusOnline(replica="m1", kind="worker")),
    ]
    for message in spoofs:
        await client.xadd(out, {STREAM_FIELD: encode(message)})

    async def read_by_all() -> bool:
        groups = await client.xinfo_groups(out)
        return len(groups) == PARTITIONS and all(
            g["pending"] == 0 and g["entries-read"] == len(spoofs) for g in groups
        )

    await eventually(read_by_all, 10, message="every partition's reader took them all")
    record = hub.registry.agents["victim"]
    assert (record.kind, record.contract["provides"]) == ("builder", ["build"])
    assert record.replicas["v1"].online and set(record.replicas) == {"v1"}
    assert not [a for a in hub.registry.agents if a.startswith("fake-")]
    assert hub.registry.agents["mallory"].kind == "worker"
    letters = await client.xlen(hub.keys.dead)
    assert letters == len(spoofs) - 1  # each spoof once, by partition 0


async def test_hubs_of_different_leases_count_each_other_alive(settings: Settings) -> None:
    """Each hub is alive for its own lease after it said so: a hub of a short lease forgot
    a hub of a long one between the other's heartbeats (it counted the hubs by its own
    window), so the two shares flapped, and partitions were yielded and taken again."""
    members = MemberStore(Storage.dedicated(settings.redis_url, max_connections=2), settings.keys)
    try:
        assert await members.heartbeat("slow", 60_000) == 1  # its next one in 20 s
        said = time.monotonic()
        assert await members.heartbeat("quick", 150) == 2
        seen: list[int] = []

        async def quick_has_outlived_its_window() -> bool:
            seen.append(await members.heartbeat("quick", 150))
            return time.monotonic() > said + 0.45

        await eventually(quick_has_outlived_its_window, 10, message="450 ms, 3 windows")
        assert set(seen) == {2}, seen  # "slow" counted throughout
        await members.leave("slow")
        assert await members.heartbeat("quick", 150) == 1
    finally:
        await members.db.close()


async def test_a_yielded_partition_is_left_to_the_others_for_a_lease(
    cluster: Cluster, settings: Settings
) -> None:
    """A hub yielding partitions woke at each term's end, so it saw them free on two ticks
    in a row at once and took them back as a dead hub's before the hub they were yielded
    to had looked (a wasted term each). Now a yielded partition is the others' for a lease;
    after that, a hub that says it is alive and takes nothing still cannot keep it led."""
    cluster.start("hub-a")
    await eventually(lambda: len(cluster.led("hub-a")) == PARTITIONS, 10, message="a leads 4")
    members = MemberStore(Storage.dedicated(settings.redis_url, max_connections=2), settings.keys)
    try:
        await members.heartbeat("hub-ghost", 60_000)  # alive, and takes nothing: a's share is 2
        await eventually(lambda: len(cluster.led("hub-a")) == 2, 10, message="a yields 2")
        yielded_at = time.monotonic()
        await eventually(lambda: len(cluster.led("hub-a")) > 2, 10, message="a takes one back")
        assert time.monotonic() - yielded_at >= 0.8 * LEASE_MS / 1000
    finally:
        await members.db.close()
