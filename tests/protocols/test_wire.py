"""Commands written at once and read back raw (protocols.transport._wire), on the real
server: replies in order, error replies raised only once every reply is read, a
transaction all or nothing, and a connection left mid-reply never handed out again; a
write sent ahead of a blocking read, in its round trip, told its outcome before the read
returns and never sent twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import hiredis
import pytest
import redis.asyncio as aioredis
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.exceptions import ConnectionError, InvalidResponse, ResponseError

from callboard.embedded import EmbeddedServer
from protocols.errors import TransportError, Unreachable
from protocols.keys import Keys
from protocols.transport import Transport, WriteAhead, connect
from protocols.transport._client import _PackedConnection
from protocols.transport._gateway import Gateway
from protocols.transport._wire import _buffered, _replies, ahead_of, command, is_lean, pipelined
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


async def test_a_long_pipeline_keeps_every_reply_and_error_in_its_place(
    client: aioredis.Redis, prefix: str
) -> None:
    """Replies past the first of a burst are taken from the reader (`_buffered`): each
    still lands in its place, an error reply too, and the connection stays in step."""
    key, text = f"{prefix}n", f"{prefix}t"
    await command(client, "SET", text, "x")
    commands = [("INCR", key) if n % 97 else ("INCR", text) for n in range(1, 2_001)]
    with pytest.raises(ResponseError, match="not an integer"):
        await pipelined(client, commands)
    client_conn = await client.connection_pool.get_connection()
    awaited = 0
    read_response = client_conn.read_response

    async def counted(*args: Any, **kw: Any) -> Any:
        nonlocal awaited
        awaited += 1
        return await read_response(*args, **kw)

    client_conn.read_response = counted  # type: ignore[method-assign]
    try:  # the same commands, replies kept: every INCR's count, the refused ones as errors
        await client_conn.send_packed_command(client_conn.pack_commands(commands))
        replies = await _replies(client_conn, len(commands))
    finally:
        del client_conn.read_response
        await client.connection_pool.release(client_conn)
    assert awaited < len(commands) // 10  # the rest were complete in the reader already
    counts = [r for r in replies if not isinstance(r, ResponseError)]
    assert counts == list(range(len(counts) + 1, 2 * len(counts) + 1))
    assert [n for n, r in enumerate(replies, 1) if isinstance(r, ResponseError)] == list(
        range(97, 2_001, 97)
    )
    assert await command(client, "PING") == b"PONG"


async def test_a_connection_error_the_server_sends_behind_a_reply_closes_the_connection() -> None:
    """A reply like `-LOADING` (redis-py raises it as a ConnectionError) found in the
    reader behind other replies is raised and the connection closed, as `read_response`
    does; a push message goes to redis-py's handler and is not a reply."""
    parser = _AsyncHiredisParser(socket_read_size=65_536)
    parser._reader = hiredis.Reader(
        protocolError=InvalidResponse, replyError=parser.parse_error, notEnoughData=NOT_ENOUGH_DATA
    )
    parser._hiredis_PushNotificationType = hiredis.PushNotification
    parser._connected = True
    pushed: list[Any] = []

    async def handle_push(response: Any) -> None:
        pushed.append(response)

    parser.handle_push_response = handle_push  # type: ignore[method-assign]

    class Connection:
        _parser = parser
        closed = False

        async def disconnect(self, nowait: bool = False) -> None:
            self.closed = True

    connection = Connection()
    parser._reader.feed(b"+a\r\n>2\r\n+invalidate\r\n+k\r\n-ERR no\r\n+b\r\n")
    replies: list[Any] = [b"first"]
    await _buffered(connection, replies, 10)
    assert replies[:3] == [b"first", b"a", replies[2]]
    assert isinstance(replies[2], ResponseError) and replies[3:] == [b"b"]
    assert len(pushed) == 1 and not connection.closed
    parser._reader.feed(b"+c\r\n-LOADING Redis is loading the dataset in memory\r\n+d\r\n")
    with pytest.raises(ConnectionError, match="loading"):
        await _buffered(connection, replies, 10)
    assert replies[-1] == b"c" and connection.closed


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


class Told:
    """A write ahead of a read, and what it was told."""

    def __init__(self, *commands: tuple[Any, ...]) -> None:
        self.outcomes: list[Any] = []
        self.ahead = WriteAhead(commands, self.outcomes.append)


async def _group(client: aioredis.Redis, stream: str) -> None:
    await command(client, "XGROUP", "CREATE", stream, "g", "$", "MKSTREAM")


