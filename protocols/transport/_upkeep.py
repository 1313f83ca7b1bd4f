"""Inspection and upkeep of streams: consumers, pending counts, dead letters, trimming."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from protocols.errors import GroupMissing, TransportError
from protocols.keys import is_entry_id
from protocols.transport import _gateway
from protocols.transport._base import _TransportBase
from protocols.transport._client import _bytes, _id_key, _text
from protocols.transport._errors import (
    is_group_missing,
    is_no_such_key,
    lost_raised,
    translated,
)
from protocols.transport._gateway import Script

_SEQ_MAX = 2**64 - 1  # the largest part of a stream id (its time, and its sequence)
# An agent may make up consumer groups on its own inbox (its ACL grants XGROUP CREATE, for
# its own): a stream's groups are listed on the loop only up to this many (XINFO GROUPS of
# 100,000 took 0.45 s to parse, and trimming then asked XPENDING of each)
GROUPS_READ_MAX = 8


@dataclass(frozen=True)
class Crowd:
    """A stream's consumer groups, and one group's consumers, as counted."""

    groups: int  # 0: no stream
    consumers: int | None  # the group's; None: not counted (more than GROUPS_READ_MAX groups)


# KEYS: 1 the stream. ARGV: 1 the group, 2... consumers. Drops each consumer that has no
# entry pending, in one step with the look (an entry it read meanwhile would be lost).
_DROP_IDLE = """
local dropped = 0
for i = 2, #ARGV do
  if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[i]) == 0 then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
