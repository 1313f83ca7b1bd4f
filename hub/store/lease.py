"""The leader lease in Redis: a fencing counter and a key holding `hub_id:token` with a TTL.

Renewing and releasing check the holder inside a script, so a hub never extends or drops
a lease another hub has taken since. On a Redis Cluster a token is also at least the time
in ms: the slots' fences (hub/store/journal.py) live on other nodes than the counter, and a
counter lost with its node (no persistence) must not start again below them, or every
write of every later leader would be refused.
"""

from __future__ import annotations

import time

from protocols.errors import TransportError
from protocols.keys import Keys
from protocols.transport import Storage

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_NEXT_TOKEN_AT_LEAST = """
local token = redis.call('INCR', KEYS[1])
if token < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return token
"""


class LeaseStore:
    """The lease of one engine partition (0 while the engine has one)."""

    def __init__(self, db: Storage, keys: Keys, partition: int = 0) -> None:
        self.db = db
        self.leader_key = keys.leader(partition)
        self.fence_key = keys.fence(partition)
        self._renew = db.script(_RENEW)
        self._next_at_least = db.script(_NEXT_TOKEN_AT_LEAST) if db.is_cluster else None

    async def next_token(self) -> int:
        """A fencing token larger than every one handed out before (on a cluster, and no
        smaller than the time in ms: see the module doc)."""
        if self._next_at_least is not None:
            floor = int(time.time() * 1000)
            return int(await self._next_at_least([self.fence_key], [floor]))
        return await self.db.incr(self.fence_key)

    async def acquire(self, value: str, lease_ms: int) -> bool:
        """Take the lease for `value` (this term's own) when nobody holds it."""
        return await self.db.set_free_or_mine(self.leader_key, value, px_ms=lease_ms)

    async def renew(self, value: str, lease_ms: int) -> bool:
        """Extend the lease if `value` still holds it; False when it was lost."""
        return bool(await self._renew([self.leader_key], [value, lease_ms]))

    async def release(self, value: str) -> None:
        """Drop the lease if `value` still holds it."""
        await self.db.delete_if(self.leader_key, value)

    async def writes_refused(self) -> TransportError | None:
        """The error Redis would answer a write with now (OutOfMemory, ReadOnly), or None."""
        return await self.db.write_refusal(self.leader_key)

    async def holder(self) -> str | None:
        raw = await self.db.get(self.leader_key)
        return raw.decode() if raw else None
