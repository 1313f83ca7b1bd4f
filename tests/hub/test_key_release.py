"""Letting go of an idempotency key after a refusal: only the claim that was made, in one step.

A refused start or command frees its key for another try. Between reading the key and
deleting it, another request may claim it, or the leader may file a reply under it; a
release must keep what landed in between (a real server: the compare-and-delete is a
script there).
"""

from __future__ import annotations

from typing import Any

import pytest

from hub.store.idempotency import CommandHold, CommandKeys, IdempotencyHold, IdempotencyStore
from protocols.keys import Keys
from protocols.transport import Storage

pytestmark = pytest.mark.redis


class _Interleaved(Storage):
    """A Storage after whose first Redis call, before the caller goes on, another client
    writes `between`: whatever a release reads, a claim or a reply can land right after."""

    def __init__(self, client: Any, between: tuple[str, str]) -> None:
        super().__init__(client)
        self.between: tuple[str, str] | None = between

    async def _call(self, op: str, fn: Any, *args: Any) -> Any:
        answer = await super()._call(op, fn, *args)
        if self.between is not None:
            name, value = self.between
            self.between = None
            await self._client.set(name, value)
        return answer


async def test_a_refused_command_frees_its_own_unanswered_claim(
    real_redis: Any, keys: Keys
) -> None:
    command_keys = CommandKeys(Storage(real_redis), keys)
    assert await command_keys.claim("k1", CommandHold(request="r"))
    await command_keys.release("k1", "r")
    assert await command_keys.get("k1") is None
    assert await command_keys.claim("k1", CommandHold(request="r"))  # free for another try


async def test_a_command_release_keeps_a_reply_filed_in_between(
    real_redis: Any, keys: Keys
) -> None:
    """The leader answered the key's command (another copy of it) while the refused one
    was letting go: the reply stays, and the next request gets it."""
    name = keys.command_idempotency("k1", 0)
    answered = CommandHold(request="r", reply={"state": "warning"}).model_dump_json()
    await CommandKeys(Storage(real_redis), keys).claim("k1", CommandHold(request="r"))
    command_keys = CommandKeys(_Interleaved(real_redis, (name, answered)), keys)
    await command_keys.release("k1", "r")
    assert await real_redis.get(name) == answered.encode()


async def test_a_command_release_keeps_another_requests_claim(real_redis: Any, keys: Keys) -> None:
    name = keys.command_idempotency("k1", 0)
    others = CommandHold(request="other").model_dump_json()
    await CommandKeys(Storage(real_redis), keys).claim("k1", CommandHold(request="r"))
    await CommandKeys(_Interleaved(real_redis, (name, others)), keys).release("k1", "r")
    assert await real_redis.get(name) == others.encode()


async def test_a_refused_start_frees_its_claim_and_keeps_another_runs(
    real_redis: Any, keys: Keys
) -> None:
    mine = IdempotencyHold(run_id="run-a", request="r")
    store = IdempotencyStore(Storage(real_redis), keys)
    assert await store.claim("k1", mine)
    await store.release("k1", mine)
    assert await store.get("k1") is None

    name = keys.idempotency("k1")
    other = IdempotencyHold(run_id="run-b", request="r").model_dump_json()
    assert await store.claim("k1", mine)
    await IdempotencyStore(_Interleaved(real_redis, (name, other)), keys).release("k1", mine)
    assert await real_redis.get(name) == other.encode()


async def test_a_start_release_keeps_its_run_once_started(real_redis: Any, keys: Keys) -> None:
    """The leader wrote the run (the key now says started) before the API let go: kept."""
    mine = IdempotencyHold(run_id="run-a", request="r")
    store = IdempotencyStore(Storage(real_redis), keys)
    assert await store.claim("k1", mine)
    started = store.started("k1", mine)
    await real_redis.execute_command(*started)
    await store.release("k1", mine)
    held = await store.get("k1")
    assert held is not None and held.started and held.run_id == "run-a"
