"""Storage on a real Redis Cluster: commands over keys of many slots (MGET, DEL, a MULTI
sent per slot, XREAD over many streams) answer as on one server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocols.keys import Keys, key_slot
from protocols.transport import Pipeline, Storage

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


async def test_xread_over_many_slots_wakes_on_any(cluster_redis: Any, keys: Keys) -> None:
    """One XREAD per slot, the first answer wins and the others are cancelled: repeated,
    the client's connections stay sound."""
    db = Storage(cluster_redis)
    streams = [keys.run_events(f"r{i}") for i in range(8)]
    last = {stream: "0-0" for stream in streams}
    for round_ in range(6):
        target = streams[(round_ * 3) % len(streams)]
        reader = asyncio.create_task(db.xread_many(dict(last), 10, 3000))
        await asyncio.sleep(0.05)
        await db.xadd(target, {"e": f"{round_}"})
        found = await asyncio.wait_for(reader, 5)
        assert [(stream, [f[b"e"] for _, f in entries]) for stream, entries in found] == [
            (target, [str(round_).encode()])
        ]
        last[target] = found[0][1][-1][0]
    assert await db.xread_many(dict(last), 10, 50) == []
