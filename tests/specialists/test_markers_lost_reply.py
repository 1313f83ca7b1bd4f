"""Done-markers keep `cue.once`'s word (at most once across replicas) when Redis or the
replica fails mid-way. Found by review: a marker SET whose reply was lost and that the
client sent again found the key taken and said "not first", so no replica did the side
effect; and a block cancelled (a replica stopping past its drain time) cleared the marker,
so the replica taking the GO over did the effect again."""

from __future__ import annotations

import asyncio

import pytest

from callboard.embedded import EmbeddedServer
from protocols.codec import make
from protocols.keys import Keys
from protocols.messages import MessageType as M
from protocols.payloads import TaskAssign
from protocols.transport import Transport
from specialists.cue import Cue
from specialists.markers import DoneMarkers
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


def _cue(markers: DoneMarkers) -> Cue:
    go = make(M.TASK_ASSIGN, TaskAssign(cue_id="C"), run_id="r1")
    return Cue(agent_id="a", replica="r1", run_id="r1", cue_id="C", attempt=1, message=go,
               markers=markers)  # fmt: skip


async def test_a_marker_whose_reply_was_lost_is_still_this_calls(
    redis_server: EmbeddedServer, keys: Keys
) -> None:
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, _direct):
        markers = DoneMarkers(Transport(lossy, keys), keys, "a", ttl_s=60)
        proxy.arm(b"charge", "reset")  # the SET lands, its reply is lost; sent again
        async with _cue(markers).once("charge") as first:
            assert first  # before: False, and nobody charged
        assert proxy.fired == ["reset"]
        async with _cue(markers).once("charge") as again:
            assert not again


async def test_a_cancelled_block_keeps_its_marker(real_redis: object, keys: Keys) -> None:
    markers = DoneMarkers(Transport(real_redis, keys), keys, "a", ttl_s=60)  # type: ignore[arg-type]
    entered = asyncio.Event()

    async def effect() -> None:
        async with _cue(markers).once("charge") as first:
            assert first
            entered.set()
            await asyncio.Event().wait()  # charging... when the drain time runs out

    task = asyncio.create_task(effect())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with _cue(markers).once("charge") as first:  # the replica taking the GO over
        assert not first


async def test_a_claim_whose_reply_was_lost_is_still_this_entrys(
    redis_server: EmbeddedServer, keys: Keys
) -> None:
    """A GO's claim (SET NX PX) lands, its reply is lost and the client sends it again:
    the retry finds the claim holding this entry, which then runs the attempt (a claim
    taken for "another" would have acked the GO, and nobody would run it)."""
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, _direct):
        markers = DoneMarkers(Transport(lossy, keys), keys, "a", ttl_s=60)
        proxy.arm(b"claimed", "reset")
        holder, [settled] = await markers.begin("claimed", "1-0", ["settled"])
        assert proxy.fired == ["reset"]
        assert (holder, settled) == ("1-0", None)
        holder, _ = await markers.begin("claimed", "2-0", [])  # a copy, another entry
        assert holder == "1-0"
