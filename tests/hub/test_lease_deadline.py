"""A lease renewal whose reply never comes (a half-dead link: the server ran the script,
its answer is lost) ends after REPLY_GRACE_S, and the leader renews again on a fresh
connection, within its lease. Before, the renewal waited for ever: the lease lapsed under
a leader that went on leading until a fenced write told it so, and a hub alone had no
leader until then."""

from __future__ import annotations

import asyncio

import pytest

from callboard.embedded import EmbeddedServer
from hub.leader import Leadership
from hub.store.lease import LeaseStore
from protocols.keys import Keys
from protocols.transport import Storage, _gateway
from tests.helpers import eventually
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


async def test_the_leader_renews_again_after_a_renewal_whose_reply_never_came(
    redis_server: EmbeddedServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.3)
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, direct):
        lease = LeaseStore(Storage(lossy), keys)
        leadership = Leadership(lease, "hub-a", lease_ms=1500)
        assert await leadership.try_acquire()
        value = leadership.value
        renewed: list[bool] = []
        renew = lease.renew

        async def counted(value: str, lease_ms: int) -> bool:
            renewed.append(await renew(value, lease_ms))
            return renewed[-1]

        lease.renew = counted  # type: ignore[method-assign]
        proxy.arm(b"EVALSHA", "swallow")  # the first renewal's reply is lost
        stop = asyncio.Event()
        keeping = asyncio.create_task(leadership.keep(stop))
        try:
            await eventually(lambda: len(renewed) >= 3, 15, message="renewed three times")
            assert proxy.fired == ["swallow"]
            assert all(renewed) and not leadership.lost.is_set()
            assert (await direct.get(keys.leader(0))) == value.encode()  # type: ignore[union-attr]
        finally:
            stop.set()
            async with asyncio.timeout(5):  # before, the renewal held `keep` for ever
                await keeping
