"""Consumers and groups an agent makes up on its own inbox (any name, any number: its ACL
allows it) neither stall the hub's loop in `describe` or upkeep nor stay for ever: their
list is read only when short, and upkeep drops the idle consumers no replica has and the
groups not its own, a bounded number a round."""

from __future__ import annotations

from typing import Any

import pytest

from hub import registry as registry_module
from hub import upkeep
from hub.api.routes.agents import list_agents
from hub.service import Hub
from hub.store.state import StateStore
from hub.upkeep import Upkeep
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.transport import Storage, Transport, _upkeep
from tests.helpers import eventually

pytestmark = pytest.mark.redis
MADE_UP = registry_module.CONSUMERS_READ_MAX + 88


async def _online(hub: Hub, agent: str) -> None:
    msg = make(T.STATUS_ONLINE, p.StatusOnline(replica=f"{agent}-1"), from_agent=agent)
    await hub.transport._client.xadd(hub.keys.out(agent), {"m": encode(msg)})
    await eventually(lambda: hub.keys.out(agent) in hub.router.streams, 10)
    await eventually(lambda: agent in hub.registry.agents, 10)
    await hub.registry.store.save([hub.registry.agents[agent]])


async def _make_up(hub: Hub, keys: Keys, agent: str, n: int, groups: bool = False) -> None:
    """`n` consumers of the agent's group (`groups`: `n` groups) made up on its inbox."""
    r = hub.transport._client
    inbox = keys.inbox(agent)
    await r.xgroup_create(inbox, agent, "0", mkstream=True)
    await r.xgroup_createconsumer(inbox, agent, f"{agent}-1")
    async with r.pipeline(transaction=False) as pipe:
        for i in range(n):
            if groups:
                pipe.xgroup_create(inbox, f"g{i}", "0")
            else:
                pipe.xgroup_createconsumer(inbox, agent, f"c{i}")
        await pipe.execute()


async def test_a_long_consumer_list_is_not_read(hub: Hub, keys: Keys, monkeypatch) -> None:
    await _online(hub, "crowded")
    await _online(hub, "plain")
    await _make_up(hub, keys, "crowded", MADE_UP)
    await _make_up(hub, keys, "plain", 0)
    asked: list[Any] = []
    consumers_of = hub.transport.consumers_of

    async def spy(groups: Any) -> Any:
        asked.extend(groups)
        return await consumers_of(groups)

    monkeypatch.setattr(hub.transport, "consumers_of", spy)
    described = {a["agent"]: a for a in await hub.registry.describe()}
    assert asked == [(keys.inbox("plain"), "plain")]  # not one row of the long list
    crowded, plain = described["crowded"], described["plain"]
    assert (crowded["consumers"], crowded["liveness_read"]) == (MADE_UP + 1, False)
    assert crowded["online"] and crowded["replicas"][0]["idle_ms"] is None  # as it said
    assert (plain["consumers"], plain["liveness_read"]) == (1, True)
    assert plain["online"] and plain["replicas"][0]["idle_ms"] is not None
    shown = {a.agent: a for a in (await list_agents(hub.registry)).data}  # GET /v1/agents
    assert (shown["crowded"].consumers, shown["crowded"].liveness_read) == (MADE_UP + 1, False)
    assert (shown["plain"].consumers, shown["plain"].liveness_read) == (1, True)


async def test_upkeep_drops_made_up_idle_consumers_a_bounded_number_a_round(
    hub: Hub, keys: Keys, monkeypatch
) -> None:
    monkeypatch.setattr(upkeep, "CONSUMER_IDLE_MS", 0)
    monkeypatch.setattr(upkeep, "CONSUMERS_DROPPED_MAX", 500)
    await _online(hub, "crowded")
    await _make_up(hub, keys, "crowded", MADE_UP)
    r, inbox = hub.transport._client, keys.inbox("crowded")
    await r.xadd(inbox, {"m": b"x"})  # a made-up consumer holding work keeps it
    await r.xreadgroup("crowded", "holder", {inbox: ">"}, count=1)
    assert 0 < (await hub.upkeep.sweep()).consumers <= 500  # the bound of a round
    await hub.upkeep.sweep()
    left = {row["name"] for row in await r.xinfo_consumers(inbox, "crowded")}
    assert left == {b"crowded-1", b"holder"}  # the replica the registry knows, and work
    assert (await hub.upkeep.sweep()).consumers == 0


async def test_a_consumer_that_reads_after_it_was_listed_keeps_what_it_read(
    hub: Hub, keys: Keys
) -> None:
    """Upkeep lists idle consumers, then drops them: one that read an entry in between (a
    replica whose setup outlasted the idle time before it said status.online) lost it, as
    DELCONSUMER takes its pending entries out of the group, and the GO was never
    delivered again. The drop looks at what it holds in the same script."""
    r, t = hub.transport._client, hub.transport
    inbox, group = keys.inbox("slow-setup"), "slow-setup"
    await r.xgroup_create(inbox, group, "0", mkstream=True)
    await r.xgroup_createconsumer(inbox, group, "new-replica")
    await r.xgroup_createconsumer(inbox, group, "made-up")
    names = await t.idle_consumers(inbox, group, keep=set(), min_idle_ms=0, most=10)
    assert sorted(names) == ["made-up", "new-replica"]
    await r.xadd(inbox, {"m": b"a GO"})
    await r.xreadgroup(group, "new-replica", {inbox: ">"})  # it starts reading meanwhile
    assert await t.drop_consumers(inbox, group, names) == 1  # made-up only
    (left,) = await r.xinfo_consumers(inbox, group)
    assert (left["name"], left["pending"]) == (b"new-replica", 1)


