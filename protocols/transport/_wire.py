"""Commands sent in one write and their raw replies read back, on callboard's own pool.

redis-py's pipeline spends about 3 µs of Python per command on layers the hot paths do not
use (a command stack, response callbacks, HIMPORT bookkeeping, metrics hooks, a parse
call per reply): more than half a pipelined XADD's client CPU. `pipelined` packs the
commands with hiredis, writes them at once and waits for replies with the connection's
own `read_response` (those complete behind the first are taken from its hiredis reader,
`_buffered`), so connection errors, cancellation (a connection left mid-reply is
closed) and reconnection stay redis-py's. Replies come back as the server sent them, in
the protocol the connection speaks (RESP3 by redis-py's default: an XADD's id as bytes, a
stream read as a map of stream to entries). A client that is not a plain Redis on
callboard's pool (a Redis Cluster, fakeredis) goes through redis-py's pipeline.

`ahead_of` sends a transaction and a command in one write and tells the transaction's
outcome before waiting for the command's reply: a replica's replies go in the round trip
of its next (blocking) read of the inbox, and the router's forwards in its next read of
the out streams, one socket write instead of two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hiredis import pack_command
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.exceptions import ConnectionError, ResponseError, WatchError

from protocols.transport._client import Pool, Redis, _PackedConnection
from protocols.transport._errors import translate

Command = Sequence[Any]
T = TypeVar("T")
Outcome = list[Any] | BaseException  # a transaction's results, or why it failed


class WriteAhead:
    """A write that goes in the round trip of a read, ahead of it: `commands`, run inside
    MULTI/EXEC, and `tell`, given their outcome once (the EXEC's results, or the error as
    protocols.errors names it) as soon as it is known, before the read waits for entries."""

    __slots__ = ("_tell", "commands", "told")

    def __init__(self, commands: Sequence[Command], tell: Callable[[Outcome], None]) -> None:
        self.commands = commands
        self._tell = tell
        self.told = False

    def tell(self, outcome: Outcome) -> None:
        if self.told:
            return
        self.told = True
        if isinstance(outcome, Exception):
            outcome = translate(outcome, "XADD") or outcome
        self._tell(outcome)


def is_lean(client: Redis) -> bool:
    """Whether `client` takes `pipelined`'s own path (not redis-py's pipeline)."""
    pool = getattr(client, "connection_pool", None)
    return isinstance(pool, Pool) and issubclass(pool.connection_class, _PackedConnection)


async def pipelined(
    client: Redis, commands: Sequence[Command], *, atomic: bool = False
) -> list[Any]:
    """The replies of `commands`, sent in one write (inside MULTI/EXEC when `atomic`).

    As redis-py's pipeline: every reply is read before an error reply is raised (the
    first, as its class: OutOfMemoryError, ReadOnlyError...), and a lost connection is
    closed and the whole write tried once more on a fresh one (the client's `retry`)."""
    if not commands:
        return []
    if not is_lean(client):
        return await _by_redis_py(client, commands, atomic)
    wire: Sequence[Command] = [("MULTI",), *commands, ("EXEC",)] if atomic else commands

    async def exchange(connection: Any) -> list[Any]:
        replies = await _exchange(connection, wire)
        return await _executed(connection, replies, len(commands)) if atomic else replies

    replies: list[Any] = await _on_connection(client, exchange)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


async def command(client: Redis, *args: Any) -> Any:
    """One command's raw reply (see `pipelined`)."""
    (reply,) = await pipelined(client, [args])
    return reply


async def ahead_of(client: Redis, ahead: WriteAhead, *args: Any) -> Any:
    """The raw reply of command `args`, sent in one write behind `ahead`'s transaction (a
    lean client's: see `is_lean`). `ahead` is told its outcome once the EXEC's reply is
    read, before this waits for the command's reply. A lost connection is retried as
    `pipelined` retries it: the whole write again while `ahead` has not been told, the
    command alone once it has (its write is never sent twice after its outcome is known)."""
    reply = await _on_connection(client, lambda conn: _write_then_read(conn, ahead, args))
    if isinstance(reply, ResponseError):
        raise reply
    return reply


async def _on_connection(client: Redis, exchange: Callable[[Any], Awaitable[T]]) -> T:
    """`exchange` on one of the pool's connections; a lost connection is closed and the
    exchange tried again on a fresh one (the client's `retry`)."""
    pool: Pool = client.connection_pool  # type: ignore[assignment]
    connection = await pool.get_connection()
    try:
        return await connection.retry.call_with_retry(  # type: ignore[no-any-return]
            lambda: exchange(connection), lambda _: connection.disconnect()
        )
    finally:
        await pool.release(connection)


async def _write_then_read(connection: Any, ahead: WriteAhead, args: Command) -> Any:
    if ahead.told:
        (reply,) = await _exchange(connection, [args])
        return reply
    wire = [("MULTI",), *ahead.commands, ("EXEC",), args]
    await connection.send_packed_command(_packed(connection, wire))
    replies = await _replies(connection, len(wire) - 1)  # the transaction's; the read's waits
    try:
        results = await _executed(connection, replies, len(ahead.commands))
    except (ResponseError, WatchError) as error:
        ahead.tell(error)
    else:
        failed = next((r for r in results if isinstance(r, ResponseError)), None)
        ahead.tell(results if failed is None else failed)
    try:
        return await connection.read_response()
    except ResponseError as error:
        return error


async def _exchange(connection: Any, wire: Sequence[Command]) -> list[Any]:
    await connection.send_packed_command(_packed(connection, wire))
    return await _replies(connection, len(wire))


async def _replies(connection: Any, count: int) -> list[Any]:
    """`count` replies, an error reply as its exception (the next ones still come). The
    first of each burst is awaited through redis-py; those complete behind it are taken
    straight from its hiredis reader (`_buffered`)."""
    replies: list[Any] = []
    while len(replies) < count:
        try:
            replies.append(await connection.read_response())
        except ResponseError as error:
            replies.append(error)
        if len(replies) < count:
            await _buffered(connection, replies, count)
    return replies


async def _buffered(connection: Any, replies: list[Any], count: int) -> None:
    """Append to `replies`, up to `count`, what the connection's hiredis reader holds
    complete already: the replies to a pipeline mostly arrive in one read, and redis-py's
    `read_response` costs about 1.1 µs of Python a reply (a timeout context, health-check
    bookkeeping) where taking it from the reader costs 0.5. As `read_response` does: an
    error reply is its exception (kept here, raised there), a connection error the server
    sent is raised and the connection closed, and a push message goes to redis-py's
    handler. A connection not on redis-py's hiredis parser is left to `read_response`."""
    parser = getattr(connection, "_parser", None)
    if type(parser) is not _AsyncHiredisParser or parser._reader is None:
        return
    gets, push = parser._reader.gets, parser._hiredis_PushNotificationType
    while len(replies) < count:
        reply = gets()
        if reply is NOT_ENOUGH_DATA:
            return
        if isinstance(reply, ConnectionError):
            await connection.disconnect(nowait=True)
            raise reply
        if push is not None and isinstance(reply, push):
            await parser.handle_push_response(reply)
            continue
        replies.append(reply)


def _packed(connection: Any, wire: Sequence[Command]) -> list[bytes]:
    """The commands in the protocol, packed by hiredis; a command named in two words
    ("CONFIG GET") or an argument hiredis does not take goes the connection's way."""
    chunks = []
    try:
        for args in wire:
            head = args[0]
            if type(head) is str and " " in head:
                return connection.pack_commands(wire)  # type: ignore[no-any-return]
            chunks.append(pack_command(tuple(args)))
    except TypeError:
        return connection.pack_commands(wire)  # type: ignore[no-any-return]
    return [b"".join(chunks)]


async def _executed(connection: Any, replies: list[Any], count: int) -> list[Any]:
    """A transaction's results from its MULTI, QUEUED... and EXEC replies. A command the
    server refused to queue aborted it: that refusal is raised (not EXECABORT)."""
    *queued, done = replies
    for reply in queued:
        if isinstance(reply, ResponseError):
            raise reply
    if isinstance(done, ResponseError):
        raise done
    if done is None:  # only a WATCH aborts an EXEC; callboard watches nothing
        raise WatchError("transaction aborted")
    if not isinstance(done, list) or len(done) != count:  # out of step: never reuse it
        await connection.disconnect()
        raise ResponseError("wrong number of replies from a transaction")
    return done


async def _by_redis_py(client: Redis, commands: Sequence[Command], atomic: bool) -> list[Any]:
    async with client.pipeline(transaction=atomic) as pipe:
        for args in commands:
            pipe.execute_command(*args)
        replies: list[Any] = await pipe.execute()
    return replies
