"""Stream reads the conformance kit needs to stand in for the hub and look at an agent's
queues: plain XREAD/XRANGE of an out stream, consumer groups and pending entries of an
inbox, and a delivery to a consumer that then vanishes (to test redelivery)."""

from __future__ import annotations

from typing import Any

from protocols.errors import GroupMissing, TransportError
from protocols.transport._client import _FIELD, Delivery, _stream_replies, _text
from protocols.transport._errors import is_no_such_key
from protocols.transport._streams import Transport


class Probe(Transport):
    """A Transport with the kit's extra looks; nothing here is used by the hub or the SDK."""

    async def read_after(self, stream: str, last_id: str, *, block_ms: int) -> list[Delivery]:
        """Entries after `last_id` (plain XREAD, no group), decoded."""
        block = self._block(block_ms)
        response = await self._read_call(
            "XREAD", lambda: self._client.xread({stream: last_id}, count=500, block=block), block
        )
        return [
            self._delivery(key, entry_id, fields, 1)
            for key, entries in _stream_replies(response)
            for entry_id, fields in entries
        ]

    async def entries(self, stream: str) -> list[Delivery]:
        """Every entry of `stream`, decoded (XRANGE - +)."""
        rows = await self._call("XRANGE", lambda: self._client.xrange(stream))
        return [self._delivery(stream, entry_id, fields, 1) for entry_id, fields in rows or []]

    async def last_id(self, stream: str) -> str:
        """The newest entry's id, "0-0" for an empty or missing stream."""
        return await self._newest_id(stream)

    async def groups(self, stream: str) -> dict[str, dict[str, Any]]:
        """XINFO GROUPS: {group: {"pending": n, "last_delivered": id}}; {} for no stream."""
        try:
            rows = await self._call("XINFO GROUPS", lambda: self._client.xinfo_groups(stream))
        except TransportError as exc:  # a missing key is an empty answer, not an error
            if is_no_such_key(exc.__cause__):
                return {}
            raise
        return {
            _text(row["name"]): {
                "pending": int(row["pending"]),
                "last_delivered": _text(row["last-delivered-id"]),
            }
            for row in rows
        }

    async def pending(self, stream: str, group: str) -> list[tuple[str, str, int]]:
        """(entry id, consumer, times delivered) of up to 1,000 pending entries."""
        try:
            rows = await self._call(
                "XPENDING",
                lambda: self._client.xpending_range(stream, group, "-", "+", 1000),
            )
        except GroupMissing:
            return []
        return [
            (_text(r["message_id"]), _text(r["consumer"]), int(r["times_delivered"])) for r in rows
        ]

    async def deliver_to_ghost(
        self, stream: str, group: str, ghost: str, data: bytes, *, idle_ms: int
    ) -> str:
        """XADD `data` and, in the same MULTI, read it as consumer `ghost` of `group` (so no
        blocked replica can take it first); then mark it idle for `idle_ms` with its
        delivery count at 1, as if a replica had read it and died. Returns the entry id."""

        async def stage() -> list[Any]:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xadd(stream, {_FIELD: data})
                pipe.xreadgroup(group, ghost, {stream: ">"}, count=1)
                return await pipe.execute()

        added, read = await self._call("XADD+XREADGROUP", stage)
        entry_id = _text(added)
        got = [_text(i) for _, entries in _stream_replies(read) for i, _ in entries]
        if got != [entry_id]:
            raise RuntimeError(f"the ghost consumer read {got}, not the staged {entry_id}")
        await self._call(
            "XCLAIM",
            lambda: self._client.xclaim(
                stream, group, ghost, 0, [entry_id], idle=idle_ms, retrycount=1, justid=True
            ),
        )
        return entry_id

    async def delete_consumer(self, stream: str, group: str, consumer: str) -> None:
        """XGROUP DELCONSUMER (its pending entries go with it); no stream or group: nothing."""
        if group not in await self.groups(stream):
            return
        try:
            await self._call(
                "XGROUP DELCONSUMER",
                lambda: self._client.xgroup_delconsumer(stream, group, consumer),
            )
        except GroupMissing:
            return
