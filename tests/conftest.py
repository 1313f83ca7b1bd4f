"""Shared fixtures: the real server this suite starts itself, and a key prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols.keys import Keys
from protocols.settings import Settings


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedServer]:
    """A real Redis-compatible server on a free loopback port, for the whole session."""
    with EmbeddedServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedCluster]:
    """A real Redis Cluster (3 masters, no replicas) on free loopback ports, for the whole
    session: started on first use (about 2 s), with the embedded server's binary."""
    with EmbeddedCluster() as cluster:
        yield cluster


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses: tests share the server, never their keys."""
    return f"t{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def keys(prefix: str) -> Keys:
    return Keys(prefix)


@pytest.fixture
def settings(redis_server: EmbeddedServer, prefix: str) -> Settings:
    return Settings(
        redis_url=redis_server.url,
        prefix=prefix,
        block_ms=200,
        min_idle_ms=1_000,
        claim_interval_ms=200,
    )


@pytest.fixture
def env(redis_server: EmbeddedServer, prefix: str) -> dict[str, str]:
    """Environment for a child process (hub or specialist) wired to the test server."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    child.update(REDIS_URL=redis_server.url, CALLBOARD_PREFIX=prefix, PYTHONUNBUFFERED="1")
    return child


@pytest.fixture
async def real_redis(redis_server: EmbeddedServer, prefix: str) -> AsyncIterator[object]:
    """An asyncio client on the real server; deletes this test's keys afterwards."""
    from protocols.transport import connect

    client = connect(redis_server.url)
    yield client
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        await client.delete(key)
    await client.aclose()


@pytest.fixture
async def cluster_redis(redis_cluster: EmbeddedCluster, prefix: str) -> AsyncIterator[object]:
    """An asyncio RedisCluster client on the session cluster; deletes this test's keys."""
    from protocols.transport import connect

    client = connect(redis_cluster.url)
    yield client
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        await client.delete(key)
    await client.aclose()
