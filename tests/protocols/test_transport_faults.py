"""Transport under server faults: restarts (with and without data), outages, no server.

Real server only, and each test starts its OWN server: restarting the shared one would
break every other test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer, free_port
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.errors import TransportError
from protocols.keys import Keys
from protocols.messages import MessageType
from protocols.transport import Transport
from tests.helpers import eventually

pytestmark = pytest.mark.redis

GROUP = "workers"


def notice(text: str = "hello") -> Envelope:
    return make(MessageType.BROADCAST_NOTICE, p.BroadcastNotice(text=text))


@pytest.fixture
def own_server() -> Iterator[EmbeddedServer]:
    server = EmbeddedServer().start()
    yield server
    server.close()


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    server = EmbeddedServer(appendonly=True).start()
    yield server
    server.close()


class Lost:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, stream: str, group: str) -> None:
        self.calls.append((stream, group))


@pytest.fixture
async def lost() -> Lost:
    return Lost()


async def transport_on(server: EmbeddedServer, keys: Keys, lost: Lost) -> Transport:
    return Transport.from_url(server.url, keys, on_state_lost=lost, retry_s=5.0)


@pytest.fixture
async def t_empty(own_server: EmbeddedServer, keys: Keys, lost: Lost) -> AsyncIterator[Transport]:
    t = await transport_on(own_server, keys, lost)
    yield t
    await t.close()


@pytest.fixture
async def t_aof(aof_server: EmbeddedServer, keys: Keys, lost: Lost) -> AsyncIterator[Transport]:
    t = await transport_on(aof_server, keys, lost)
    yield t
    await t.close()


async def test_server_restarted_empty_recreates_groups(
    own_server: EmbeddedServer, t_empty: Transport, keys: Keys, lost: Lost
) -> None:
    t = t_empty
    streams = [keys.out("agent-a"), keys.out("agent-b")]
    for stream in streams:
        await t.ensure_group(stream, GROUP)
    await t.publish(streams[0], notice())
    assert len(await t.read_group(streams, GROUP, "hub-1", block_ms=None)) == 1

    await asyncio.to_thread(own_server.restart, wipe=True)

    assert await t.read_group(streams, GROUP, "hub-1", block_ms=None) == []
    assert sorted(lost.calls) == sorted((s, GROUP) for s in streams)
    await t.publish(streams[1], notice())
    [got] = await t.read_group(streams, GROUP, "hub-1", block_ms=None)
    assert got.stream == streams[1]
    assert len(lost.calls) == 2


async def test_blocked_reader_survives_restart_empty(
    own_server: EmbeddedServer, t_empty: Transport, keys: Keys, lost: Lost
) -> None:
    t = t_empty
    stream = keys.inbox("agent-a")
    await t.ensure_group(stream, GROUP)
    reader = asyncio.create_task(t.read_group([stream], GROUP, "r1", block_ms=4000))
    await asyncio.to_thread(own_server.restart, wipe=True)
    await eventually(lambda: lost.calls == [(stream, GROUP)])
    await t.publish(stream, notice())
    got = await asyncio.wait_for(reader, 10)
    assert len(got) == 1


async def test_reconnects_after_restart_with_data(
    aof_server: EmbeddedServer, t_aof: Transport, keys: Keys, lost: Lost
) -> None:
    t = t_aof
    stream = keys.inbox("agent-a")
    await t.ensure_group(stream, GROUP)
    first = await t.publish(stream, notice("before"))
    await t._client.bgrewriteaof()
    await eventually(lambda: _aof_idle(t))

    await asyncio.to_thread(aof_server.restart)

    # The pooled connection is dead; the next call works on a fresh one.
    second = await t.publish(stream, notice("after"))
    got = await t.read_group([stream], GROUP, "r1", block_ms=None)
    assert [d.entry_id for d in got] == [first, second]
    assert lost.calls == []  # the group survived: nothing was lost


async def _aof_idle(t: Transport) -> bool:
    info = await t._client.info("persistence")
    return not int(info["aof_rewrite_in_progress"]) and not int(info["aof_rewrite_scheduled"])


async def test_call_during_outage_retries_until_server_is_back(
    own_server: EmbeddedServer, t_empty: Transport, keys: Keys
) -> None:
    t = t_empty
    stream = keys.inbox("agent-a")
    await t.ensure_group(stream, GROUP)
    await asyncio.to_thread(own_server.stop)
    publishing = asyncio.create_task(t.publish(stream, notice()))
    await asyncio.sleep(0.3)  # the outage under test: the call must be retrying meanwhile
    assert not publishing.done()
    await asyncio.to_thread(own_server.start)
    entry_id = await asyncio.wait_for(publishing, 10)
    rows: Any = await t._client.xrange(stream)
    assert [e.decode() for e, _ in rows] == [entry_id]


async def test_unreachable_server_raises_transport_error_within_budget(keys: Keys) -> None:
    t = Transport.from_url(f"redis://127.0.0.1:{free_port()}/0", keys, retry_s=0.5)
    started = time.monotonic()
    with pytest.raises(TransportError, match="unreachable"):
        await t.publish(keys.inbox("agent-a"), notice())
    with pytest.raises(TransportError):
        await t.read_group([keys.inbox("agent-a")], GROUP, "r1", block_ms=100)
    assert time.monotonic() - started < 5
    await t.close()


async def test_retry_transient_retries_a_lost_connection_then_returns() -> None:
    """The one retry policy: a lambda returning an awaitable (how callers pass Redis calls)
    is awaited on every attempt; the first retry is at once, later ones wait and are
    reported."""
    from protocols.transport import retry_transient

    calls: list[int] = []
    waits: list[float] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("redis gone")
        return "ok"

    got = await retry_transient(lambda: flaky(), 5.0, lambda exc, wait_s: waits.append(wait_s))
    assert (got, len(calls), len(waits)) == ("ok", 3, 1)
