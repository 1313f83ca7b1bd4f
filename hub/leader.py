"""Leader election: one hub leads the engine under a lease; its fencing token guards writes."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from protocols.transport import Redis

log = logging.getLogger(__name__)

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


class Leadership:
    """Try to lead; keep the lease renewed; notice at once when it is lost."""

    def __init__(
        self, client: Redis, leader_key: str, fence_key: str, hub_id: str, lease_ms: int
    ) -> None:
        self.client = client
        self.leader_key = leader_key
        self.fence_key = fence_key
        self.hub_id = hub_id
        self.lease_ms = lease_ms
        self.value: str | None = None  # "hub_id:token" while leading
        self.lost = asyncio.Event()
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @property
    def token(self) -> int | None:
        return int(self.value.rsplit(":", 1)[1]) if self.value else None

    async def try_acquire(self) -> bool:
        token = await self.client.incr(self.fence_key)
        value = f"{self.hub_id}:{token}"
        if await self.client.set(self.leader_key, value, nx=True, px=self.lease_ms):
            self.value = value
            self.lost.clear()
            log.info("hub %s leads with fencing token %s", self.hub_id, token)
            return True
        return False

    async def wait_to_lead(self, stop: asyncio.Event) -> bool:
        """Poll until this hub leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if await self.try_acquire():
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.lease_ms / 3000)
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every third of the lease; set `lost` and return when it cannot."""
        while not stop.is_set() and self.value is not None:
            try:
                ok = await self._renew(keys=[self.leader_key], args=[self.value, self.lease_ms])
            except Exception as exc:  # Redis unreachable: the lease may lapse meanwhile
                log.warning("lease renewal failed: %s", exc)
                ok = 1
            if not ok:
                log.warning("hub %s lost the leader lease", self.hub_id)
                self.value = None
                self.lost.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.lease_ms / 3000)

    async def release(self) -> None:
        if self.value is not None:
            with contextlib.suppress(Exception):
                await self._release(keys=[self.leader_key], args=[self.value])
            self.value = None

    async def current(self) -> str | None:
        raw = await self.client.get(self.leader_key)
        return raw.decode() if raw else None
