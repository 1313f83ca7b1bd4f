"""A read whose reply never comes (a half-dead link: the server ran XREADGROUP, its answer
is lost) ends as a lost connection would, after its block and REPLY_GRACE_S: the router
waited for ever while the lease, renewed on other connections, kept every other hub out,
and nothing of its partition was routed again."""

from __future__ import annotations

import pytest

from callboard.embedded import EmbeddedServer
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.transport import Redis, _gateway
from tests.helpers import eventually
from tests.hub.running import running_hub
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


async def _online(client: Redis, keys: Keys, agent: str) -> None:
    msg = make(T.STATUS_ONLINE, p.StatusOnline(replica=f"{agent}-1"), from_agent=agent)
    await client.xadd(keys.out(agent), {"m": encode(msg)})


async def test_the_router_reads_again_after_a_read_whose_reply_never_came(
    redis_server: EmbeddedServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 1.0)
    keys = settings.keys
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, _, direct):
        lossy = settings.model_copy(update={"redis_url": proxy.url})
        async with running_hub(lossy, lease_ms=1500) as hub:
            await _online(direct, keys, "a")
            await eventually(lambda: "a" in hub.registry.agents, 10, message="routed")
            # the router's next read: the server runs it, every reply on that link is lost
            proxy.arm(b"GROUP\r\n$3\r\nhub\r\n", "swallow")
            await eventually(lambda: proxy.fired, 5, message="the read went out")
            await _online(direct, keys, "b")
            await eventually(lambda: "b" in hub.registry.agents, 15, message="routed again")
