"""The fenced commit: refused under a stale token, applied once even when retried."""

from __future__ import annotations

from typing import Any

import pytest

from hub.store.commit import COMMIT_ID_TTL_MS, FencedCommit, flat
from protocols.errors import StaleLeader
from protocols.keys import Keys
from protocols.transport import Storage

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
