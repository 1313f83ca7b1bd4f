"""The hubs alive (how the engine's partitions are shared out), and the partition count."""

from __future__ import annotations

from protocols.errors import Conflict
from protocols.keys import Keys
from protocols.transport import Storage

# KEYS: 1 the members set. ARGV: 1 this hub, 2 its window (ms: its lease). Says this hub is
# alive until its window ends (each member's score is its own deadline, so hubs of different
# leases count each other alike), forgets the hubs whose deadline has passed, counts who is
# left; the time is the server's (hubs on hosts whose clocks disagree still agree on who is
# alive). The set expires ten windows after a heartbeat, never sooner than an earlier one set.
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + window, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('PTTL', KEYS[1]) < window * 10 then
  redis.call('PEXPIRE', KEYS[1], window * 10)
end
return redis.call('ZCARD', KEYS[1])
"""
# KEYS: 1 the partition count. ARGV: 1 this hub's. The count stored first wins.
_AGREE = """
local stored = redis.call('GET', KEYS[1])
if not stored then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return stored
"""


class PartitionsDisagree(Conflict):
    """This hub's partition count is not the one the hubs of its prefix run."""


class MemberStore:
    """Hubs say they are alive every tick; a hub silent for the window no longer counts."""

    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.members_key = keys.hubs
        self.partitions_key = keys.partitions
        self.prefix = keys.prefix
        self.keys = keys
        self._heartbeat = db.script(_HEARTBEAT)
        self._agree = db.script(_AGREE)

    async def heartbeat(self, hub_id: str, window_ms: int) -> int:
        """Say `hub_id` is alive for `window_ms` (its lease); the number of hubs alive (each
        for its own window since it last said so), itself included."""
        return int(await self._heartbeat([self.members_key], [hub_id, window_ms]))

    async def holders(self, partitions: int) -> list[str | None]:
        """Who holds each partition's lease (`hub_id:token`, None when free), in one MGET."""
        raw = await self.db.mget([self.keys.leader(p) for p in range(partitions)])
        return [value.decode() if value else None for value in raw]

    async def leave(self, hub_id: str) -> None:
        """This hub stops: the others share its partitions without waiting for the window."""
        await self.db.zrem(self.members_key, [hub_id])

    async def agree(self, partitions: int) -> None:
        """Store the partition count if none is; Conflict when another count is stored
        (a run would be looked for in the wrong partition)."""
        raw = await self._agree([self.partitions_key], [partitions])
        stored = int(raw.decode() if isinstance(raw, bytes) else raw)
        if stored != partitions:
            raise PartitionsDisagree(
                f"CALLBOARD_PARTITIONS={partitions}, but the hubs of prefix "
                f"{self.prefix!r} run {stored} partitions: "
                "every hub and API process must use the same count"
            )
