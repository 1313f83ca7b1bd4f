"""Storage on a real Redis Cluster: commands over keys of many slots (MGET, DEL, a MULTI
sent per slot, XREAD over many streams) answer as on one server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterNode
from redis.exceptions import ClusterDownError
from redis.exceptions import ConnectionError as RedisConnectionError

from callboard.embedded_cluster import EmbeddedCluster
from protocols.errors import GroupMissing
from protocols.keys import Keys, key_slot
from protocols.transport import Pipeline, Storage, Transport

pytestmark = pytest.mark.redis


async def test_mget_and_delete_over_many_slots(cluster_redis: Any, keys: Keys) -> None:
    db = Storage(cluster_redis)
    names = [keys.escalation(f"e{i}") for i in range(20)]
    assert len({key_slot(k) for k in names}) > 10
    for i, name in enumerate(names[::2]):
        await db.set(name, f"v{i}")
    assert await db.mget(names) == [
        f"v{i // 2}".encode() if i % 2 == 0 else None for i in range(len(names))
    ]
    assert await db.delete(*names) == 10
    assert await db.mget(names) == [None] * len(names)


async def test_a_multi_over_many_slots_is_one_per_slot(cluster_redis: Any, keys: Keys) -> None:
    db = Storage(cluster_redis)
    a, a2, b = keys.cuelist("build"), keys.cuelist_versions("build"), keys.cuelists

    def build(pipe: Pipeline) -> None:
        pipe.hsetnx(a, "v1", "doc")
        pipe.zadd(b, {"build": 1.0})
        pipe.zadd(a2, {"v1": 1.0}, nx=True)
        pipe.hsetnx(a, "v1", "again")

    assert key_slot(a) == key_slot(a2) != key_slot(b)
    assert await db.pipeline("STORE", build, transaction=True) == [1, 1, 1, 0]
    assert await db.hget(a, "v1") == b"doc"
    assert await db.zrange(b, 0, -1) == [b"build"]


@pytest.mark.parametrize("runs", [2, 60], ids=["raced", "polled"])
async def test_xread_over_many_slots_wakes_on_any(
    redis_cluster: EmbeddedCluster, keys: Keys, runs: int
) -> None:
    """A few slots are raced as blocking reads (the others cancelled), many are polled on a
    pipeline: either way a new event in any slot wakes the read, on a pool as small as the
    event fanout's (4 connections a node), and the connections stay sound."""
    db = Storage.dedicated(redis_cluster.url, max_connections=4)
    streams = [keys.run_events(f"r{i}") for i in range(runs)]
    assert len({key_slot(s) for s in streams}) == runs
    last = dict.fromkeys(streams, "0-0")
    try:
        for round_ in range(6):
            target = streams[(round_ * 7) % len(streams)]
            reader = asyncio.create_task(db.xread_many(dict(last), 10, 3000))
            await asyncio.sleep(0.1)
            await db.xadd(target, {"e": f"{round_}"})
            found = await asyncio.wait_for(reader, 5)
            assert [(stream, [f[b"e"] for _, f in entries]) for stream, entries in found] == [
                (target, [str(round_).encode()])
            ]
            last[target] = found[0][1][-1][0]
        assert await db.xread_many(dict(last), 10, 50) == []
    finally:
        await db.delete(*streams)
        await db.close()


@pytest.mark.parametrize("where", ["server", "cluster"])
async def test_a_read_deletes_what_the_last_one_read_in_the_same_trip(
    where: str, real_redis: Any, cluster_redis: Any, keys: Keys
) -> None:
    db = Storage(real_redis if where == "server" else cluster_redis)
    stream = keys.answers("asker-1")
    ids = [await db.xadd(stream, {"i": str(n)}) for n in range(3)]
    assert [e for e, _ in await db.xdel_then_xread(stream, [], "0-0", 10, 100)] == ids
    rows = await db.xdel_then_xread(stream, ids[:1], ids[0], 10, 100)  # the one read
    assert [e for e, _ in rows] == ids[1:]
    assert [e for e, _ in await db.xrange(stream)] == ids[1:]
    assert await db.xdel_then_xread(stream, ids[1:], ids[2], 10, 50) == []  # blocked, timed out
    assert await db.xrange(stream) == []


async def test_a_missing_group_in_a_pipeline_is_told_as_such(
    cluster_redis: Any, keys: Keys
) -> None:
    """redis-py's cluster pipeline rewrites an error's text ("Command # 1 (...) of pipeline
    caused error: ..."), so its NOGROUP was not read: a group deleted under a reclaim,
    a renewal or a trim was a TransportError, and the group was not made again."""
    stream = keys.inbox("agent-a")
    await cluster_redis.xadd(stream, {"m": "x"})
    with pytest.raises(GroupMissing):
        await Storage(cluster_redis).commands("XPENDING", [("XPENDING", stream, "nogroup")])


@pytest.mark.parametrize(
    "lost",
    [RedisConnectionError("Connection closed by server."),
     ClusterDownError("CLUSTERDOWN The cluster is down")],
)  # fmt: skip
async def test_a_lost_connection_in_a_pipeline_is_retried_not_read_as_an_answer(
    cluster_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch, lost: Exception
) -> None:
    """A cluster's pipeline executed with `raise_on_error=False` hands a lost connection
    back as a command's reply (one server raises it), and a cluster between states too:
    the listing of entries a former leader holds read it as "nothing held there", and the
    router waited out `MIN_IDLE` before taking them over. It is raised now, and the call
    retried."""
    t = Transport(cluster_redis, keys)
    stream = keys.out("agent-a")
    await t.ensure_group(stream, "hub")
    await t.publish(stream, b"{}")
    await t.read_group([stream], "hub", "old-leader", block_ms=None)
    real, failed = ClusterNode.parse_response, []

    async def flaky(self: Any, connection: Any, command: str, **kw: Any) -> Any:
        if command == "XPENDING" and not failed:
            failed.append(command)
            await connection.disconnect()
            raise lost
        return await real(self, connection, command, **kw)

    monkeypatch.setattr(ClusterNode, "parse_response", flaky)
    assert await t.held_elsewhere([stream], "hub", "me") == {stream}
    assert failed == ["XPENDING"]
