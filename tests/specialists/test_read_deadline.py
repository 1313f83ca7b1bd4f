"""A replica whose answers ride a read on a half-dead link (the server ran the MULTI and
the XREADGROUP, no reply ever comes) gives the read up after its block and REPLY_GRACE_S:
the batch it lent was never settled, so the replica wrote nothing more, ever, and its
renewals (on a healthy connection) kept every other replica from reclaiming its work."""

from __future__ import annotations

import pytest

from callboard.embedded import EmbeddedServer
from protocols.messages import MessageType
from protocols.settings import Settings
from protocols.transport import _gateway
from tests.helpers import eventually
from tests.lossy_proxy import lossy_clients
from tests.specialists.conftest import AGENT, HubSide, Starter
from tests.specialists.sample import Scripted

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("scripted")]
M = MessageType


async def test_work_in_hand_is_settled_after_a_ride_on_a_dead_link(
    redis_server: EmbeddedServer, fast: Settings, start: Starter, hub: HubSide,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 1.0)
    keys = fast.keys
    async with lossy_clients(redis_server.port, keys.prefix + "zz") as (proxy, _, direct):
        lossy = fast.model_copy(update={"redis_url": proxy.url})
        r1 = await start(Scripted, "r1", settings_=lossy)
        await hub.go("CUE-1", block=True)
        await hub.wait(M.STATUS_STARTED, "CUE-1")
        # the next write that rides a read: its MULTI and the XREADGROUP behind it
        proxy.arm(b"EXEC\r\n*11\r\n$10\r\nXREADGROUP", "swallow")
        await direct.xadd(keys.inbox(AGENT), {"m": b"not json"})  # answered at once: rejected
        await eventually(lambda: proxy.fired, 5, message="the ride went out")
        assert Scripted.release is not None
        Scripted.release.set()  # CUE-1 finishes on r1: its outcome is queued behind the ride

        async def settled() -> bool:
            done = await hub.of(M.STATUS_COMPLETED, "CUE-1")
            return bool(done + await hub.of(M.STATUS_FAILED, "CUE-1"))

        await eventually(settled, 20, message="CUE-1 settled")
        for writer in proxy._writers:  # the dead link's sockets, so that the test can end
            writer.transport.abort()
        r1.stop("test over")
        await hub.wait(M.STATUS_OFFLINE, timeout_s=10)  # stopped while the proxy still runs
