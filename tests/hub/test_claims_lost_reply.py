"""A claim (SET NX) whose reply was lost, and which the client's retry found taken, is
known as this claimant's own: no API waits for a run its own request never started, no
hub sits out a lease it holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from hub.store.idempotency import IdempotencyHold, IdempotencyStore
from hub.store.lease import LeaseStore
from protocols.keys import Keys
from protocols.transport import Storage
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


@pytest.fixture
async def lossy(redis_server: EmbeddedServer, keys: Keys) -> AsyncIterator[Any]:
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, client, _):
        yield proxy, Storage(client)


async def test_a_lease_whose_reply_was_lost_is_known_as_taken(lossy: Any, keys: Keys) -> None:
    proxy, db = lossy
    lease = LeaseStore(db, keys)
    proxy.arm(b"\r\nSET\r\n", "reset")  # it lands; its reply does not: the client retries
    assert await lease.acquire("hub-a:7", 5000)
    assert proxy.fired == ["reset"] and await lease.holder() == "hub-a:7"
    assert not await lease.acquire("hub-b:8", 5000)  # another's value: still refused


async def test_an_idempotency_claim_whose_reply_was_lost_is_known_as_taken(
    lossy: Any, keys: Keys
) -> None:
    proxy, db = lossy
    store = IdempotencyStore(db, keys)
    mine = IdempotencyHold(run_id="r-mine", request="fp")
    proxy.arm(b"\r\nSET\r\n", "reset")
    assert await store.claim("k1", mine)
    assert proxy.fired == ["reset"] and await store.get("k1") == mine
    assert not await store.claim("k1", IdempotencyHold(run_id="r-other", request="fp"))
