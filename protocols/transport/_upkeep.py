"""Inspection and upkeep of streams: consumers, pending counts, dead letters, trimming."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from protocols.errors import GroupMissing, TransportError
from protocols.keys import is_entry_id
from protocols.transport._base import _TransportBase
from protocols.transport._client import _bytes, _id_key, _text
from protocols.transport._errors import is_group_missing, is_no_such_key, translated


class _Upkeep(_TransportBase):
    """The part of the Transport that inspects and trims streams."""

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

    async def held_elsewhere(self, streams: Sequence[str], group: str, consumer: str) -> set[str]:
        """The streams where some consumer other than `consumer` holds pending entries of
        `group` (one pipelined XPENDING summary; a stream or group that is gone holds none)."""
        if not streams:
            return set()

        async def send() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for stream in streams:
                    pipe.xpending(stream, group)
                return await pipe.execute(raise_on_error=False)

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
                return await pipe.execute(raise_on_error=False)

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

    async def trim(self, stream: str, *, maxlen: int, grouped_only: bool = False) -> int:
        """Trim to about `maxlen` entries, never past the oldest entry any group still has
        pending or has not yet been delivered (`grouped_only`: leave a stream no group
        reads yet alone: its reader has not come). Returns the number of entries removed."""
        length = await self._call("XLEN", lambda: self._client.xlen(stream))
        excess = int(length) - maxlen
        if excess <= 0:
            return 0
        cutoff = await self._floor(stream)
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
