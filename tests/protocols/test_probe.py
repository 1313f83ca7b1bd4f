"""The conformance kit's stream looks, on the real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from protocols.transport import Probe
from tests.helpers import eventually

pytestmark = pytest.mark.redis


@pytest.fixture
async def probe(redis_server: EmbeddedServer, keys: Keys) -> AsyncIterator[Probe]:
    found: Probe = Probe.from_url(redis_server.url, keys)
    yield found
    await found.close()


async def test_a_ghost_delivery_beats_a_blocked_reader_and_is_reclaimable(
    probe: Probe, keys: Keys, real_redis: Any
) -> None:
    inbox = keys.inbox("agent")
    await probe.ensure_group(inbox, "agent")
    # a replica blocked on its inbox would take any new entry at once
    reader = asyncio.create_task(
        probe.read_group([inbox], "agent", "replica", count=10, block_ms=1500)
    )
    await eventually(lambda: _blocked(real_redis), 1.0)  # it ends on an entry or after 1.5 s
    entry_id = await probe.deliver_to_ghost(inbox, "agent", "ghost", b"payload", idle_ms=60_000)
    assert await reader == []  # the blocked replica got nothing: the ghost read it first
    assert await probe.pending(inbox, "agent") == [(entry_id, "ghost", 1)]
    assert (await probe.groups(inbox))["agent"] == {"pending": 1, "last_delivered": entry_id}
    [claimed] = await probe.reclaim(inbox, "agent", "replica", min_idle_ms=30_000)
    assert (claimed.entry_id, claimed.raw, claimed.deliveries) == (entry_id, b"payload", 2)
    await probe.delete_consumer(inbox, "agent", "ghost")
    assert "ghost" not in await probe.consumers(inbox, "agent")


async def _blocked(client: Any) -> bool:
    return int((await client.info("clients"))["blocked_clients"]) >= 1


async def test_reads_of_missing_streams_are_empty(probe: Probe, keys: Keys) -> None:
    missing = keys.out("nobody")
    assert await probe.last_id(missing) == "0-0"
    assert await probe.groups(missing) == {}
    assert await probe.pending(missing, "g") == []
    assert await probe.entries(missing) == []
    assert await probe.read_after(missing, "0-0", block_ms=10) == []
    await probe.delete_consumer(missing, "g", "c")  # nothing to do, no error
