"""Redis Streams transport: the only module that imports `redis`.

Publish (XADD, pipelined for batches), consume in consumer groups (XREADGROUP BLOCK),
XACK after handling, reclaim entries idle past `min_idle_ms` (XAUTOCLAIM) so a dead
replica's work moves to a live one, dead-letter poison entries after `max_deliveries`,
create groups idempotently, recover when Redis comes back empty (NOGROUP), reconnect
with backoff, and trim streams without ever dropping a pending entry. Redis errors are
translated to protocols.errors here and nowhere else.

Retries: every operation here is safe to repeat, so each one is retried on connection
loss (exponential backoff with jitter, at most `retry_s` in total) before it raises
TransportError. Repeating XADD can duplicate an entry whose reply was lost; that is the
accepted price of at-least-once delivery (handlers are idempotent). A repeated
XREADGROUP or XAUTOCLAIM whose reply was lost leaves its entries pending, so they come
back through `reclaim`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from protocols import codec
from protocols.codec import Envelope
from protocols.errors import DecodeError, ProtocolError, StateLost, TransportError
from protocols.ids import rfc3339, utcnow
from protocols.keys import STREAM_FIELD, Keys

__all__ = ["Delivery", "Redis", "Transport", "connect", "is_transient"]

T = TypeVar("T")
DEFAULT_RETRY_S = 10.0
_FIELD = STREAM_FIELD.encode()
_NOT_RETRIED = (rx.AuthenticationError, rx.AuthorizationError, rx.ExternalAuthProviderError)


def connect(url: str, **options: Any) -> Redis:
    """An asyncio Redis client (hiredis parser when installed), bytes responses."""
    options["decode_responses"] = False
    # No read timeout: blocking reads hold their socket for `block_ms` (redis-py's
    # default of 5 s would cut them off). Keepalive and resets detect a dead server.
    options.setdefault("socket_timeout", None)
    options.setdefault("socket_keepalive", True)
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("health_check_interval", 30)
    # A pool that waits for a free connection instead of failing; blocking reads each
    # hold one, so the cap is generous.
    options.setdefault("max_connections", 512)
    options.setdefault("timeout", 10.0)
    # One immediate retry on a fresh connection covers a pooled socket that a server
    # restart broke; longer outages are the Transport's (tenacity, with backoff).
    options.setdefault("retry", Retry(NoBackoff(), 1))
    # Name ourselves in CLIENT SETINFO: redis-py would otherwise read package metadata
    # on every new connection (a visible cost when replicas open many).
    if _DriverInfo is not None:
        options.setdefault("driver_info", _DriverInfo(name="callboard", lib_version="1"))
    if _pack_command is not None and url.startswith("redis://"):
        options.setdefault("connection_class", _PackedConnection)
    pool = aioredis.BlockingConnectionPool.from_url(url, **options)
    return aioredis.Redis.from_pool(pool)


_DriverInfo: Any
try:  # redis-py >= 8
    from redis.driver_info import DriverInfo as _DriverInfo
except ImportError:  # pragma: no cover
    _DriverInfo = None

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs commands in C: half the cost of a pipelined XADD on the hub's hot path
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency
    _pack_command = None


class _PackedConnection(aioredis.Connection):
    """A TCP connection whose commands are packed by hiredis instead of in Python."""

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:  # "CONFIG GET", "XINFO CONSUMERS"...
            args = (*head.split(), *args[1:])
        try:
            return [_pack_command(args)]  # type: ignore[misc]  # only used when importable
        except TypeError:  # an argument type hiredis does not take: the Python packer
            return super().pack_command(*args)

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(chunk for args in commands for chunk in self.pack_command(*args))]


@dataclass(slots=True)
class Delivery:
    """One stream entry handed to a consumer: decoded, or with the reason it is not."""

    stream: str
    entry_id: str
    raw: bytes
    deliveries: int = 1  # how many times the group has delivered this entry
    message: Envelope | None = None
    error: ProtocolError | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _ids_by_stream(deliveries: Sequence[Delivery]) -> dict[str, list[str]]:
    by_stream: dict[str, list[str]] = {}
    for delivery in deliveries:
        by_stream.setdefault(delivery.stream, []).append(delivery.entry_id)
    return by_stream


OnStateLost = Callable[[str, str], Awaitable[None]]  # (stream, group) recreated after NOGROUP


class _GroupMissing(StateLost):
    """NOGROUP: the stream or its group is gone (Redis restarted empty, key deleted)."""


def _is_group_missing(exc: rx.ResponseError) -> bool:
    text = str(exc)
    return text.startswith("NOGROUP") or "stream key no longer exists" in text


@contextmanager
def _translated(op: str) -> Iterator[None]:
    """The one place redis-py errors become protocols.errors (like httpx's mapping)."""
    try:
        yield
    except rx.ResponseError as exc:
        if _is_group_missing(exc):
            raise _GroupMissing(f"{op}: {exc}") from exc
        raise TransportError(f"{op}: {exc}") from exc
    except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
        raise TransportError(f"{op}: Redis unreachable: {exc}") from exc
    except rx.RedisError as exc:
        raise TransportError(f"{op}: {exc}") from exc


def is_transient(exc: BaseException) -> bool:
    """Is `exc` a lost or refused connection, worth retrying (for code that uses the client
    directly, such as the hub's state store, without importing redis)?"""
    return _transient(exc)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _NOT_RETRIED):
        return False
    return isinstance(exc, (rx.ConnectionError, rx.TimeoutError, ConnectionError))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _stream_replies(response: Any) -> list[tuple[str, list[Any]]]:
    """XREAD/XREADGROUP replies as [(stream, [(id, fields)])], whatever shape redis-py gave."""
    if not response:
        return []
    pairs = response.items() if isinstance(response, dict) else response
    out = []
    for key, entries in pairs:
        if entries and isinstance(entries[0], list) and len(entries) == 1:
            entries = entries[0]  # RESP3 wraps the entry list once more
        out.append((_text(key), list(entries or [])))
    return out


