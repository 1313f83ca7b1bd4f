"""Publishing and consuming: XADD, XREADGROUP, XACK, reclaim, renew, dead letters."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from protocols import codec
from protocols.codec import Envelope
from protocols.errors import DecodeError, GroupMissing, ProtocolError
from protocols.ids import rfc3339, utcnow
from protocols.keys import STREAM_FIELD, is_entry_id
from protocols.transport._client import (
    _FIELD,
    Delivery,
    _bytes,
    _id_key,
    _ids_by_stream,
    _stream_replies,
    _text,
)
from protocols.transport._errors import is_busy_group, lost_raised, translated
from protocols.transport._slots import by_slot
from protocols.transport._upkeep import _Upkeep
from protocols.transport._wire import Command, WriteAhead, ahead_of, command, is_lean

MAX_REASON_CHARS = 1000  # a dead letter's reason is cut here (it may quote what was sent)
# What `reclaim` hands entries delivered too often to, with the reason for each.
OnPoison = Callable[[list[tuple[Delivery, str]]], Awaitable[None]]


class Transport(_Upkeep):
    """Streams I/O for one process. Safe to share between asyncio tasks."""

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
        then: Sequence[Sequence[Any]] = (),
        atomic: bool = False,
    ) -> list[str]:
        """XADD many messages in one pipelined round trip, in order; then the raw commands
        `then` (e.g. a done-marker's SET); with `ack` and `group`, the XACK of those
        deliveries last. `atomic` wraps it all in MULTI/EXEC: every write lands, or none."""
        if not items and not ack and not then:
            return []
        replies = await self._write(self.writes(items, ack=ack, group=group, then=then), atomic)
        return [_text(entry_id) for entry_id in replies[: len(items)]]

    async def _write(self, commands: Sequence[Command], atomic: bool) -> list[Any]:
        return await self._pipelined("XADD", commands, atomic)

    @staticmethod
    def writes(
        items: Sequence[tuple[str, Envelope | bytes]],
        *,
        ack: Sequence[Delivery] = (),
        group: str | None = None,
        then: Sequence[Sequence[Any]] = (),
    ) -> list[Command]:
        """`publish_many`'s commands: the XADDs in order, `then`, the XACKs last."""
        encoded = [(s, m if isinstance(m, bytes) else codec.encode(m)) for s, m in items]
        by_stream = _ids_by_stream(ack) if group is not None else {}
        return [
            *(("XADD", stream, "*", _FIELD, data) for stream, data in encoded),
            *then,
            *(("XACK", stream, group, *ids) for stream, ids in by_stream.items()),
        ]

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
                return lost_raised(await pipe.execute(raise_on_error=False))

        created = []
        for stream, reply in zip(streams, await self._call("XGROUP CREATE", send), strict=True):
            if is_busy_group(reply):
                continue
            if isinstance(reply, Exception):
                with translated("XGROUP CREATE"):
                    raise reply
            created.append(stream)
        return created

    async def _recover(self, streams: Sequence[str], group: str) -> None:
        """After NOGROUP: recreate the group from the start and report each recreation."""
        for stream in await self._create_groups(streams, group, "0"):
            self.groups_recreated += 1
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
        ahead: WriteAhead | None = None,
        sent: float | None = None,
    ) -> list[Delivery]:
        """New entries for `consumer` (XREADGROUP >), decoded. Recreates missing groups.
        On a cluster, one XREADGROUP per slot (see protocols.transport._slots).

        `sent` (the caller's clock as it calls): `answered` then lists the reads whose
        entries this returns, each with the `sent` of the call that sent it (on a cluster
        a slot's read may have been sent by an earlier call) and its streams.

        `ahead`: an atomic write sent first, in the same round trip on a plain Redis
        (`_wire.ahead_of`), on its own before the read elsewhere; it is told its outcome
        before the read waits, and told a failure if the read fails before that."""
        if ahead is None:
            return await self._read(streams, group, consumer, count, block_ms, None, sent)
        try:
            if not streams or not self.writes_ride_reads:
                await self._write_alone(ahead)
            return await self._read(streams, group, consumer, count, block_ms, ahead, sent)
        except BaseException as exc:
            if not ahead.told:  # never sent, or its outcome unknown: failed for its writers
                ahead.tell(exc if isinstance(exc, Exception) else _interrupted(exc))
            raise

    @property
    def writes_ride_reads(self) -> bool:
        """Does a write given to `read_group` as `ahead` go in the read's own round trip (a
        plain Redis on callboard's pool)? Elsewhere it is written first, on its own."""
        return not self.is_cluster and is_lean(self._client)

    async def _write_alone(self, ahead: WriteAhead) -> None:
        try:
            results = await self._write(ahead.commands, atomic=True)
        except Exception as exc:
            ahead.tell(exc)
        else:
            ahead.tell(results)

    async def _read(
        self, streams: Sequence[str], group: str, consumer: str, count: int,
        block_ms: int | None, ahead: WriteAhead | None, sent: float | None = None,
    ) -> list[Delivery]:  # fmt: skip
        self.answered = []
        if not streams:
            return []
        block_ms = self._block(block_ms)
        groups = by_slot(streams) if self.is_cluster else [list(streams)]
        if len(groups) == 1:
            found = await self._read_group(groups[0], group, consumer, count, block_ms, ahead)
            if sent is not None:
                self.answered = [(sent, tuple(groups[0]))]
            return found

        def start(slot_streams: Sequence[str]) -> Awaitable[list[Delivery]]:
            return self._read_group(slot_streams, group, consumer, count, block_ms)

        if block_ms is None:  # nothing waits: each slot's read once, at once
            parts = await asyncio.gather(*(start(g) for g in groups))
            if sent is not None:
                self.answered = [(sent, tuple(g)) for g in groups]
            return [delivery for part in parts for delivery in part]
        wait_s = None if block_ms == 0 else block_ms / 1000  # reads go on after it
        found = await self._in_flight.read((group, consumer), groups, start, wait_s, sent)
        self.answered = [(s, g) for s, g in self._in_flight.answered if s is not None]
        return found

    async def _read_group(
        self, streams: Sequence[str], group: str, consumer: str, count: int,
        block_ms: int | None, ahead: WriteAhead | None = None,
    ) -> list[Delivery]:  # fmt: skip
        """One XREADGROUP over `streams` (one slot on a cluster), behind `ahead` while it
        has not been told its outcome (a plain Redis: see `read_group`)."""
        wanted: dict[Any, Any] = dict.fromkeys(streams, ">")
        lean = is_lean(self._client)
        blocking = ("BLOCK", block_ms) if block_ms is not None else ()
        words = ("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *blocking, "STREAMS")

        def send() -> Awaitable[Any]:
            if lean:  # raw: {stream: [[id, [field, value...]]...]} (RESP2: pairs in a list)
                read = (*words, *streams, *[">"] * len(streams))
                if ahead is not None and not ahead.told:
                    return ahead_of(self._client, ahead, *read)
                return command(self._client, *read)
            return self._client.xreadgroup(group, consumer, wanted, count=count, block=block_ms)

        try:
            response = await self._read_call("XREADGROUP", send, block_ms)
        except GroupMissing:
            await self._recover(list(wanted), group)
            try:
                response = await self._read_call("XREADGROUP", send, block_ms)
            except GroupMissing:
                return []  # deleted again meanwhile: the next read recovers
        if lean:  # as sent (redis-py's shapes need `_stream_replies`' unwrapping)
            read = response.items() if isinstance(response, dict) else response or ()
            replies = [(_text(stream), entries) for stream, entries in read]
        else:
            replies = _stream_replies(response)
        return [
            self._delivery(stream, entry_id, fields, 1)
            for stream, entries in replies
            for entry_id, fields in entries
        ]

    def _delivery(self, stream: str, entry_id: Any, fields: Any, deliveries: int) -> Delivery:
        """Decode one entry; a bad one becomes a Delivery with `.error` and its raw bytes."""
        if type(fields) is list and len(fields) == 2 and fields[0] == _FIELD:
            value = fields[1]  # the usual entry, read raw: its one field
            if type(value) is bytes:
                return self._decoded(Delivery(stream, _text(entry_id), value, deliveries))
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
        return self._decoded(delivery)

    def _decoded(self, delivery: Delivery) -> Delivery:
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
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int = 100,
        on_poison: OnPoison | None = None, forgive: bool = False,
    ) -> list[Delivery]:  # fmt: skip
        """XAUTOCLAIM entries idle past `min_idle_ms` to `consumer`. Entries delivered more
        than `max_deliveries` times are not handed out: they go to `on_poison` (a specialist
        asks the hub to dead-letter them, as it may write nothing but its out stream), or
        without it are dead-lettered (reason, raw bytes) and acked here (the hub).

        `forgive`: the entries `consumer` itself held were read by work that ended through
        no fault of theirs (the hub's term lost Redis or its lease), so claiming them back
        does not count as a delivery: their counters are set back (XCLAIM RETRYCOUNT)."""
        try:
            held = await self._held(stream, group, consumer, count) if forgive else set()
            claimed, deleted = await self._autoclaim(stream, group, consumer, min_idle_ms, count)
            counts = await self._delivery_counts(stream, group, consumer, [i for i, _ in claimed])
            counts = await self._uncount(stream, group, consumer, counts, held)
        except GroupMissing:
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
        if poison and on_poison is not None:
            await on_poison(poison)
        elif poison:
            sender = self.keys.agent_of_out(stream) or self.keys.agent_of_inbox(stream) or ""
            await self.dead_letter_many([(d, why, sender) for d, why in poison], group)
        return fresh

    async def _held(self, stream: str, group: str, consumer: str, count: int) -> set[str]:
        """Ids of the oldest `count` entries pending on `consumer` (those a claim of `count`
        entries in id order can reach)."""
        rows = await self._call(
            "XPENDING",
            lambda: self._client.xpending_range(stream, group, "-", "+", count, consumer),
        )
        return {_text(r["message_id"]) for r in rows}

    async def _uncount(
        self, stream: str, group: str, consumer: str, counts: dict[str, int], held: set[str]
    ) -> dict[str, int]:
        """Set back by one the delivery counters of the claimed entries in `held` (the
        claim that counted them is not a delivery); the counters as they now stand."""
        by_count: dict[int, list[Any]] = {}  # the new count -> entry ids
        for entry_id, n in counts.items():
            if entry_id in held and n > 1:
                by_count.setdefault(n - 1, []).append(entry_id)
        if not by_count:
            return counts

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for n, ids in by_count.items():  # JUSTID: the XCLAIM itself counts nothing
                    pipe.xclaim(stream, group, consumer, 0, ids, retrycount=n, justid=True)
                return await pipe.execute()

        await self._call("XCLAIM", send)
        return {i: n - 1 if i in held and n > 1 else n for i, n in counts.items()}

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

    async def renew(
        self, stream: str, group: str, consumer: str, entry_ids: Sequence[str]
    ) -> list[str]:
        """Reset the idle time of entries `consumer` is still working on (XCLAIM ... JUSTID),
        so a slow but alive replica keeps its claim and nobody steals it; returns the ids
        renewed. Only entries still pending on `consumer` (XPENDING first): one another
        replica reclaimed after this one stalled past the claim window is its now, and
        claiming it back would have both run it and report it. (A reclaim landing between
        the XPENDING and the XCLAIM is still undone: a window of one round trip.)"""
        if not entry_ids:
            return []
        try:
            mine = list(await self._delivery_counts(stream, group, consumer, list(entry_ids)))
            if mine:  # JUSTID leaves the delivery counter alone
                ids: list[Any] = list(mine)
                claim = partial(self._client.xclaim, stream, group, consumer, 0, ids, justid=True)
                # no retry: one held back past a reclaim would take the entry back (the
                # next renewal, a third of MIN_IDLE later, tries again)
                await self._call("XCLAIM", claim, retry_s=0)
        except GroupMissing:
            await self._recover([stream], group)
            return []
        return mine

    async def dead_letter(
        self, delivery: Delivery, reason: str, group: str | None = None, sender: str = ""
    ) -> str:
        """Copy the entry to the dead-letter stream with its reason; XACK it in `group`."""
        return (await self.dead_letter_many([(delivery, reason, sender)], group))[0]

    async def dead_letter_many(
        self, items: Sequence[tuple[Delivery, str, str]], group: str | None
    ) -> list[str]:
        """Dead-letter (delivery, reason, sender) items in one round trip, then XACK each
        in `group` when given; returns the dead letters' ids. The XACKs follow once every
        letter is stored: out of memory Redis refuses an XADD but not an XACK, so sent
        together an entry could be acknowledged with its letter refused. A letter keeps the
        entry's first `deadletter_raw_bytes` with the size and SHA-256 of all of it, and the
        stream is capped at about `deadletter_maxlen` letters (XADD MAXLEN ~)."""
        if not items:
            return []
        at = rfc3339(utcnow())
        entries = [self._letter(d, reason, sender, group, at) for d, reason, sender in items]

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for entry in entries:
                    pipe.xadd(
                        self.keys.dead, entry, maxlen=self.deadletter_maxlen, approximate=True
                    )
                return await pipe.execute()

        replies = await self._call("DEAD-LETTER", send)
        if group:
            await self.ack([delivery for delivery, _, _ in items], group)
        return [_text(entry_id) for entry_id in replies]

    def _letter(
        self, delivery: Delivery, reason: str, sender: str, group: str | None, at: str | None
    ) -> dict[Any, Any]:
        raw = delivery.raw
        return {
            "reason": reason[:MAX_REASON_CHARS],
            "stream": delivery.stream,
            "entry_id": delivery.entry_id,
            "group": group or "",
            "sender": sender,
            "deliveries": str(delivery.deliveries),
            "raw": raw[: self.deadletter_raw_bytes],
            "raw_size": str(len(raw)),
            "raw_sha256": hashlib.sha256(raw).hexdigest(),
            "at": at or "",
        }

    async def entries_by_id(self, stream: str, entry_ids: Sequence[str]) -> dict[str, Delivery]:
        """The entries of `stream` with these ids that exist (one pipelined XRANGE each),
        decoded as a read would decode them; ids that are not entry ids are skipped."""
        wanted = [i for i in dict.fromkeys(entry_ids) if is_entry_id(i)]
        if not wanted:
            return {}

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for entry_id in wanted:
                    pipe.xrange(stream, entry_id, entry_id, count=1)
                return await pipe.execute()

        found: dict[str, Delivery] = {}
        for rows in await self._call("XRANGE", send):
            for entry_id, fields in rows or []:
                delivery = self._delivery(stream, entry_id, fields, 1)
                found[delivery.entry_id] = delivery
        return found

    # -- broadcast -----------------------------------------------------------------------
    async def read_broadcast(self, last_id: str, *, block_ms: int | None = 1000) -> list[Delivery]:
        """Broadcast entries after `last_id` (plain XREAD, no group: every replica sees all)."""
        stream, block_ms = self.keys.broadcast, self._block(block_ms)
        response = await self._read_call(
            "XREAD",
            lambda: self._client.xread({stream: last_id}, count=1000, block=block_ms),
            block_ms,
        )
        return [
            self._delivery(key, entry_id, fields, 1)
            for key, entries in _stream_replies(response)
            for entry_id, fields in entries
        ]


def _interrupted(exc: BaseException) -> ConnectionError:
    """What the writers of a write cut short by a cancellation (or an exit) are told."""
    return ConnectionError(f"write interrupted ({type(exc).__name__})")
