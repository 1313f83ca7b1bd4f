"""The fenced commit: refused under a stale token, applied once even when retried."""

from __future__ import annotations

from typing import Any

import pytest

from hub.store.commit import COMMIT_ID_TTL_MS, FencedCommit, flat
from protocols.errors import OutOfMemory, StaleLeader
from protocols.keys import Keys
from protocols.transport import Storage
from tests.helpers import run_out_of_memory

pytestmark = pytest.mark.redis


async def _script(commit: FencedCommit, commit_key: str, lease: str, ops: list[list[str]]) -> Any:
    keys = [commit.keys.leader(), commit_key]
    args = [lease, COMMIT_ID_TTL_MS, *flat(ops, keys)]
    return await commit.script(keys, args)


async def test_commit_is_fenced_and_applied_once(real_redis: Any, keys: Keys) -> None:
    commit = FencedCommit(Storage(real_redis), keys)
    await real_redis.set(keys.leader(), "hub-a:7")
    stream = keys.inbox("agent")
    go = [["XADD", stream, "*", "m", "{}"]]
    commit_key = keys.commit("c1")
    assert await _script(commit, commit_key, "hub-a:7", go) == 1
    assert await _script(commit, commit_key, "hub-a:7", go) == -1  # a retry: not applied again
    assert await real_redis.xlen(stream) == 1
    with pytest.raises(StaleLeader, match="STALE"):
        await _script(commit, keys.commit("c2"), "hub-a:6", go)  # old token
    assert await real_redis.xlen(stream) == 1


async def test_a_commit_that_landed_is_not_called_refused_once_the_lease_moved(
    real_redis: Any, keys: Keys
) -> None:
    """Its reply lost, the lease moved before the retry: the step landed under the lease
    then, so the retry is told so (a STALE here would say it was applied nowhere)."""
    commit = FencedCommit(Storage(real_redis), keys)
    await real_redis.set(keys.leader(), "hub-a:7")
    go = [["XADD", keys.inbox("agent"), "*", "m", "{}"]]
    assert await _script(commit, keys.commit("c1"), "hub-a:7", go) == 1
    await real_redis.set(keys.leader(), "hub-b:8")
    assert await _script(commit, keys.commit("c1"), "hub-a:7", go) == -1
    assert await real_redis.xlen(keys.inbox("agent")) == 1


async def test_commit_skips_a_stream_whose_ids_are_exhausted(real_redis: Any, keys: Keys) -> None:
    """An XADD of the maximum id leaves `*` no room: that one operation is skipped, checked
    before anything is written, and the rest of the step still lands whole."""
    commit = FencedCommit(Storage(real_redis), keys)
    await real_redis.set(keys.leader(), "hub-a:7")
    blocked, fine, run = keys.inbox("hostile"), keys.inbox("other"), keys.run("r1")
    await real_redis.xadd(blocked, {"m": "x"}, id="18446744073709551615-18446744073709551615")
    await real_redis.set(keys.inbox("wrongtype"), "not a stream")
    ops = [
        ["HSET", run, "status", "running"],
        ["XADD", blocked, "*", "m", "{}"],
        ["XADD", keys.inbox("wrongtype"), "*", "m", "{}"],
        ["XADD", fine, "*", "m", "{}"],
    ]
    reply = await _script(commit, keys.commit("c1"), "hub-a:7", ops)
    assert reply[0] == 2 and {k.decode() for k in reply[1:]} == {blocked, keys.inbox("wrongtype")}
    assert await real_redis.hget(run, "status") == b"running"
    assert await real_redis.xlen(fine) == 1 and await real_redis.xlen(blocked) == 1


async def test_xadds_appends_a_steps_entries_to_one_stream_in_order(
    real_redis: Any, keys: Keys
) -> None:
    """XADDS: many entries of one field, in their order, trimmed when asked; a stream that
    cannot take them is named once and skipped, and the rest of the step lands."""
    commit = FencedCommit(Storage(real_redis), keys)
    await real_redis.set(keys.leader(), "hub-a:7")
    inbox, events, blocked = keys.inbox("agent"), keys.run_events("r1"), keys.inbox("hostile")
    await real_redis.xadd(blocked, {"m": "x"}, id="18446744073709551615-18446744073709551615")
    for i in range(200):  # a full node of entries, so MAXLEN ~ has one to drop
        await real_redis.xadd(events, {"e": f"old-{i}"})
    ops: list[list[Any]] = [
        ["XADDS", inbox, "", "m", "a", "b", "c"],
        ["XADDS", blocked, "", "m", "d", "e"],
        ["XADDS", events, "5", "e", "x", "y"],
        ["SET", keys.paused, "after"],
    ]
    reply = await _script(commit, keys.commit("c1"), "hub-a:7", ops)
    assert reply[0] == 6 and [k.decode() for k in reply[1:]] == [blocked]
    assert [f[b"m"] for _, f in await real_redis.xrange(inbox)] == [b"a", b"b", b"c"]
    assert await real_redis.xlen(blocked) == 1
    kept = [f[b"e"] for _, f in await real_redis.xrange(events)]
    assert kept[-2:] == [b"x", b"y"] and len(kept) < 202  # appended last, the oldest trimmed
    assert await real_redis.get(keys.paused) == b"after"


async def test_commit_under_oom_writes_nothing(
    real_redis: Any, keys: Keys, redis_server: Any
) -> None:
    """Out of memory, the declared write script is refused before it runs (OutOfMemory)."""
    commit = FencedCommit(Storage(real_redis), keys)
    await real_redis.set(keys.leader(), "hub-a:7")
    restore = await run_out_of_memory(real_redis)
    try:
        with pytest.raises(OutOfMemory, match="out of memory"):
            await _script(commit, keys.commit("c1"), "hub-a:7", [["SET", keys.paused, "x"]])
    finally:
        await restore()
    assert not await real_redis.exists(keys.paused, keys.commit("c1"))
