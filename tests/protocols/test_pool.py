"""The client's connection pool: redis-py's waiting pool with a direct path when nothing
waits. On the real server: commands that must wait for a connection are woken as
connections come back, whichever path gives them back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.credentials import UsernamePasswordCredentialProvider

from callboard.embedded import EmbeddedServer
from protocols.transport import connect
from protocols.transport._client import Pool
from tests.helpers import eventually

pytestmark = pytest.mark.redis


def _pool(client: aioredis.Redis) -> Pool:
    pool = client.connection_pool
    assert isinstance(pool, Pool)
    return pool


async def test_a_free_connection_is_taken_without_redis_pys_waiting_path(
    redis_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[Any] = []
    original = aioredis.BlockingConnectionPool.get_connection

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        waited.append(self)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(aioredis.BlockingConnectionPool, "get_connection", counted)
    client = connect(redis_server.url)
    try:
        assert _pool(client).direct
        for _ in range(50):
            assert await client.ping()
        assert len(waited) == 1  # the first command: no connection was made yet
        assert len(_pool(client)._available_connections) == 1
    finally:
        await client.aclose()


async def test_commands_waiting_for_a_connection_all_get_one(
    redis_server: EmbeddedServer, prefix: str
) -> None:
    """Two connections, both held by blocking pops; six more commands wait. When the pops
    return, every waiter is woken in turn (a release on the direct path while one waits
    would leave it asleep until the pool's 10 s timeout)."""
    client = connect(redis_server.url, max_connections=2)
    key = f"{prefix}pool"
    try:
        pops = [asyncio.create_task(client.blpop([f"{key}:{i}"], timeout=5)) for i in range(2)]
        await eventually(lambda: len(_pool(client)._in_use_connections) == 2, 3)
        waiting = [asyncio.create_task(client.incr(key)) for _ in range(6)]
        await eventually(lambda: _pool(client).waiting == 6, 3)
        pusher = connect(redis_server.url)
        try:
            for i in range(2):
                await pusher.rpush(f"{key}:{i}", b"go")
        finally:
            await pusher.aclose()
        done = await asyncio.wait_for(asyncio.gather(*pops, *waiting), 3)
        assert sorted(done[2:]) == [1, 2, 3, 4, 5, 6]
        assert _pool(client).waiting == 0
        assert await client.get(key) == b"6"  # and the pool serves on, directly
    finally:
        await client.delete(key)
        await client.aclose()


def test_a_credential_provider_keeps_redis_pys_own_path(redis_server: EmbeddedServer) -> None:
    provider = UsernamePasswordCredentialProvider("default", "")
    client = connect(redis_server.url, credential_provider=provider)
    assert not _pool(client).direct


async def test_a_pooled_connection_the_server_closed_is_replaced(
    redis_server: EmbeddedServer,
) -> None:
    """The next command goes on a new connection (redis-py's check when the pool hands the
    connection out, or its one retry on a fresh one), not an error."""
    client, killer = connect(redis_server.url), connect(redis_server.url)
    try:
        first = await client.client_id()
        assert await killer.client_kill_filter(_id=first) == 1
        await eventually(lambda: _pool(client)._available_connections[0]._reader.at_eof(), 3)
        assert await client.ping()
        assert await client.client_id() != first
    finally:
        await client.aclose()
        await killer.aclose()
