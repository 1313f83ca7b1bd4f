"""An attempt's claim (specialists.work.RUNNING) under what review found: a copy and the
entry it copied on one replica, Redis refusing writes, a cluster's client."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocols.keys import Keys
from protocols.messages import MessageType
from protocols.settings import Settings
from protocols.transport import Transport
from specialists.markers import DoneMarkers
from specialists.work import RUNNING
from tests.helpers import eventually
from tests.specialists.conftest import AGENT, DeafTransport, HubSide, Starter
from tests.specialists.sample import Scripted

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("scripted")]

M = MessageType
CLAIM = f"run-1:CUE-1:1:{RUNNING}"


async def test_the_entry_a_copy_copied_reclaimed_on_the_same_replica_is_run(
    start: Starter, hub: HubSide, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica died holding the GO and its claim; r2 reads the copy, and while the copy's
    claim round trip is under way it reclaims the dead replica's entry. Before, r2's
    memory of the attempt (its `Seen`) took that entry for a duplicate and acked it, the
    copy found the claim the other entry's and was acked too: nobody ran the attempt."""
    original = DoneMarkers.begin

    async def slow(self: DoneMarkers, claim: str, holder: str, tokens: list[str]) -> Any:
        await asyncio.sleep(1.0)  # a slow round trip (a batch ahead of it, Redis busy)
        return await original(self, claim, holder, tokens)

    monkeypatch.setattr(DoneMarkers, "begin", slow)
    inbox = hub.keys.inbox(AGENT)
    await hub.t.ensure_group(inbox, AGENT)
    go = await hub.go("CUE-1", plain=True)
    [held] = await hub.t.read_group([inbox], AGENT, "ghost", block_ms=None)  # ghost dies
    await hub.t._client.set(hub.keys.done(AGENT, CLAIM), held.entry_id, px=60_000)
    await hub.t.publish(inbox, go)  # the copy
    await start(Scripted, "r2", settings_=fast.model_copy(update={"min_idle_ms": 800}))
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=10)
    assert done.payload.replica == "r2"
    await eventually(lambda: _none_pending(hub), message="both entries acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1


async def test_a_copy_read_by_the_replica_running_the_attempt_waits_for_it(
    start: Starter, hub: HubSide
) -> None:
    """One replica reads a GO and, while it runs, a copy of it: the copy is handled once the
    work is done (its outcome found: acked), not beside it, and the work's claim and
    registration stay its own meanwhile."""
    spec = await start(Scripted, "r1")
    go = await hub.go("CUE-1", block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    await hub.t.publish(hub.keys.inbox(AGENT), go)  # the copy
    await hub.warning("CUE-2")  # read after the copy
    await hub.wait(M.ACK_WARNING, "CUE-2")
    assert await hub.pending() == 2  # the GO, and its copy waiting for it
    dispatch = spec._runtime.dispatch
    [(key, entry)] = dispatch.claims.items()
    assert await hub.t._client.get(hub.keys.done(AGENT, CLAIM)) == entry.encode()
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    await eventually(lambda: _none_pending(hub), message="the GO and its copy acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert len(await hub.of(M.STATUS_COMPLETED, "CUE-1")) == 1
    assert key not in dispatch.working and key not in dispatch.claims


async def test_a_go_read_while_redis_refuses_writes_runs_without_its_claim(
    deaf: DeafTransport, start: Starter, hub: HubSide, settings: Settings
) -> None:
    """The claim is a write; Redis full (`maxmemory`, `noeviction`) refuses it, and the
    reads that share its round trip failed with it. The GO then failed to start and waited
    for a reclaim (`MIN_IDLE`, 30 s by default). It now runs on its markers' word, as
    before claims; its outcome lands once Redis takes writes again."""
    await start(Scripted, "r1", transport=deaf)
    deaf.deaf.set()
    await eventually(lambda: deaf.deaf_reads, message="r1 reads nothing now")
    await hub.go("CUE-1", plain=True)
    client = hub.t._client
    policy = (await client.config_get("maxmemory-policy"))["maxmemory-policy"]
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("maxmemory", "1")
    try:
        deaf.deaf.clear()
        await eventually(
            lambda: ("execute", "CUE-1") in Scripted.calls, message="run while Redis is full"
        )
    finally:
        await client.config_set("maxmemory", "0")
        await client.config_set("maxmemory-policy", policy)
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    await eventually(lambda: _none_pending(hub), message="the GO acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1


async def test_claims_on_a_cluster(cluster_redis: Any, keys: Keys) -> None:
    """redis-py's pipeline for a cluster read the reply of `SET ... NX GET` as a flag: a
    claim already held raised AttributeError, so a copy was never acked and a takeover
    never ran. The claim is SET NX PX, then GET."""
    markers = DoneMarkers(Transport(cluster_redis, keys), keys, "a", ttl_s=60, lease_ms=60_000)
    assert await markers.begin("claim", "1-0", ["settled"]) == ("1-0", [None])
    assert await markers.begin("claim", "1-0", []) == ("1-0", [])  # the same entry
    assert await markers.begin("claim", "2-0", []) == ("1-0", [])  # a copy
    await markers.renew({"claim": "1-0"})
    assert 50_000 < await cluster_redis.pttl(keys.done("a", "claim")) <= 60_000
    assert await markers.read_each(["claim"]) == ["1-0"]


async def _none_pending(hub: HubSide) -> bool:
    return await hub.pending() == 0


async def test_an_outcome_landing_between_the_claims_two_trips_is_seen(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy finds the claim held; the other entry's outcome (its marker set, its claim
    deleted) lands before the copy reads who holds it. Found by review: the claim was read
    after the markers, found gone and taken for free, and the copy ran beside a completed
    attempt. The markers are read again after the claim now, and show the outcome."""
    markers = DoneMarkers(Transport(real_redis, keys), keys, "a", ttl_s=60)
    assert await markers.begin("claim", "1-0", ["settled"]) == ("1-0", [None])
    real, trips = markers._db.commands, []

    async def outcome_after_the_first(op: str, commands: Any, **kw: Any) -> Any:
        replies = await real(op, commands, **kw)
        trips.append(op)
        if len(trips) == 1:  # the other entry's outcome lands now
            await real_redis.set(keys.done("a", "settled"), b"1")
            await real_redis.delete(keys.done("a", "claim"))
        return replies

    monkeypatch.setattr(markers._db, "commands", outcome_after_the_first)
    holder, [settled] = await markers.begin("claim", "2-0", ["settled"])
    assert settled == "1" and holder != "2-0"  # the copy is acked, not run
    assert len(trips) == 2
