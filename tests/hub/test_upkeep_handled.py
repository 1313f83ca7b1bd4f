"""An out stream keeps only what the hub has not yet read and acknowledged: upkeep trims
the rest, whatever the count cap (an agent's acknowledged entries, of up to a message's
size each, used to stay until CALLBOARD_STREAM_MAXLEN of them)."""

from __future__ import annotations

import time

import pytest

from hub import upkeep
from hub.service import Hub
from protocols.keys import Keys
from tests.helpers import eventually

pytestmark = pytest.mark.redis
KIB = 1024


@pytest.fixture(autouse=True)
def _nothing_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the hub handled goes at once (it stays HANDLED_KEPT_S for whoever reads it)."""
    monkeypatch.setattr(upkeep, "HANDLED_KEPT_S", 0.0)


async def _handled(hub: Hub, stream: str) -> bool:
    groups = await hub.transport._client.xinfo_groups(stream)
    return any(g["name"] == b"hub" and g["lag"] == 0 and g["pending"] == 0 for g in groups)


async def test_out_streams_keep_only_what_the_hub_has_not_handled(hub: Hub, keys: Keys) -> None:
    r, out = hub.transport._client, keys.out("bulky")
    for _ in range(5):  # oversized: dead-lettered (a few KiB kept there), acknowledged
        await r.xadd(out, {"m": b"x" * (hub.settings.max_message_bytes + KIB)})
    await eventually(lambda: out in hub.router.streams, 10)
    await eventually(lambda: _handled(hub, out), 10)
    await hub.upkeep.sweep()
    assert await r.xlen(out) == 0
    assert len(await hub.transport.dead_letters()) == 5  # what the letters keep stays


async def test_an_entry_the_hub_has_not_acknowledged_is_kept(hub: Hub, keys: Keys) -> None:
    r, out = hub.transport._client, keys.out("slow")
    await r.xgroup_create(out, "hub-p9", "0", mkstream=True)  # a reader behind the hub
    await r.xadd(out, {"m": b"not json"})
    await eventually(lambda: out in hub.router.streams, 10)
    await eventually(lambda: _handled(hub, out), 10)
    await hub.transport.trim_handled(out)  # (a sweep would drop the stale group)
    assert await r.xlen(out) == 1
    await r.xreadgroup("hub-p9", "h", {out: ">"})  # read, pending: still kept
    assert await hub.transport.trim_handled(out) == 0
    (row,) = await r.xpending_range(out, "hub-p9", "-", "+", 1)
    await r.xack(out, "hub-p9", row["message_id"])
    assert await hub.transport.trim_handled(out) == 1


async def test_a_stream_not_yet_read_by_every_partitions_group_is_kept(
    hub: Hub, keys: Keys
) -> None:
    """With several partitions, each reads every out stream in a group of its own, made
    when its leader finds the stream (at "0": from its start). Trimmed to the groups there
    are, a stream would lose to a partition whose group comes a moment later what the
    others had handled: replies about its runs."""
    r, out = hub.transport._client, keys.out("early")
    await r.xadd(out, {"m": b"not json"})
    await eventually(lambda: out in hub.router.streams, 10)
    await eventually(lambda: _handled(hub, out), 10)
    assert await hub.transport.trim_handled(out, groups=2) == 0  # one partition's group to come
    assert await r.xlen(out) == 1
    assert await hub.transport.trim_handled(out, groups=1) == 1


async def test_an_entry_of_the_largest_sequence_stops_no_sweep(hub: Hub, keys: Keys) -> None:
    """An agent may XADD any id to its own out stream: once the hub had read one whose
    sequence is 2^64-1, the trim asked Redis for the id after it, which Redis refuses, and
    every sweep ended there (no other agent's streams trimmed, no run or escalation
    forgotten). The id after it is the next millisecond's first; and one agent's streams
    refused are passed over, not the round."""
    r = hub.transport._client
    honest, evil = keys.out("zz-honest"), keys.out("aa-evil")  # the evil one sorted first
    for _ in range(3):
        await r.xadd(honest, {"m": b"not json"})
    ms = int(time.time() * 1000) + 1000
    await r.xadd(evil, {"m": b"not json"}, id=f"{ms}-18446744073709551615")
    await eventually(lambda: honest in hub.router.streams and evil in hub.router.streams, 10)
    await eventually(lambda: _handled(hub, honest), 10)
    await eventually(lambda: _handled(hub, evil), 10)
    await hub.upkeep.sweep()
    assert await r.xlen(honest) == 0 and await r.xlen(evil) == 0


async def test_what_the_hub_handled_lately_stays_to_be_read(hub: Hub, keys: Keys) -> None:
    """Whoever reads an out stream (an operator, a test measuring what an agent sent) finds
    what the hub handled in the last HANDLED_KEPT_S; older handled entries go."""
    r, out = hub.transport._client, keys.out("recent")
    await r.xadd(out, {"m": b"not json"}, id="1-0")  # handled, long ago
    await r.xadd(out, {"m": b"not json"})  # handled, now
    await eventually(lambda: out in hub.router.streams, 10)
    await eventually(lambda: _handled(hub, out), 10)
    assert await hub.transport.trim_handled(out, keep_ms=60_000) == 1
    assert await r.xlen(out) == 1