"""


class _Upkeep(_TransportBase):
    """The part of the Transport that inspects and trims streams."""

    _drop_idle: Script | None = None  # registered when first asked for

    async def dead_letters(
        self, count: int = 100, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest `count` dead letters first (older than entry `before` when given), as
        dicts: `raw` as bytes (the part kept), `raw_text` for display, `raw_size` and
        `raw_sha256` of the whole entry (a letter written before they were kept: of `raw`)."""
        if before is not None and not is_entry_id(before):
            raise ValueError(f"not a stream entry id: {before!r}")
        newest = "+"
        if before is not None:
            ms, seq = (int(part) for part in before.split("-"))
            if (ms, seq) == (0, 0):
                return []  # nothing is older than the first id (and Redis refuses "(0-0")
            newest = f"({ms}-{seq}"
        rows = await self._call(
            "XREVRANGE", lambda: self._client.xrevrange(self.keys.dead, newest, "-", count=count)
        )
        letters = []
        for entry_id, fields in rows or []:
            data = {_text(k): _bytes(v) for k, v in (fields or {}).items()}
            raw = data.pop("raw", b"")
            letter: dict[str, Any] = {k: v.decode(errors="replace") for k, v in data.items()}
            letter["id"] = _text(entry_id)
            letter["deliveries"] = _int(letter.get("deliveries"))
            letter["raw"] = raw
            letter["raw_text"] = raw.decode(errors="replace")
            letter["raw_size"] = _int(letter.get("raw_size"), len(raw))
            letter["raw_sha256"] = letter.get("raw_sha256") or hashlib.sha256(raw).hexdigest()
            letters.append(letter)
        return letters

    async def oldest_dead_letter(self) -> str | None:
        """The id of the oldest letter the capped dead-letter stream still holds (None when
        it holds none): the letters before it were trimmed."""
        rows = await self._call(
            "XRANGE", lambda: self._client.xrange(self.keys.dead, "-", "+", count=1)
        )
        return _text(rows[0][0]) if rows else None

    async def held_elsewhere(self, streams: Sequence[str], group: str, consumer: str) -> set[str]:
        """The streams where some consumer other than `consumer` holds pending entries of
        `group` (one pipelined XPENDING summary; a stream or group that is gone holds none)."""
        if not streams:
            return set()

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream in streams:
                    pipe.xpending(stream, group)
                return lost_raised(await pipe.execute(raise_on_error=False))

        held = set()
        for stream, summary in zip(streams, await self._call("XPENDING", send), strict=True):
            if isinstance(summary, Exception) or not summary:
                continue
            names = {_text(c["name"]) for c in summary.get("consumers") or ()}
            if names - {consumer}:
                held.add(stream)
        return held

    async def scan_keys(self, match: str) -> list[str]:
        """Every key matching the glob `match` (SCAN, a thousand at a time)."""

        async def scan() -> list[str]:
            return [_text(k) async for k in self._client.scan_iter(match=match, count=1000)]

        return await self._call("SCAN", scan)

    async def broadcast_tail(self) -> str:
        """The id of the newest broadcast entry ("0-0" if none): read after it for new ones."""
        return await self._newest_id(self.keys.broadcast)

    async def consumers(self, stream: str, group: str) -> dict[str, dict[str, int]]:
        """XINFO CONSUMERS: {consumer: {"pending": n, "idle_ms": n, "inactive_ms": n}}."""
        return (await self.consumers_of([(stream, group)]))[0]

    async def consumers_of(
        self, groups: Sequence[tuple[str, str]]
    ) -> list[dict[str, dict[str, int]]]:
        """`consumers` for many (stream, group) pairs in one pipelined round trip; a missing
        stream or group reads as no consumers."""
        if not groups:
            return []

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream, group in groups:
                    pipe.xinfo_consumers(stream, group)
                return lost_raised(await pipe.execute(raise_on_error=False))

        out: list[dict[str, dict[str, int]]] = []
        for reply in await self._call("XINFO CONSUMERS", send):
            if is_group_missing(reply) or is_no_such_key(reply):
                out.append({})
                continue
            if isinstance(reply, Exception):
                with translated("XINFO CONSUMERS"):
                    raise reply
            out.append({_text(row["name"]): _consumer(row) for row in reply})
        return out

    async def consumer_counts(self, groups: Sequence[tuple[str, str]]) -> list[Crowd]:
        """How many groups each stream has, and how many consumers its (stream, group) has,
        read before the consumers themselves, whose list an agent can make as long as it
        likes on its own inbox. So can it make up groups there (its ACL grants XGROUP CREATE
        for its own): the groups are listed (XINFO GROUPS) only where XINFO STREAM counts
        at most GROUPS_READ_MAX. Two pipelined round trips; a missing stream or group has
        none."""
        totals = await self.group_counts([stream for stream, _ in groups])
        listed = [pair for pair, n in zip(groups, totals, strict=True) if 0 < n <= GROUPS_READ_MAX]
        replies = await self._each_stream("XINFO GROUPS", [stream for stream, _ in listed])
        rows_of = dict(zip(listed, replies, strict=True))
        crowds = []
        for pair, total in zip(groups, totals, strict=True):
            if pair not in rows_of:  # none, or too many to list
                crowds.append(Crowd(total, 0 if total == 0 else None))
                continue
            rows = rows_of[pair] or []
            own = [r for r in rows if _text(r["name"]) == pair[1]]
            crowds.append(Crowd(len(rows), int(own[0]["consumers"]) if own else 0))
        return crowds

    async def group_consumers(self, streams: Sequence[str]) -> list[dict[str, int]]:
        """Each stream's groups with how many consumers each has (XINFO GROUPS, one
        pipelined round trip; {} for a missing stream). For streams whose groups no agent
        makes (an agent's inbox: `consumer_counts`)."""
        return [
            {_text(row["name"]): int(row["consumers"]) for row in rows or []}
            for rows in await self._each_stream("XINFO GROUPS", streams)
        ]

    async def group_counts(self, streams: Sequence[str]) -> list[int]:
        """How many consumer groups each stream has (XINFO STREAM, one pipelined round trip,
        a reply of a few fields and the stream's first and last entries however many groups
        there are; 0 for a missing stream)."""
        replies = await self._each_stream("XINFO STREAM", streams)
        return [0 if info is None else int(info["groups"]) for info in replies]

    async def _each_stream(self, command: str, streams: Sequence[str]) -> list[Any]:
        """XINFO GROUPS or XINFO STREAM (`command`) of each stream, in one pipelined round
        trip: their replies, None for a missing stream (any other error is raised)."""
        if not streams:
            return []

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream in streams:
                    if command == "XINFO GROUPS":
                        pipe.xinfo_groups(stream)
                    else:
                        pipe.xinfo_stream(stream)
                return lost_raised(await pipe.execute(raise_on_error=False))

        replies: list[Any] = []
        for reply in await self._call(command, send):
            if is_no_such_key(reply):
                replies.append(None)
                continue
            if isinstance(reply, Exception):
                with translated(command):
                    raise reply
            replies.append(reply)
        return replies

    async def idle_consumers(
        self, stream: str, group: str, *, keep: Collection[str], min_idle_ms: int, most: int
    ) -> list[str]:
        """Up to `most` consumers of `group` not in `keep` that hold nothing pending and have
        been idle `min_idle_ms`, listed off the event loop (`_listed_off_loop`)."""

        def pick(rows: Any) -> list[str]:
            found = []
            for row in rows:
                name = _text(row["name"])
                if name in keep or int(row["pending"]) or int(row["idle"]) < min_idle_ms:
                    continue
                found.append(name)
                if len(found) >= most:
                    break
            return found

        return await self._listed_off_loop(
            "XINFO CONSUMERS", lambda client: client.xinfo_consumers(stream, group), pick
        )

    async def foreign_groups(self, stream: str, own: str, *, most: int) -> list[str]:
        """Up to `most` consumer groups of `stream` other than `own`, listed off the event
        loop (`_listed_off_loop`; on a cluster, on it): those an agent made up on its own
        inbox."""

        def others(names: Iterable[str]) -> list[str]:
            return list(itertools.islice((n for n in names if n != own), most))

        if self.is_cluster:  # read here (its client is not made again in a thread): made-up
            return others(await self.group_names(stream))  # groups are an agent's doing
        return await self._listed_off_loop(
            "XINFO GROUPS",
            lambda client: client.xinfo_groups(stream),
            lambda rows: others(_text(row["name"]) for row in rows),
        )

    async def drop_groups(self, stream: str, groups: Sequence[str]) -> int:
        """XGROUP DESTROY each of `groups` (pipelined, a thousand a round trip); how many
        there were."""
        dropped = 0
        for start in range(0, len(groups), 1000):
            chunk = groups[start : start + 1000]

            async def send(chunk: Sequence[str] = chunk) -> list[Any]:
                async with self._client.pipeline(transaction=False) as pipe:
                    for group in chunk:
                        pipe.xgroup_destroy(stream, group)
                    return await pipe.execute()

            dropped += sum(int(n) for n in await self._call("XGROUP DESTROY", send))
        return dropped

    async def _listed_off_loop(
        self,
        command: str,
        listing: Callable[[Any], Awaitable[Any]],
        pick: Callable[[Any], list[str]],
    ) -> list[str]:
        """`pick` of a listing read and parsed off the event loop (a worker thread, on a
        connection of its own, its reply due within REPLY_GRACE_S as any call's): an agent
        may have made millions of names, and parsing them here would stall every task of
        the process. [] for a missing stream or group, and on a cluster (not listed)."""
        if self.is_cluster:
            return []
        pool = self._client.connection_pool
        client_type, pool_type = type(self._client), type(pool)

        async def listed() -> Any:
            options = {**pool.connection_kwargs, "socket_timeout": _gateway.REPLY_GRACE_S}
            own = pool_type(connection_class=pool.connection_class, **options)
            client = client_type(connection_pool=own)
            try:
                return await listing(client)
            finally:
                await client.aclose()
                await own.disconnect()

        try:
            return await asyncio.to_thread(lambda: pick(asyncio.run(listed())))
        except Exception as exc:
            if is_group_missing(exc) or is_no_such_key(exc):
                return []
            with translated(command):
                raise

    async def drop_consumers(self, stream: str, group: str, consumers: Sequence[str]) -> int:
        """XGROUP DELCONSUMER each that holds nothing pending when it is dropped (checked in
        the same script: a consumer listed idle may have read an entry since, and dropping it
        would take that entry out of the group for good); a thousand a script. Returns how
        many were dropped (one with no pending entry loses nothing: a read makes it again)."""
        if self._drop_idle is None:
            self._drop_idle = self.script(_DROP_IDLE)
        dropped = 0
        for start in range(0, len(consumers), 1000):
            chunk = list(consumers[start : start + 1000])
            dropped += int(await self._drop_idle([stream], [group, *chunk]))
        return dropped

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
        except GroupMissing:
            return 0
        return int(summary["pending"])

    async def stream_info(self, stream: str) -> dict[str, Any] | None:
        """{length, first_id, last_id, groups}, or None when the stream does not exist."""
        try:
            info = await self._call("XINFO STREAM", lambda: self._client.xinfo_stream(stream))
        except TransportError as exc:
            if is_no_such_key(exc.__cause__):
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

    async def group_names(self, stream: str) -> list[str]:
        """The consumer groups of `stream` ([] when it does not exist)."""
        try:
            rows = await self._call("XINFO GROUPS", lambda: self._client.xinfo_groups(stream))
        except TransportError as exc:  # a missing key has no groups
            if is_no_such_key(exc.__cause__):
                return []
            raise
        return [_text(row["name"]) for row in rows]

    async def drop_group(self, stream: str, group: str) -> None:
        """XGROUP DESTROY: a group nobody will read again (its pending entries and unread
        ones would hold the stream's trimming back for ever)."""
        await self._call("XGROUP DESTROY", lambda: self._client.xgroup_destroy(stream, group))

    async def trim(
        self, stream: str, *, maxlen: int, grouped_only: bool = False, group: str | None = None
    ) -> int:
        """Trim to about `maxlen` entries, never past the oldest entry any group still has
        pending or has not yet been delivered (`grouped_only`: leave a stream no group
        reads yet alone: its reader has not come). `group`: only that group counts (an
        agent's inbox: its own; see `_floor`). Returns the number of entries removed."""
        length = await self._call("XLEN", lambda: self._client.xlen(stream))
        excess = int(length) - maxlen
        if excess <= 0:
            return 0
        cutoff = await self._floor(stream, only=group)
        if cutoff is None and grouped_only:
            return 0
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

    async def trim_handled(self, stream: str, groups: int = 1, keep_ms: int = 0) -> int:
        """Drop the entries every group of `stream` has read and acknowledged: XTRIM MINID
        to the oldest entry one still has pending, or just past the last one delivered when
        none is pending; those of the last `keep_ms` (by their ids' time) stay, to be read
        by whoever looks. A stream read by fewer than `groups` groups is left alone (one to
        come, made at "0", reads it from its start). Returns how many went."""
        floor = await self._floor(stream, handled=True, groups_at_least=groups)
        if floor is not None and keep_ms:
            floor = min(floor, (max(0, int(time.time() * 1000) - keep_ms), 0))
        if floor is None or floor <= (0, 1) or floor[0] > _SEQ_MAX:
            return 0
        minid = f"{floor[0]}-{floor[1]}"
        removed = await self._call(
            "XTRIM", lambda: self._client.xtrim(stream, minid=minid, approximate=False)
        )
        return int(removed)

    async def _floor(
        self,
        stream: str,
        handled: bool = False,
        groups_at_least: int = 1,
        only: str | None = None,
    ) -> tuple[int, int] | None:
        """The oldest id any group still needs (pending or undelivered); None if fewer
        than `groups_at_least` groups. `handled`: not the last delivered id itself, but the
        one past it (nothing needs an entry delivered and acknowledged). `only`: that group
        alone counts, the stream's groups listed only when XINFO STREAM counts at most
        GROUPS_READ_MAX (else None, not now): an agent's inbox, where groups it made up
        would hold the hub's writes there back for ever (one made at "0" reading nothing)."""
        if only is not None:
            (total,) = await self.group_counts([stream])
            if not 0 < total <= GROUPS_READ_MAX:
                return None
        try:
            groups = await self._call("XINFO GROUPS", lambda: self._client.xinfo_groups(stream))
        except TransportError as exc:  # a missing key has no groups
            if is_no_such_key(exc.__cause__):
                return None
            raise
        if only is not None:
            groups = [g for g in groups if _text(g["name"]) == only]
        if not groups or len(groups) < groups_at_least:
            return None

        async def send() -> list[Any]:  # each group's oldest pending entry (not the summary,
            async with self._client.pipeline(transaction=False) as pipe:  # a row a consumer)
                for g in groups:
                    pipe.xpending_range(stream, g["name"], min="-", max="+", count=1)
                return await pipe.execute()

        floor = min(_id_key(_text(g["last-delivered-id"])) for g in groups)
        if handled:  # the id after it (an agent may XADD the largest sequence there is)
            floor = (floor[0], floor[1] + 1) if floor[1] < _SEQ_MAX else (floor[0] + 1, 0)
        for oldest in await self._call("XPENDING", send):
            if oldest:
                floor = min(floor, _id_key(_text(oldest[0]["message_id"])))
        return floor


def _consumer(row: dict[str, Any]) -> dict[str, int]:
    idle = int(row["idle"])
    # `inactive` (since the last successful read) is reported from Redis 7.2 on.
    inactive = row.get("inactive")
    return {
        "pending": int(row["pending"]),
        "idle_ms": idle,
        "inactive_ms": idle if inactive is None or int(inactive) < 0 else int(inactive),
        # before 7.2, `idle` counts only successful reads: a replica blocked in
        # XREADGROUP looks idle, so idle time says nothing about liveness there
        "idle_is_liveness": int(inactive is not None),
    }


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
