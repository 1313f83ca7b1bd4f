"""Leader election: one hub leads the engine under a lease; its fencing token guards writes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from hub.store.lease import LeaseStore
from protocols.errors import OutOfMemory, ReadOnly, TransportError

log = logging.getLogger(__name__)


class Leadership:
    """Try to lead; keep the lease renewed; notice at once when it is lost."""

    def __init__(self, lease: LeaseStore, hub_id: str, lease_ms: int) -> None:
        self.lease = lease
        self.hub_id = hub_id
        self.lease_ms = lease_ms
        self.value: str | None = None  # "hub_id:token" while leading
        self.lost = asyncio.Event()
        # when some hub was last known to hold the lease (monotonic): /healthz tells how
        # long none has
        self.seen_leader_at = time.monotonic()

    @property
    def token(self) -> int | None:
        return int(self.value.rsplit(":", 1)[1]) if self.value else None

    async def try_acquire(self) -> bool:
        """Take the lease if nobody holds it. Redis refusing writes (out of memory, a
        replica) is not a crash: this hub keeps trying, as it does while another leads."""
        try:
            token = await self.lease.next_token()
            value = f"{self.hub_id}:{token}"
            acquired = await self.lease.acquire(value, self.lease_ms)
        except (OutOfMemory, ReadOnly) as exc:
            log.warning("hub %s cannot take the lease: %s", self.hub_id, exc)
            return False
        self.seen_leader_at = time.monotonic()  # this hub leads, or another one does
        if acquired:
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
                ok = await self.lease.renew(self.value, self.lease_ms)
                if ok:
                    self.seen_leader_at = time.monotonic()
            except TransportError as exc:  # Redis unreachable: the lease may lapse meanwhile
                log.warning("lease renewal failed: %s", exc)
                ok = True
            if not ok:
                log.warning("hub %s lost the leader lease", self.hub_id)
                self.value = None
                self.lost.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.lease_ms / 3000)

    async def release(self) -> None:
        if self.value is not None:
            with contextlib.suppress(TransportError):
                await self.lease.release(self.value)
            self.value = None

    async def current(self) -> str | None:
        return await self.lease.holder()
