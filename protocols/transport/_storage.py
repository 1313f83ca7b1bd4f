"""Storage: the typed Redis commands the state stores are built from (hub/store/, markers).

Each method is one command (or one pipelined round trip), with bytes in and typed values
out, errors translated by the Gateway. By default nothing is retried beyond the client's
one immediate retry on a fresh connection (an API read answers 503 at once rather than
hang); a caller that must get through (the engine's commit) passes its own `retry_s`.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, cast

from redis.asyncio.client import Pipeline

from protocols.transport._client import Redis, _bytes, _stream_replies, _text
from protocols.transport._errors import is_busy_group, lost_raised, translated
from protocols.transport._gateway import Gateway, Script
from protocols.transport._slots import SlotTransaction, by_slot, first_answers
from protocols.transport._wire import Command

Value = str | bytes | int | float
# XREAD over many slots (a cluster): up to this many slots are raced as blocking reads
# (a connection each); more are read again every XREAD_POLL_S, on one connection per node
XREAD_RACE_MAX = 3
XREAD_POLL_S = 0.05
Entry = tuple[str, dict[bytes, bytes]]  # a stream entry: (id, fields)


def _opt(value: Any) -> bytes | None:
    return None if value is None else _bytes(value)


def _fields(raw: Any) -> dict[bytes, bytes]:
    return {_bytes(k): _bytes(v) for k, v in (raw or {}).items()}


_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _entries(rows: Any) -> list[Entry]:
    return [(_text(entry_id), _fields(fields)) for entry_id, fields in rows or []]


class Storage(Gateway):
    """Typed commands on the shared client; no retry unless asked (see the module doc)."""

    def __init__(self, client: Redis, *, retry_s: float = 0.0) -> None:
        super().__init__(client, retry_s=retry_s)
        self._delete_if: Script | None = None  # registered when first asked for

    # -- strings --------------------------------------------------------------------------
    async def get(self, key: str) -> bytes | None:
        return _opt(await self._call("GET", lambda: self._client.get(key)))

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        if self.is_cluster:  # one MGET per slot (the client splits them)
            cluster: Any = self._client
            values = await self._call("MGET", lambda: cluster.mget_nonatomic(list(keys)))
        else:
            values = await self._call("MGET", lambda: self._client.mget(keys))
        return [_opt(v) for v in values]

    async def set(
        self, key: str, value: Value, *, nx: bool = False, ex_s: int | None = None,
        px_ms: int | None = None,
    ) -> bool:  # fmt: skip
        """SET; with `nx`, False when the key was there already."""
        reply = await self._call(
            "SET", lambda: self._client.set(key, value, nx=nx, ex=ex_s, px=px_ms)
        )
        return bool(reply)

    async def set_free_or_mine(
        self, key: str, value: Value, *, ex_s: int | None = None, px_ms: int | None = None
    ) -> bool:
        """SET NX for a `value` this claimant alone writes: True when `key` holds it now.
        A try whose reply was lost may have landed, and the client's retry then finds the
        key taken: by this claimant, not another (a second round trip, only then)."""
        if await self.set(key, value, nx=True, ex_s=ex_s, px_ms=px_ms):
            return True
        return await self.get(key) == _bytes(value)

    async def delete(self, *keys: str) -> int:
        return int(await self._call("DEL", lambda: self._client.delete(*keys)))

    async def delete_if(self, key: str, value: Value) -> bool:
        """DEL `key` only while it holds `value`, in one script: a value set in between
        (another holder's) is kept. True when it was deleted."""
        if self._delete_if is None:
            self._delete_if = self.script(_DELETE_IF)
        return bool(await self._delete_if([key], [value]))

    async def incr(self, key: str) -> int:
        return int(await self._call("INCR", lambda: self._client.incr(key)))

    async def exists_each(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key exists, in one pipelined round trip."""
        replies = await self.commands("EXISTS", [("EXISTS", key) for key in keys])
        return [bool(r) for r in replies]

    # -- hashes ---------------------------------------------------------------------------
    async def hget(self, key: str, field: str) -> bytes | None:
        return _opt(await self._call("HGET", lambda: self._client.hget(key, field)))

    async def hmget(self, key: str, fields: Sequence[str]) -> list[bytes | None]:
        if not fields:
            return []
        replies = await self._call("HMGET", lambda: self._client.hmget(key, list(fields)))
        return [_opt(v) for v in replies]

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        return _fields(await self._call("HGETALL", lambda: self._client.hgetall(key)))

    async def hgetall_each(self, keys: Sequence[str]) -> list[dict[bytes, bytes]]:
        """HGETALL of each key, in one pipelined round trip."""
        replies = await self.pipeline("HGETALL", lambda pipe: [pipe.hgetall(k) for k in keys])
        return [_fields(r) for r in replies]

    async def hset(self, key: str, mapping: Mapping[str, Value]) -> int:
        if not mapping:
            return 0
        data: dict[Any, Any] = dict(mapping)
        return int(await self._call("HSET", lambda: self._client.hset(key, mapping=data)))

    async def command(self, *words: Value) -> Any:
        """One command given as its words (e.g. an HSET built for the commit script)."""
        replies = await self.pipeline("COMMAND", lambda pipe: pipe.execute_command(*words))
        return replies[0]

    # -- sets and sorted sets -------------------------------------------------------------
    async def smembers(self, key: str) -> builtins.set[bytes]:
        return {_bytes(m) for m in await self._call("SMEMBERS", lambda: self._client.smembers(key))}

    async def zrange(self, key: str, start: int, stop: int, *, desc: bool = False) -> list[bytes]:
        rows = await self._call("ZRANGE", lambda: self._client.zrange(key, start, stop, desc=desc))
        return [_bytes(m) for m in rows]

    async def zrange_scored(
        self, key: str, start: int, stop: int, *, desc: bool = False
    ) -> list[tuple[bytes, float]]:
        rows = await self._call(
            "ZRANGE", lambda: self._client.zrange(key, start, stop, desc=desc, withscores=True)
        )
        return [(_bytes(row[0]), float(row[1])) for row in rows]

    async def zrange_down_from(
        self, key: str, top: str, bottom: str, count: int | None = None
    ) -> list[tuple[bytes, float]]:
        """Members scored from `top` down to `bottom` (score bounds as ZRANGE BYSCORE takes
        them: "(1.5" excludes 1.5), highest first (ties in reverse order), with their
        scores; at most `count`."""
        rows = await self._call(
            "ZRANGE",
            lambda: self._client.zrevrangebyscore(
                key, top, bottom, start=0 if count else None, num=count, withscores=True
            ),
        )
        return [(_bytes(row[0]), float(row[1])) for row in rows]

    async def zrange_below(
        self, key: str, score: float, count: int, offset: int = 0
    ) -> list[bytes]:
        """`count` members scored at most `score`, lowest first, after the `offset` lowest."""
        rows = await self._call(
            "ZRANGE",
            lambda: self._client.zrangebyscore(key, "-inf", score, start=offset, num=count),
        )
        return [_bytes(m) for m in rows]

    async def zrem(self, key: str, members: Sequence[str]) -> int:
        if not members:
            return 0
        return int(await self._call("ZREM", lambda: self._client.zrem(key, *members)))

    # -- lists ----------------------------------------------------------------------------
    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        """The head of list `key`, waiting up to `timeout_s`; None when nothing came."""
        reply = await self._read_call(
            "BLPOP", lambda: self._client.blpop([key], timeout=timeout_s), int(timeout_s * 1000)
        )
        return None if reply is None else _bytes(reply[1])

    # -- streams (other than the Transport's envelopes) -----------------------------------
    async def xadd(self, stream: str, fields: Mapping[str, Value]) -> str:
        data: dict[Any, Any] = dict(fields)
        return _text(await self._call("XADD", lambda: self._client.xadd(stream, data)))

    async def xdel(self, stream: str, entry_ids: Sequence[str]) -> int:
        if not entry_ids:
            return 0
        return int(await self._call("XDEL", lambda: self._client.xdel(stream, *entry_ids)))

    async def xrange(self, stream: str, after: str = "-", count: int | None = None) -> list[Entry]:
        """Entries after `after` (exclusive; "-" from the start), oldest first."""
        low = after if after == "-" else f"({after}"
        rows = await self._call("XRANGE", lambda: self._client.xrange(stream, min=low, count=count))
        return _entries(rows)

    async def newest_id(self, stream: str) -> str:
        """The newest entry's id, "0-0" for an empty or missing stream."""
        return await self._newest_id(stream)

    async def xread(self, stream: str, after: str, count: int, block_ms: int) -> list[Entry]:
        """Entries after `after`, waiting up to `block_ms` for some (XREAD BLOCK)."""
        reply = await self._read_call(
            "XREAD",
            lambda: self._client.xread({stream: after}, count=count, block=block_ms),
            block_ms,
        )
        return [e for _, rows in _stream_replies(reply) for e in _entries(rows)]

    async def xdel_then_xread(
        self, stream: str, done: Sequence[str], after: str, count: int, block_ms: int
    ) -> list[Entry]:
        """Delete entries `done`, then `xread`: one round trip (a reader that deletes what
        it read, with its next read)."""
        if not done:
            return await self.xread(stream, after, count, block_ms)

        def build(pipe: Pipeline) -> None:
            pipe.xdel(stream, *done)
            pipe.xread({stream: after}, count=count, block=block_ms)

        _, reply = await self.pipeline("XDEL XREAD", build, blocks_ms=block_ms)
        return [e for _, rows in _stream_replies(reply) for e in _entries(rows)]

    async def xread_many(
        self, after: Mapping[str, str], count: int, block_ms: int
    ) -> list[tuple[str, list[Entry]]]:
        """XREAD BLOCK over several streams at once: (stream, entries) for those with new
        entries after their id in `after`. On a cluster streams of different slots cannot
        share one XREAD: see `_xread_slots`."""
        groups = by_slot(after) if self.is_cluster else [list(after)]
        if len(groups) == 1:
            streams: dict[Any, Any] = dict(after)
            reply = await self._read_call(
                "XREAD", lambda: self._client.xread(streams, count=count, block=block_ms), block_ms
            )
            replies = [reply]
        else:
            replies = await self._xread_slots(after, groups, count, block_ms)
        return [
            (stream, _entries(rows)) for reply in replies for stream, rows in _stream_replies(reply)
        ]

    async def _xread_slots(
        self, after: Mapping[str, str], groups: list[list[str]], count: int, block_ms: int
    ) -> list[Any]:
        """XREAD over streams of many slots, on a few connections: one XREAD per slot,
        pipelined (one round trip per node); when none has anything new, a few slots are
        raced as blocking reads (the first answer wins, the others are cancelled: XREAD
        changes nothing), and more than that are read again every XREAD_POLL_S until
        `block_ms` has passed."""

        def sweep(pipe: Pipeline) -> None:
            for group in groups:
                pipe.xread({stream: after[stream] for stream in group}, count=count)

        replies = [r for r in await self.pipeline("XREAD", sweep) if r]
        if replies or block_ms <= 0:
            return replies
        if len(groups) <= XREAD_RACE_MAX:

            def read(group: list[str]) -> Callable[[], Any]:
                streams: dict[Any, Any] = {stream: after[stream] for stream in group}
                return lambda: self._read_call(
                    "XREAD",
                    lambda: self._client.xread(streams, count=count, block=block_ms),
                    block_ms,
                )

            return await first_answers([read(group) for group in groups])
        deadline = time.monotonic() + block_ms / 1000
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(XREAD_POLL_S, left))
            replies = [r for r in await self.pipeline("XREAD", sweep) if r]
            if replies:
                return replies
        return []

    async def create_group(self, stream: str, group: str, start_id: str = "$") -> bool:
        """XGROUP CREATE ... MKSTREAM; False (not an error) when the group exists."""

        def build(pipe: Pipeline) -> None:
            pipe.xgroup_create(stream, group, id=start_id, mkstream=True)

        replies = await self.pipeline("XGROUP CREATE", build, raise_on_error=False)
        if is_busy_group(replies[0]):
            return False
        if isinstance(replies[0], Exception):
            with translated("XGROUP CREATE"):
                raise replies[0]
        return True

    async def xreadgroup(
        self, stream: str, group: str, consumer: str, start: str, count: int,
        block_ms: int | None,
    ) -> list[Entry]:  # fmt: skip
        """XREADGROUP from `start` (">" new entries, "0" this consumer's pending ones)."""
        reply = await self._read_call(
            "XREADGROUP",
            lambda: self._client.xreadgroup(
                group, consumer, {stream: start}, count=count, block=block_ms
            ),
            block_ms,
        )
        return [e for _, rows in _stream_replies(reply) for e in _entries(rows)]

    async def claim_others(self, stream: str, group: str, consumer: str, count: int = 1000) -> int:
        """Move the (first `count`) entries pending on other consumers to `consumer`
        (XCLAIM JUSTID: their delivery counts stay as they were); how many moved."""
        rows = await self._call(
            "XPENDING", lambda: self._client.xpending_range(stream, group, "-", "+", count)
        )
        others: list[Any] = [r["message_id"] for r in rows if _text(r["consumer"]) != consumer]
        if not others:
            return 0
        claim = partial(self._client.xclaim, stream, group, consumer, 0, others, justid=True)
        return len(await self._call("XCLAIM", claim))

    async def xpending_counts(
        self, stream: str, group: str, consumer: str, count: int = 100
    ) -> dict[str, int]:
        """How many times each of the (first `count`) entries pending on `consumer` was
        delivered."""
        rows = await self._call(
            "XPENDING",
            lambda: self._client.xpending_range(stream, group, "-", "+", count, consumer),
        )
        return {_text(r["message_id"]): int(r["times_delivered"]) for r in rows}

    # -- batches --------------------------------------------------------------------------
    async def pipeline(
        self,
        op: str,
        build: Callable[[Pipeline], object],
        *,
        transaction: bool = False,
        raise_on_error: bool = True,
        blocks_ms: int | None = None,
    ) -> list[Any]:
        """Commands queued by `build` in one round trip (MULTI/EXEC with `transaction`);
        `blocks_ms`: one of them is a read that blocks so long (its deadline: `_read_call`)."""

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=transaction) as pipe:
                build(pipe)
                return lost_raised(await pipe.execute(raise_on_error=raise_on_error))

        if transaction and self.is_cluster:
            return await self._call(op, lambda: self._multi_per_slot(build, raise_on_error))
        if blocks_ms is not None:
            return await self._read_call(op, send, blocks_ms)
        return await self._call(op, send)

    async def commands(
        self, op: str, commands: Sequence[Command], *, transaction: bool = False
    ) -> list[Any]:
        """Commands given as their words (each one's key second) in one round trip, their
        replies raw (MULTI/EXEC with `transaction`; on a cluster, one MULTI per slot, as
        `pipeline`). On one server they skip redis-py's pipeline (transport._wire): about a
        third of the client's CPU per command (`pipeline` builds with redis-py's methods and
        parses their replies, for callers that want them typed)."""
        if transaction and self.is_cluster:

            def queue(pipe: Pipeline) -> None:
                for words in commands:
                    pipe.execute_command(*words)

            return await self._call(op, lambda: self._multi_per_slot(queue, True))
        return await self._pipelined(op, commands, transaction)

    async def _multi_per_slot(
        self, build: Callable[[Pipeline], object], raise_on_error: bool
    ) -> list[Any]:
        """A cluster's MULTI may not span slots: the commands `build` queues go as one
        MULTI per slot, one after another in the order of their first command (each
        slot's share atomic, the whole not); replies come back in the order queued."""
        recorder = SlotTransaction()
        build(cast(Pipeline, recorder))
        replies: list[Any] = [None] * len(recorder.commands)
        for group in recorder.groups():
            async with self._client.pipeline(transaction=True) as pipe:
                for i in group:
                    name, args, kwargs = recorder.commands[i]
                    getattr(pipe, name)(*args, **kwargs)
                answered = lost_raised(await pipe.execute(raise_on_error=raise_on_error))
                for i, reply in zip(group, answered, strict=True):
                    replies[i] = reply
        return replies
