"""Commands written at once and read back raw (protocols.transport._wire), on the real
server: replies in order, error replies raised only once every reply is read, a
transaction all or nothing, and a connection left mid-reply never handed out again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from callboard.embedded import EmbeddedServer
from protocols.transport import connect
from protocols.transport._client import _PackedConnection
from protocols.transport._gateway import Gateway
from protocols.transport._wire import command, is_lean, pipelined
from tests.helpers import eventually

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(redis_server: EmbeddedServer, prefix: str) -> AsyncIterator[aioredis.Redis]:
    made = connect(redis_server.url, max_connections=1)  # one connection: every call reuses it
    assert is_lean(made)
    yield made
    async for key in made.scan_iter(match=f"{prefix}*"):
        await made.delete(key)
    await made.aclose()


async def test_replies_come_back_raw_and_in_order(client: aioredis.Redis, prefix: str) -> None:
    stream, key = f"{prefix}s", f"{prefix}k"
    replies = await pipelined(client, [
        ("XADD", stream, "1-1", "m", b"a"), ("SET", key, "v"), ("XADD", stream, "*", "m", b"b"),
        ("GET", key), ("XLEN", stream),
    ])  # fmt: skip
    assert replies[:2] == [b"1-1", b"OK"]
    assert replies[2].startswith(b"1") and replies[2] != b"1-1"
    assert replies[3:] == [b"v", 2]
    read = await command(client, "XRANGE", stream, "-", "+")
    assert read == [[b"1-1", [b"m", b"a"]], [replies[2], [b"m", b"b"]]]


async def test_a_command_named_in_two_words_is_sent_as_two(client: aioredis.Redis) -> None:
    replies = await pipelined(client, [("PING",), ("CONFIG GET", "maxmemory-policy")])
    assert replies[0] == b"PONG"
    policy = replies[1]  # a map in RESP3 (redis-py's default), a flat list in RESP2
    assert b"maxmemory-policy" in (policy if isinstance(policy, dict) else policy[::2])


@pytest.mark.parametrize("atomic", [False, True], ids=["pipeline", "transaction"])
async def test_an_error_reply_is_raised_after_every_command_ran(
    client: aioredis.Redis, prefix: str, atomic: bool
) -> None:
    """A command failing as it runs (in a transaction too: EXEC runs the rest, as Redis
    does) is raised once every reply is read."""
    key, other = f"{prefix}k", f"{prefix}o"
    await command(client, "SET", key, "text")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await pipelined(
            client, [("SET", other, "1"), ("XLEN", key), ("INCR", other)], atomic=atomic
        )
    # the commands around the refused one ran, and the connection is in step
    assert await command(client, "GET", other) == b"2"
    assert await command(client, "PING") == b"PONG"


async def test_a_transaction_the_server_refused_to_queue_writes_nothing(
    client: aioredis.Redis, prefix: str
) -> None:
    key = f"{prefix}k"
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        await pipelined(client, [("SET", key, "1"), ("GET",), ("SET", key, "2")], atomic=True)
    assert await command(client, "EXISTS", key) == 0
    assert await pipelined(client, [("SET", key, "1"), ("GET", key)], atomic=True) == [
        b"OK", b"1",
    ]  # fmt: skip


async def test_a_cancelled_read_never_hands_its_late_reply_to_the_next_command(
    client: aioredis.Redis, redis_server: EmbeddedServer, prefix: str
) -> None:
    """A blocking read cancelled while it waits leaves a reply on its way; the connection
    is closed, so the next command on the pool (its only connection) reads its own."""
    stream = f"{prefix}s"
    read = asyncio.create_task(command(client, "XREAD", "BLOCK", 5000, "STREAMS", stream, "$"))
    other = connect(redis_server.url)
    try:

        async def blocked() -> bool:
            listing = await other.execute_command("CLIENT", "LIST")
            text = listing.decode() if isinstance(listing, bytes) else str(listing)
            return "cmd=xread" in text

        await eventually(blocked, 5)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        await other.xadd(stream, {"m": b"late"})
        assert await command(client, "GET", f"{prefix}nothing") is None
        assert await command(client, "PING") == b"PONG"
    finally:
        await other.aclose()


async def test_a_script_the_server_lost_is_sent_again(prefix: str) -> None:
    """A restarted or failed-over server knows no scripts: EVALSHA's NOSCRIPT makes the
    gateway load it and ask again (a server of this test's own: it flushes scripts)."""
    with EmbeddedServer() as server:
        gateway = Gateway.dedicated(server.url, max_connections=2)
        try:
            incr = gateway.script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
            key = f"{prefix}n"
            assert await incr([key], [2]) == 2
            await command(gateway._client, "SCRIPT", "FLUSH")
            assert await incr([key], [3]) == 5  # loaded again, run once
            stats = await command(gateway._client, "INFO", "commandstats")
            # loaded at the first call (never sent before) and after the flush; run twice
            assert b"cmdstat_script|load:calls=2," in stats
            assert b"cmdstat_incrby:calls=2," in stats
        finally:
            await gateway.close()


@pytest.mark.parametrize("seen", [True, False], ids=["seen-by-the-pool", "found-by-the-write"])
async def test_a_write_on_a_connection_the_server_closed_lands_once(
    client: aioredis.Redis,
    redis_server: EmbeddedServer,
    prefix: str,
    seen: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's one connection is closed by the server between two writes (a restart,
    a timeout, CLIENT KILL): the next write goes out on a fresh connection, once. The
    pool usually sees the closed socket before handing it out; when it does not (told
    here that the socket is clean), the write fails on it and is tried again."""
    stream = f"{prefix}s"
    own_id = await command(client, "CLIENT", "ID")
    other = connect(redis_server.url)
    try:
        assert await other.execute_command("CLIENT", "KILL", "ID", own_id) == 1
    finally:
        await other.aclose()
    if not seen:

        async def clean(self: Any, *args: Any, **kwargs: Any) -> bool:
            return False

        monkeypatch.setattr(_PackedConnection, "can_read", clean)
    await pipelined(client, [("XADD", stream, "*", "m", b"once")], atomic=True)
    assert await command(client, "XLEN", stream) == 1
    assert await command(client, "CLIENT", "ID") != own_id  # a new connection
