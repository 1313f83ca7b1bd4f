"""`Transport.read_group(sent=...)` says which reads its entries came from, and when each
was sent: on a cluster a slot's read that has not answered yet is not among them. The
router counts a stream drained only from a read that answered (hub.router._drained):
a review found it counting every slot drained from the first slot that answered, with
1,650 entries of the other slots unread."""

from __future__ import annotations

from typing import Any

import pytest

from protocols.keys import Keys, key_slot
from protocols.transport import Transport

pytestmark = pytest.mark.redis


async def test_a_clusters_slots_that_have_not_answered_are_not_among_the_answered(
    cluster_redis: Any, keys: Keys
) -> None:
    busy, quiet = keys.out("busy"), keys.out("quiet")
    assert key_slot(busy) != key_slot(quiet)
    transport = Transport(cluster_redis, keys, retry_s=0)
    for stream in (busy, quiet):
        await transport.ensure_group(stream, "hub")
    await cluster_redis.xadd(busy, {"m": b"x"})
    found = await transport.read_group([busy, quiet], "hub", "c", block_ms=2000, sent=1.0)
    assert [d.stream for d in found] == [busy]
    assert transport.answered == [(1.0, (busy,))]  # the quiet slot's read is still waiting
    await cluster_redis.xadd(quiet, {"m": b"y"})
    found = await transport.read_group([busy, quiet], "hub", "c", block_ms=2000, sent=2.0)
    assert [d.stream for d in found] == [quiet]
    assert (1.0, (quiet,)) in transport.answered  # sent by the first call
    await transport.close()


async def test_one_servers_read_answers_for_every_stream(real_redis: Any, keys: Keys) -> None:
    streams = [keys.out("a"), keys.out("b")]
    transport = Transport(real_redis, keys, retry_s=0)
    for stream in streams:
        await transport.ensure_group(stream, "hub")
    await transport.read_group(streams, "hub", "c", block_ms=10, sent=5.0)
    assert transport.answered == [(5.0, tuple(streams))]
    await transport.read_group(streams, "hub", "c", block_ms=10)
    assert transport.answered == []  # nothing asked
