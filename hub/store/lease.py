"""The leader lease in Redis: a fencing counter and a key holding `hub_id:token` with a TTL.

Renewing and releasing check the holder inside a script, so a hub never extends or drops
a lease another hub has taken since.
"""

from __future__ import annotations

from protocols.errors import TransportError
from protocols.keys import Keys
from protocols.transport import Storage

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LeaseStore:
    """The lease of one engine partition (0 while the engine has one)."""

    def __init__(self, db: Storage, keys: Keys, partition: int = 0) -> None:
        self.db = db
        self.leader_key = keys.leader(partition)
        self.fence_key = keys.fence(partition)
        self._renew = db.script(_RENEW)
        self._release = db.script(_RELEASE)

    async def next_token(self) -> int:
        """A fencing token larger than every one handed out before."""
        return await self.db.incr(self.fence_key)

    async def acquire(self, value: str, lease_ms: int) -> bool:
        """Take the lease for `value` when nobody holds it."""
        return await self.db.set(self.leader_key, value, nx=True, px_ms=lease_ms)

    async def renew(self, value: str, lease_ms: int) -> bool:
        """Extend the lease if `value` still holds it; False when it was lost."""
        return bool(await self._renew([self.leader_key], [value, lease_ms]))

    async def release(self, value: str) -> None:
        """Drop the lease if `value` still holds it."""
        await self._release([self.leader_key], [value])

    async def writes_refused(self) -> TransportError | None:
        """The error Redis would answer a write with now (OutOfMemory, ReadOnly), or None."""
        return await self.db.write_refusal(self.leader_key)

    async def holder(self) -> str | None:
        raw = await self.db.get(self.leader_key)
        return raw.decode() if raw else None