def _read(stream: str, block_ms: int = 5000) -> tuple[Any, ...]:
    return ("XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "BLOCK", block_ms, "STREAMS", stream, ">")


async def test_a_write_ahead_of_a_blocking_read_goes_in_its_write_and_is_told_first(
    client: aioredis.Redis, redis_server: EmbeddedServer, prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A replica's replies and its next read: one socket write; the replies' outcome is
    known while the read still waits for an entry."""
    inbox, out = f"{prefix}in", f"{prefix}out"
    await _group(client, inbox)
    sent: list[Any] = []
    send = _PackedConnection.send_packed_command

    async def counted(self: Any, packed: Any, check_health: bool = True) -> None:
        sent.append(packed)
        await send(self, packed, check_health)

    monkeypatch.setattr(_PackedConnection, "send_packed_command", counted)
    told = Told(("XADD", out, "*", "m", b"ack"), ("SET", f"{prefix}k", "v"))
    read = asyncio.create_task(ahead_of(client, told.ahead, *_read(inbox)))
    await eventually(lambda: told.outcomes, 5, message="told")
    [(entry_id, ok)] = told.outcomes
    assert ok == b"OK" and entry_id.startswith(b"1")
    assert not read.done()  # the read still waits
    other = connect(redis_server.url)
    try:
        assert await other.xlen(out) == 1
        await other.xadd(inbox, {"m": b"work"})
    finally:
        await other.aclose()
    reply = await asyncio.wait_for(read, 5)
    entries = reply[inbox.encode()] if isinstance(reply, dict) else reply[0][1]
    assert [fields for _, fields in entries] == [[b"m", b"work"]]
    ours = [b"".join(packed) for packed in sent if b"XREADGROUP" in b"".join(packed)]
    assert len(ours) == 1  # the write and the read went together, in one socket write
    assert b"MULTI" in ours[0] and ours[0].index(b"EXEC") < ours[0].index(b"XREADGROUP")


async def test_a_read_cut_after_its_write_was_told_is_sent_again_alone(
    client: aioredis.Redis, redis_server: EmbeddedServer, prefix: str
) -> None:
    """The connection is lost while the read waits (a restart, CLIENT KILL): the read is
    tried again on a fresh one, the write it went with is not sent twice."""
    inbox, out = f"{prefix}in", f"{prefix}out"
    await _group(client, inbox)
    told = Told(("XADD", out, "*", "m", b"ack"))
    read = asyncio.create_task(ahead_of(client, told.ahead, *_read(inbox)))
    await eventually(lambda: told.outcomes, 5, message="told")
    other = connect(redis_server.url)
    try:

        async def reading() -> int | None:
            for line in (await other.execute_command("CLIENT", "LIST")).decode().splitlines():
                if "cmd=xreadgroup" in line:
                    return int(line.split("id=", 1)[1].split(" ", 1)[0])
            return None

        first = await eventually(reading, 5, message="the read blocked")
        assert await other.execute_command("CLIENT", "KILL", "ID", first) == 1
        again = await eventually(lambda: _other_reader(reading, first), 5, message="read again")
        assert again != first
        await other.xadd(inbox, {"m": b"work"})
        reply = await asyncio.wait_for(read, 5)
        assert reply  # the entry, read on the fresh connection
        assert await other.xlen(out) == 1  # written once
        assert len(told.outcomes) == 1
    finally:
        await other.aclose()


async def _other_reader(reading: Any, first: int) -> int | None:
    found = await reading()
    return found if found not in (None, first) else None


async def test_a_write_ahead_the_server_refused_writes_nothing_and_the_read_goes_on(
    client: aioredis.Redis, prefix: str
) -> None:
    inbox, out = f"{prefix}in", f"{prefix}out"
    await _group(client, inbox)
    await command(client, "XADD", inbox, "*", "m", b"work")
    told = Told(("XADD", out, "*", "m", b"ack"), ("GET",))  # GET without its key: refused
    reply = await ahead_of(client, told.ahead, *_read(inbox, block_ms=100))
    [refusal] = told.outcomes
    assert isinstance(refusal, TransportError) and "wrong number of arguments" in str(refusal)
    assert await command(client, "EXISTS", out) == 0
    assert reply  # the entry waiting in the inbox
    assert await command(client, "PING") == b"PONG"  # in step


async def test_a_read_that_fails_before_its_write_was_told_tells_the_failure(
    prefix: str,
) -> None:
    """Redis unreachable: the read gives up, and the writes that went with it are told
    so (they are not left waiting); cancelled, the same."""
    with EmbeddedServer() as server:
        url = server.url
    transport = Transport.from_url(url, Keys(prefix), retry_s=0.2)
    try:
        told = Told(("XADD", f"{prefix}out", "*", "m", b"ack"))
        with pytest.raises(Unreachable):
            await transport.read_group([f"{prefix}in"], "g", "c", ahead=told.ahead)
        [failure] = told.outcomes
        assert isinstance(failure, Unreachable)
        told = Told(("XADD", f"{prefix}out", "*", "m", b"ack"))
        slow = Transport.from_url(url, Keys(prefix), retry_s=30)
        try:
            read = asyncio.create_task(slow.read_group([f"{prefix}in"], "g", "c", ahead=told.ahead))
            for _ in range(5):  # the read has begun (connecting, or waiting to try again)
                await asyncio.sleep(0)
            assert not read.done()
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            [cut] = told.outcomes
            assert isinstance(cut, Unreachable) and "write interrupted" in str(cut)
        finally:
            await slow.close()
    finally:
        await transport.close()
