"""Every blocking read ends when its reply never comes (a half-dead link: the server ran
the read, its answer is lost): after its block and REPLY_GRACE_S, as Unreachable, as a lost
connection would, and the next read works. Before, only the streams' reads of one slot had
this deadline: the command server's, the API's answers, the event fanout's, a specialist's
broadcast reads, the conformance kit's and a cluster's reads over many slots waited for
ever, and what they served stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols.errors import Unreachable
from protocols.keys import Keys, key_slot
from protocols.transport import Probe, Storage, Transport, _gateway
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis
BLOCK_MS = 200

Read = Callable[[Transport, Storage, Keys], Awaitable[list[Any]]]
READS: dict[str, Read] = {
    "xread": lambda t, db, k: db.xread(k.run_events("r"), "0-0", 10, BLOCK_MS),
    "xread_many": lambda t, db, k: db.xread_many({k.run_events("r"): "0-0"}, 10, BLOCK_MS),
    "xdel_then_xread": lambda t, db, k: db.xdel_then_xread(
        k.run_events("r"), ["1-1"], "0-0", 10, BLOCK_MS
    ),
    "xreadgroup": lambda t, db, k: db.xreadgroup(k.commands(), "hub", "c1", ">", 10, BLOCK_MS),
    "read_broadcast": lambda t, db, k: t.read_broadcast("0-0", block_ms=BLOCK_MS),
    "read_after": lambda t, db, k: Probe(t._client, k).read_after(
        k.run_events("r"), "0-0", block_ms=BLOCK_MS
    ),
}


@pytest.mark.parametrize("name", list(READS))
async def test_a_read_whose_reply_never_comes_ends_and_the_next_one_reads(
    redis_server: EmbeddedServer, keys: Keys, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    read = READS[name]
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, direct):
        await direct.xgroup_create(keys.commands(), "hub", id="0", mkstream=True)
        transport, db = Transport(lossy, keys, retry_s=0), Storage(lossy, retry_s=0)
        proxy.arm(b"XREAD", "swallow")  # XREAD and XREADGROUP alike
        async with asyncio.timeout(10):  # the test's own bound: before, the read never ended
            with pytest.raises(Unreachable, match=r"no reply within 0\.7 s"):
                await read(transport, db, keys)
        assert proxy.fired == ["swallow"]
        for stream in (keys.run_events("r"), keys.commands(), keys.broadcast):
            await direct.xadd(stream, {"m": b"after"})
        async with asyncio.timeout(10):
            assert len(await read(transport, db, keys)) == 1


async def test_a_clusters_read_over_many_slots_reads_a_silent_slot_again(
    redis_cluster: EmbeddedCluster, cluster_redis: Any, keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """One slot's read (of several, each in flight on its own) whose reply never comes:
    it ends after its block and the grace, and that slot is read again. Before, its read
    stayed in flight for ever, and nothing of its streams was read again."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    quiet, other = keys.inbox("quiet"), keys.inbox("other")
    assert key_slot(quiet) != key_slot(other)
    transport = Transport(cluster_redis, keys, retry_s=0)
    for stream in (quiet, other):
        await transport.ensure_group(stream, "hub")
    real = cluster_redis.xreadgroup
    silent = asyncio.Event()  # set: the quiet slot's reads answer again

    async def half_dead(group: Any, consumer: Any, streams: Any, **kw: Any) -> Any:
        names = {s if isinstance(s, bytes) else s.encode() for s in streams}
        if quiet.encode() in names and not silent.is_set():
            await asyncio.Event().wait()  # the reply that never comes
        return await real(group, consumer, streams, **kw)

    monkeypatch.setattr(cluster_redis, "xreadgroup", half_dead)
    async with asyncio.timeout(10):
        with pytest.raises(Unreachable, match=r"no reply within 0\.7 s"):
            while True:  # the other slot answers (empty) meanwhile
                await transport.read_group([quiet, other], "hub", "c1", block_ms=BLOCK_MS)
    silent.set()
    await cluster_redis.xadd(quiet, {"m": b"x"})
    got: list[Any] = []
    async with asyncio.timeout(10):
        while not got:
            got = await transport.read_group([quiet, other], "hub", "c1", block_ms=BLOCK_MS)
    assert [d.stream for d in got] == [quiet]
    await transport.close()