class Transport:
    """Streams I/O for one process. Safe to share between asyncio tasks."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        *,
        max_message_bytes: int = 256 * 1024,
        max_deliveries: int = 5,
        on_state_lost: OnStateLost | None = None,
        retry_s: float = DEFAULT_RETRY_S,
    ) -> None:
        self._client = client
        self.keys = keys
        self.max_message_bytes = max_message_bytes
        self.max_deliveries = max_deliveries
        self.on_state_lost = on_state_lost
        self.retry_s = retry_s
        self._owns_client = False

    @classmethod
    def from_url(cls, url: str, keys: Keys, **options: Any) -> Transport:
        names = ("max_message_bytes", "max_deliveries", "on_state_lost", "retry_s")
        own = {name: options.pop(name) for name in names if name in options}
        transport = cls(connect(url, **options), keys, **own)
        transport._owns_client = True
        return transport

    @property
    def client(self) -> Redis:
        """The underlying client, for hub state stores (they never import redis)."""
        return self._client

    async def close(self) -> None:
        # A client passed in belongs to the caller; one made by from_url is ours.
        if self._owns_client:
            await self._client.aclose()

    def _block(self, block_ms: int | None) -> int | None:
        """`block_ms`, kept under the client's read timeout if it has one (0 is forever)."""
        kwargs = getattr(self._client.connection_pool, "connection_kwargs", {})
        timeout_s = kwargs.get("socket_timeout")
        if block_ms is None or not isinstance(timeout_s, (int, float)):
            return block_ms
        limit_ms = max(1, int(timeout_s * 1000) - 500)
        return limit_ms if block_ms == 0 else min(block_ms, limit_ms)

    async def _call(self, op: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` with retries on connection loss and errors translated."""
        with _translated(op):
            try:  # the common case costs one call: the retry machinery only after a failure
                return await fn()
            except Exception as exc:
                if not _transient(exc):
                    raise
        retrying = AsyncRetrying(
            stop=stop_after_delay(self.retry_s),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(_transient),
            reraise=True,
        )

        async def attempt() -> T:
            return await fn()

        with _translated(op):
            return await retrying(attempt)

    # -- publishing ----------------------------------------------------------------------
    async def publish(self, stream: str, message: Envelope | bytes) -> str:
        """XADD one message; returns the entry id."""
        data = message if isinstance(message, bytes) else codec.encode(message)
        # No MAXLEN here: approximate trimming could drop pending entries; see `trim`.
        entry_id = await self._call("XADD", lambda: self._client.xadd(stream, {_FIELD: data}))
        return _text(entry_id)

    async def publish_many(
        self,
        items: Sequence[tuple[str, Envelope | bytes]],
        *,
        ack: Sequence[Delivery] = (),
        group: str | None = None,
    ) -> list[str]:
        """XADD many messages in one pipelined round trip, in order; with `ack` and `group`,
        the XACK of those deliveries rides in the same round trip, after the XADDs."""
        if not items and not ack:
            return []
        encoded = [(s, m if isinstance(m, bytes) else codec.encode(m)) for s, m in items]
        by_stream = _ids_by_stream(ack) if group is not None else {}

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream, data in encoded:
                    pipe.xadd(stream, {_FIELD: data})
                for stream, ids in by_stream.items():
                    pipe.xack(stream, group or "", *ids)
                return await pipe.execute()

        replies = await self._call("XADD", send)
        return [_text(entry_id) for entry_id in replies[: len(encoded)]]

    # -- consuming -----------------------------------------------------------------------
    async def ensure_group(self, stream: str, group: str, start_id: str = "0") -> None:
        """XGROUP CREATE ... MKSTREAM; an existing group is not an error."""
        await self._create_groups([stream], group, start_id)

    async def _create_groups(self, streams: Sequence[str], group: str, start_id: str) -> list[str]:
        """Create `group` on each stream (MKSTREAM); returns the streams it was missing on."""

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream in streams:
                    pipe.xgroup_create(stream, group, start_id, mkstream=True)
                return await pipe.execute(raise_on_error=False)

        created = []
        for stream, reply in zip(streams, await self._call("XGROUP CREATE", send), strict=True):
            if isinstance(reply, rx.ResponseError) and str(reply).startswith("BUSYGROUP"):
                continue
            if isinstance(reply, Exception):
                with _translated("XGROUP CREATE"):
                    raise reply
            created.append(stream)
        return created

    async def _recover(self, streams: Sequence[str], group: str) -> None:
        """After NOGROUP: recreate the group from the start and report each recreation."""
        for stream in await self._create_groups(streams, group, "0"):
            if self.on_state_lost is not None:
                await self.on_state_lost(stream, group)

    async def read_group(
        self,
        streams: Sequence[str],
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = 1000,
    ) -> list[Delivery]:
        """New entries for `consumer` (XREADGROUP >), decoded. Recreates missing groups."""
        if not streams:
            return []
        wanted: dict[Any, Any] = dict.fromkeys(streams, ">")
        block_ms = self._block(block_ms)

        def send() -> Awaitable[Any]:
            return self._client.xreadgroup(group, consumer, wanted, count=count, block=block_ms)

        try:
            response = await self._call("XREADGROUP", send)
        except _GroupMissing:
            await self._recover(list(wanted), group)
            try:
                response = await self._call("XREADGROUP", send)
            except _GroupMissing:
                return []  # deleted again meanwhile: the next read recovers
        return [
            self._delivery(stream, entry_id, fields, 1)
            for stream, entries in _stream_replies(response)
            for entry_id, fields in entries
        ]

    def _delivery(self, stream: str, entry_id: Any, fields: Any, deliveries: int) -> Delivery:
        """Decode one entry; a bad one becomes a Delivery with `.error` and its raw bytes."""
        pairs = (
            list(fields.items())
            if isinstance(fields, dict)
            else list(zip(fields[::2], fields[1::2], strict=True))
        )
        values = [_bytes(v) for k, v in pairs if _bytes(k) == _FIELD]
        problem = ""
        if not values:
            problem = f"entry has no {STREAM_FIELD!r} field"
        elif len(pairs) != 1:
            others = sorted({_text(k) for k, _ in pairs} - {STREAM_FIELD})
            problem = f"entry has unexpected fields {others or [STREAM_FIELD]}"
        delivery = Delivery(stream, _text(entry_id), values[0] if values else b"", deliveries)
        if problem:
            if not values:  # keep every byte we got, in a stable form
                delivery.raw = b"\n".join(_bytes(k) + b"=" + _bytes(v) for k, v in pairs)
            delivery.extra["fields"] = {_text(k): _bytes(v) for k, v in pairs}
            delivery.error = DecodeError(problem, delivery.raw)
            return delivery
        try:
            delivery.message = codec.decode(delivery.raw, max_bytes=self.max_message_bytes)
        except ProtocolError as exc:
            delivery.error = exc
        return delivery

    async def ack(self, deliveries: Sequence[Delivery], group: str) -> None:
        """XACK the deliveries (pipelined across streams)."""
        by_stream = _ids_by_stream(deliveries)
        if not by_stream:
            return

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream, ids in by_stream.items():
                    pipe.xack(stream, group, *ids)
                return await pipe.execute()

        await self._call("XACK", send)

    async def reclaim(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[Delivery]:
        """XAUTOCLAIM entries idle past `min_idle_ms` to `consumer`. Entries delivered more
        than `max_deliveries` times are dead-lettered (reason, raw bytes) and acked instead."""
        try:
            claimed, deleted = await self._autoclaim(stream, group, consumer, min_idle_ms, count)
            counts = await self._delivery_counts(stream, group, consumer, [i for i, _ in claimed])
        except _GroupMissing:
            await self._recover([stream], group)
            return []
        if deleted:  # XDEL'd or trimmed while pending: nothing left to deliver
            await self._call("XACK", lambda: self._client.xack(stream, group, *deleted))
        fresh: list[Delivery] = []
        poison: list[tuple[Delivery, str]] = []
        for entry_id, fields in claimed:
            if entry_id not in counts:
                continue  # acked by its previous owner in the meantime
            # XAUTOCLAIM counted itself as a delivery; consumers have had one fewer.
            delivery = self._delivery(stream, entry_id, fields, counts[entry_id])
            if counts[entry_id] > self.max_deliveries:
                delivery.deliveries -= 1
                poison.append((delivery, f"poison: delivered {delivery.deliveries} times"))
            else:
                fresh.append(delivery)
        if poison:
            await self._dead_letter_many(poison, group)
        return fresh

    async def _autoclaim(
        self, stream: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> tuple[list[tuple[str, Any]], list[str]]:
        """Walk the XAUTOCLAIM cursor until `count` entries are claimed or the PEL ends."""
        claimed: list[tuple[str, Any]] = []
        deleted: list[str] = []
        cursor = "0-0"
        while len(claimed) < count:
            want = count - len(claimed)
            claim = partial(
                self._client.xautoclaim, stream, group, consumer, min_idle_ms, cursor, count=want
            )
            reply = await self._call("XAUTOCLAIM", claim)
            cursor = _text(reply[0])
            for entry_id, fields in reply[1]:
                if fields is None:  # Redis 6.2 reports a deleted entry in place
                    deleted.append(_text(entry_id))
                else:
                    claimed.append((_text(entry_id), fields))
            if len(reply) > 2:  # Redis >= 7: ids of entries deleted while pending
                deleted.extend(_text(i) for i in reply[2])
            if cursor == "0-0":
                break
        return claimed, deleted

    async def _delivery_counts(
        self, stream: str, group: str, consumer: str, entry_ids: list[str]
    ) -> dict[str, int]:
        """Delivery counters of entries `consumer` owns, with one XPENDING range call."""
        if not entry_ids:
            return {}
        ordered = sorted(entry_ids, key=_id_key)
        wanted = set(entry_ids)
        # The range may also hold older claims of this consumer; ask for a few more, and
        # look up one by one (one more round trip) whatever the range did not reach.
        n = len(ordered) * 2 + 64
        rows = await self._call(
            "XPENDING",
            lambda: self._client.xpending_range(
                stream, group, ordered[0], ordered[-1], n, consumer
            ),
        )
        counts = {_text(r["message_id"]): int(r["times_delivered"]) for r in rows}
        missing = [i for i in ordered if i not in counts]
        if missing and len(rows) >= n:

            async def send() -> list[Any]:
                async with self._client.pipeline(transaction=False) as pipe:
                    for entry_id in missing:
                        pipe.xpending_range(stream, group, entry_id, entry_id, 1, consumer)
                    return await pipe.execute()

            for found in await self._call("XPENDING", send):
                counts.update({_text(r["message_id"]): int(r["times_delivered"]) for r in found})
        return {i: c for i, c in counts.items() if i in wanted}

    async def renew(self, stream: str, group: str, consumer: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries `consumer` is still working on (XCLAIM ... JUSTID),
        so a slow but alive replica keeps its claim and nobody steals it."""
        if not entry_ids:
            return
        # JUSTID leaves the delivery counter alone. Caveat: an entry that was already
        # reclaimed by another consumer is claimed back; delivery is at least once anyway.
        try:
            await self._call(
                "XCLAIM",
                lambda: self._client.xclaim(
                    stream, group, consumer, 0, list(entry_ids), justid=True
                ),
            )
        except _GroupMissing:
            await self._recover([stream], group)

    async def dead_letter(self, delivery: Delivery, reason: str, group: str | None = None) -> str:
        """Copy the entry to the dead-letter stream with its reason; XACK it in `group`."""
        return (await self._dead_letter_many([(delivery, reason)], group))[0]

    async def _dead_letter_many(
        self, items: Sequence[tuple[Delivery, str]], group: str | None
    ) -> list[str]:
        at = rfc3339(utcnow())

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for delivery, reason in items:
                    entry = {
                        "reason": reason,
                        "stream": delivery.stream,
                        "entry_id": delivery.entry_id,
                        "group": group or "",
                        "deliveries": str(delivery.deliveries),
                        "raw": delivery.raw,
                        "at": at or "",
                    }
                    pipe.xadd(self.keys.dead, entry)  # type: ignore[arg-type]
                    if group:
                        pipe.xack(delivery.stream, group, delivery.entry_id)
                return await pipe.execute()

        replies = await self._call("DEAD-LETTER", send)
        step = 2 if group else 1
        return [_text(entry_id) for entry_id in replies[::step]]

    async def dead_letters(self, count: int = 100) -> list[dict[str, Any]]:
        """The newest dead letters first, as dicts (`raw` as bytes, `raw_text` for display)."""
        rows = await self._call(
            "XREVRANGE", lambda: self._client.xrevrange(self.keys.dead, count=count)
        )
        letters = []
        for entry_id, fields in rows or []:
            data = {_text(k): _bytes(v) for k, v in (fields or {}).items()}
            raw = data.pop("raw", b"")
            letter: dict[str, Any] = {k: v.decode(errors="replace") for k, v in data.items()}
            letter["id"] = _text(entry_id)
            letter["deliveries"] = int(letter.get("deliveries") or 0)
            letter["raw"] = raw
            letter["raw_text"] = raw.decode(errors="replace")
            letters.append(letter)
        return letters

    # -- broadcast -----------------------------------------------------------------------
    async def read_broadcast(self, last_id: str, *, block_ms: int | None = 1000) -> list[Delivery]:
        """Broadcast entries after `last_id` (plain XREAD, no group: every replica sees all)."""
        stream, block_ms = self.keys.broadcast, self._block(block_ms)
        response = await self._call(
            "XREAD",
            lambda: self._client.xread({stream: last_id}, count=1000, block=block_ms),
        )
        return [
            self._delivery(key, entry_id, fields, 1)
            for key, entries in _stream_replies(response)
            for entry_id, fields in entries
        ]

    async def broadcast_tail(self) -> str:
        """The id of the newest broadcast entry ("0-0" if none): read after it for new ones."""
        rows = await self._call(
            "XREVRANGE", lambda: self._client.xrevrange(self.keys.broadcast, count=1)
        )
        return _text(rows[0][0]) if rows else "0-0"

    # -- inspection and upkeep -----------------------------------------------------------
    async def consumers(self, stream: str, group: str) -> dict[str, dict[str, int]]:
        """XINFO CONSUMERS: {consumer: {"pending": n, "idle_ms": n, "inactive_ms": n}}."""
        try:
            rows = await self._call(
                "XINFO CONSUMERS", lambda: self._client.xinfo_consumers(stream, group)
            )
        except _GroupMissing:
            return {}
        except TransportError as exc:
            if "no such key" in str(exc):
                return {}
            raise
        out = {}
        for row in rows:
            idle = int(row["idle"])
            # `inactive` (since the last successful read) is reported from Redis 7.2 on.
            inactive = row.get("inactive")
            out[_text(row["name"])] = {
                "pending": int(row["pending"]),
                "idle_ms": idle,
                "inactive_ms": idle if inactive is None or int(inactive) < 0 else int(inactive),
                # before 7.2, `idle` counts only successful reads: a replica blocked in
                # XREADGROUP looks idle, so idle time says nothing about liveness there
                "idle_is_liveness": int(inactive is not None),
            }
        return out

    async def ensure_consumer(self, stream: str, group: str, consumer: str) -> None:
        """XGROUP CREATECONSUMER: list a replica in its group before it reads anything."""
        await self._call(
            "XGROUP CREATECONSUMER",
            lambda: self._client.xgroup_createconsumer(stream, group, consumer),
        )

    async def pending_count(self, stream: str, group: str) -> int:
        """How many entries `group` has delivered and not yet acked (0 if it is missing)."""
        try:
            summary = await self._call("XPENDING", lambda: self._client.xpending(stream, group))
        except _GroupMissing:
            return 0
        return int(summary["pending"])

    async def stream_info(self, stream: str) -> dict[str, Any] | None:
        """{length, first_id, last_id, groups}, or None when the stream does not exist."""
        try:
            info = await self._call("XINFO STREAM", lambda: self._client.xinfo_stream(stream))
        except TransportError as exc:
            if "no such key" in str(exc):
                return None
            raise
        first, last = info.get("first-entry"), info.get("last-entry")
        return {
            "length": int(info["length"]),
            "first_id": _text(first[0]) if first else None,
            "last_id": _text(info["last-generated-id"]),
            "last_entry_id": _text(last[0]) if last else None,
            "groups": int(info["groups"]),
        }

    async def trim(self, stream: str, *, maxlen: int) -> int:
        """Trim to about `maxlen` entries, never past the oldest entry any group still has
        pending or has not yet been delivered. Returns the number of entries removed."""
        length = await self._call("XLEN", lambda: self._client.xlen(stream))
        excess = int(length) - maxlen
        if excess <= 0:
            return 0
        cutoff = await self._floor(stream)
        if cutoff is not None and cutoff <= (0, 0):
            return 0
        # The id of the oldest entry to keep, fetched from whichever end is nearer.
        if excess < maxlen:
            rows = await self._call("XRANGE", lambda: self._client.xrange(stream, count=excess + 1))
        else:
            rows = await self._call(
                "XREVRANGE", lambda: self._client.xrevrange(stream, count=maxlen)
            )
        if not rows:
            return 0
        keep = _id_key(_text(rows[-1][0]))
        cutoff = keep if cutoff is None else min(cutoff, keep)
        minid = f"{cutoff[0]}-{cutoff[1]}"
        removed = await self._call(
            "XTRIM", lambda: self._client.xtrim(stream, minid=minid, approximate=False)
        )
        return int(removed)

    async def _floor(self, stream: str) -> tuple[int, int] | None:
        """The oldest id any group still needs (pending or undelivered); None if no groups."""
        groups = await self._call("XINFO GROUPS", lambda: self._client.xinfo_groups(stream))
        if not groups:
            return None

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for g in groups:
                    pipe.xpending(stream, g["name"])
                return await pipe.execute()

        floor = min(_id_key(_text(g["last-delivered-id"])) for g in groups)
        for summary in await self._call("XPENDING", send):
            if summary["pending"] and summary["min"] is not None:
                floor = min(floor, _id_key(_text(summary["min"])))
        return floor
