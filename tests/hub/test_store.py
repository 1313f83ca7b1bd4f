"""The fenced commit: refused under a stale token, applied once even when retried."""

from __future__ import annotations

from typing import Any

import pytest

from hub.store import COMMIT_ID_TTL_MS, StateStore, _flat
from protocols.keys import Keys

pytestmark = pytest.mark.redis


async def _script(store: StateStore, commit_key: str, lease: str, ops: list[list[str]]) -> Any:
    args = [lease, COMMIT_ID_TTL_MS, *_flat(ops)]
    return await store._commit(keys=[store.keys.leader(), commit_key], args=args)


async def test_commit_is_fenced_and_applied_once(real_redis: Any, keys: Keys) -> None:
    store = StateStore(real_redis, keys)
    await real_redis.set(store.keys.leader(), "hub-a:7")
    stream = keys.inbox("agent")
    go = [["XADD", stream, "*", "m", "{}"]]
    commit_key = keys.commit("c1")
    assert await _script(store, commit_key, "hub-a:7", go) == 1
    assert await _script(store, commit_key, "hub-a:7", go) == -1  # a retry: not applied again
    assert await real_redis.xlen(stream) == 1
    with pytest.raises(Exception, match="STALE"):
        await _script(store, keys.commit("c2"), "hub-a:6", go)  # old token
    assert await real_redis.xlen(stream) == 1