async def test_a_long_group_list_is_not_read(hub: Hub, keys: Keys) -> None:
    """An agent may make up groups on its own inbox too (its ACL grants XGROUP CREATE, for
    its own): 100,000 cost the hub's loop 0.45 s a listing, and trimming then asked XPENDING
    of each. Past GROUPS_READ_MAX they are counted (XINFO STREAM), not listed."""
    await _online(hub, "grouped")
    await _online(hub, "plain")
    await _make_up(hub, keys, "grouped", _upkeep.GROUPS_READ_MAX, groups=True)
    await _make_up(hub, keys, "plain", 0, groups=True)
    asked: list[Any] = []
    consumers_of = hub.transport.consumers_of

    async def spy(groups: Any) -> Any:
        asked.extend(groups)
        return await consumers_of(groups)

    hub.transport.consumers_of = spy  # type: ignore[method-assign]
    described = {a["agent"]: a for a in await hub.registry.describe()}
    assert asked == [(keys.inbox("plain"), "plain")]
    grouped, plain = described["grouped"], described["plain"]
    assert (grouped["consumers"], grouped["liveness_read"]) == (None, False)
    assert grouped["online"]  # as it said
    assert (plain["consumers"], plain["liveness_read"]) == (1, True)
    shown = {a.agent: a for a in (await list_agents(hub.registry)).data}  # GET /v1/agents
    assert (shown["grouped"].consumers, shown["grouped"].liveness_read) == (None, False)


async def test_upkeep_drops_made_up_groups_a_bounded_number_a_round(
    hub: Hub, keys: Keys, monkeypatch
) -> None:
    monkeypatch.setattr(upkeep, "GROUPS_DROPPED_MAX", 500)
    await _online(hub, "grouped")
    await _make_up(hub, keys, "grouped", 800, groups=True)
    r, inbox = hub.transport._client, keys.inbox("grouped")
    await r.xadd(inbox, {"m": b"a GO"})  # the agent's own group holds it: kept
    await r.xreadgroup("grouped", "grouped-1", {inbox: ">"}, count=1)
    assert (await hub.upkeep.sweep()).groups == 500  # the bound of a round
    assert (await hub.upkeep.sweep()).groups == 300
    (left,) = await r.xinfo_groups(inbox)
    assert (left["name"], left["pending"]) == (b"grouped", 1)
    assert (await hub.upkeep.sweep()).groups == 0


async def test_a_made_up_group_does_not_hold_the_inbox_trimming_back(hub: Hub, keys: Keys) -> None:
    """A group made at "0" that reads nothing held every entry the hub wrote to the inbox
    for ever: only the agent's own group counts, and never past what it has pending."""
    r, t, inbox = hub.transport._client, hub.transport, keys.inbox("holder")
    await r.xgroup_create(inbox, "holder", "0", mkstream=True)
    await r.xgroup_create(inbox, "made-up", "0")
    ids = [await r.xadd(inbox, {"m": str(i)}) for i in range(10)]
    read = await r.xreadgroup("holder", "holder-1", {inbox: ">"}, count=10)
    await r.xack(inbox, "holder", *ids[:4], *ids[5:])  # the fifth is still pending
    assert await t.trim(inbox, maxlen=2, grouped_only=True) == 0  # all groups: held at "0"
    assert await t.trim(inbox, maxlen=2, grouped_only=True, group="holder") == 4
    assert [e[0] for e in await r.xrange(inbox)] == ids[4:]  # not past the pending one
    assert len(read[0][1]) == 10


@pytest.mark.parametrize("made_up", [3, 30])
async def test_on_a_cluster_made_up_groups_are_dropped_and_the_inbox_trimmed(
    cluster_redis: Any, keys: Keys, made_up: int
) -> None:
    """On a cluster the groups were not listed (a thread's client is made from a single
    server's options), so past GROUPS_READ_MAX they stayed, and the inbox was never trimmed
    again. They are listed on the loop there, and dropped."""
    r = cluster_redis
    transport = Transport(r, keys, retry_s=0)
    out, inbox = keys.out("ag"), keys.inbox("ag")
    await r.xadd(out, {"m": b"x"})
    await r.xgroup_create(inbox, "ag", "$", mkstream=True)
    for i in range(made_up):
        await r.xgroup_create(inbox, f"made{i}", "0")
    for _ in range(50):
        await r.xadd(inbox, {"m": b"cue"})
    read = await r.xreadgroup("ag", "ag-1", {inbox: ">"}, count=50)
    await r.xack(inbox, "ag", *[entry_id for entry_id, _ in read[0][1]])
    kept = Upkeep(transport, StateStore(Storage(r), keys), keys, lambda: [out],
                  stream_maxlen=10, retention_s=None)  # fmt: skip
    assert (await kept.sweep()).groups == made_up
    assert [row["name"] for row in await r.xinfo_groups(inbox)] == [b"ag"]
    assert await r.xlen(inbox) == 10
