"""Discovery (a SCAN of the whole keyspace, seconds with millions of keys) runs beside the
routing loop: messages are routed while a scan is under way, and scans rest in proportion
to what the last one took."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from hub import router as router_module
from hub.service import Hub
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.messages import MessageType as T
from tests.helpers import eventually

pytestmark = pytest.mark.redis


async def _say_online(hub: Hub, agent: str, replica: str) -> None:
    msg = make(T.STATUS_ONLINE, p.StatusOnline(replica=replica), from_agent=agent)
    await hub.transport._client.xadd(hub.keys.out(agent), {"m": encode(msg)})


def _knows(hub: Hub, agent: str, replica: str) -> bool:
    entry = hub.registry.agents.get(agent)
    return entry is not None and replica in entry.replicas


async def test_messages_are_routed_while_a_discovery_scan_is_under_way(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _say_online(hub, "honest", "h-1")
    await eventually(lambda: _knows(hub, "honest", "h-1"), 10)
    scanning, release = asyncio.Event(), asyncio.Event()
    scan_keys = hub.transport.scan_keys

    async def slow_scan(match: str) -> list[str]:
        scanning.set()
        await release.wait()  # a scan of a keyspace of millions
        return await scan_keys(match)

    monkeypatch.setattr(hub.transport, "scan_keys", slow_scan)
    try:
        await eventually(scanning.is_set, 10, message="a discovery scan started")
        await _say_online(hub, "honest", "h-2")
        await eventually(lambda: _knows(hub, "honest", "h-2"), 5, message="routed meanwhile")
        assert not release.is_set()
    finally:
        release.set()


async def test_scans_rest_ten_times_what_the_last_one_took(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_module, "DISCOVER_EVERY_S", 0.01)
    scans: list[float] = []
    loop = asyncio.get_running_loop()
    scan_keys = hub.transport.scan_keys

    async def timed_scan(match: str) -> list[str]:
        scans.append(loop.time())
        await asyncio.sleep(0.05)  # what this scan costs
        return await scan_keys(match)

    monkeypatch.setattr(hub.transport, "scan_keys", timed_scan)
    await eventually(lambda: len(scans) >= 3, 10)
    gaps = [b - a for a, b in itertools.pairwise(scans)]
    assert all(gap >= 0.05 * (1 + router_module.DISCOVER_REST) for gap in gaps), gaps


async def test_a_new_agents_stream_is_found(hub: Hub) -> None:
    await _say_online(hub, "newcomer", "n-1")
    await eventually(lambda: _knows(hub, "newcomer", "n-1"), 10)
