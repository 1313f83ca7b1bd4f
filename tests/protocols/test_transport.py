"""Transport contract suite: every test runs on fakeredis, on the real server and on a
real 3-master Redis Cluster.

Cases fakeredis cannot reproduce use the `real_transport` fixture and say why.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols import payloads as p
from protocols.codec import Envelope, encode, make
from protocols.errors import (
    DecodeError,
    OutOfMemory,
    OversizedMessage,
    TransportError,
    UnknownMessageType,
)
from protocols.keys import Keys
from protocols.messages import MessageType
from protocols.transport import Delivery, Transport, WriteAhead, _wire, connect
from protocols.transport._client import _text
from tests.helpers import eventually, run_out_of_memory

GROUP = "workers"


class StateLostLog:
    """Records every (stream, group) the transport recreated after NOGROUP."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, stream: str, group: str) -> None:
        self.calls.append((stream, group))


@pytest.fixture
def lost() -> StateLostLog:
    return StateLostLog()


async def _cleanup(client: Any, prefix: str) -> None:
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        await client.delete(key)


REAL = [
    pytest.param("real", marks=pytest.mark.redis),
    pytest.param("cluster", marks=pytest.mark.redis),
]


def _server(request: pytest.FixtureRequest) -> EmbeddedServer | EmbeddedCluster:
    name = "redis_cluster" if request.param == "cluster" else "redis_server"
    server: EmbeddedServer | EmbeddedCluster = request.getfixturevalue(name)
    return server


@pytest.fixture(params=["fake", *REAL])
async def transport(
    request: pytest.FixtureRequest, keys: Keys, lost: StateLostLog
) -> AsyncIterator[Transport]:
    client: Any
    if request.param == "fake":
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        client = connect(_server(request).url)
    t = Transport(client, keys, max_deliveries=3, on_state_lost=lost, retry_s=2.0)
    yield t
    await t.close()
    await _cleanup(client, keys.prefix)
    await client.aclose()


@pytest.fixture(params=REAL)
async def real_transport(
    request: pytest.FixtureRequest, keys: Keys, lost: StateLostLog
) -> AsyncIterator[Transport]:
    client = connect(_server(request).url)
    t = Transport(client, keys, max_deliveries=3, on_state_lost=lost, retry_s=2.0)
    yield t
    await t.close()
    await _cleanup(client, keys.prefix)
    await client.aclose()


def notice(text: str = "hello") -> Envelope:
    return make(MessageType.BROADCAST_NOTICE, p.BroadcastNotice(text=text))


async def read_all(t: Transport, stream: str, consumer: str = "c1") -> list[Delivery]:
    return await t.read_group([stream], GROUP, consumer, count=1000, block_ms=None)


async def stream_ids(t: Transport, stream: str) -> list[str]:
    rows: Any = await t._client.xrange(stream)
    return [entry_id.decode() for entry_id, _ in rows]


async def reclaim_some(t: Transport, stream: str, consumer: str) -> list[Delivery]:
    return await eventually(lambda: t.reclaim(stream, GROUP, consumer, min_idle_ms=50))


# -- publish / read / ack ---------------------------------------------------------------


async def test_publish_read_ack_round_trip(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    message = notice()
    entry_id = await transport.publish(stream, message)

    [delivery] = await read_all(transport, stream)
    assert (delivery.stream, delivery.entry_id, delivery.deliveries) == (stream, entry_id, 1)
    assert delivery.error is None
    assert delivery.message == message
    assert delivery.raw == encode(message)
    assert await transport.pending_count(stream, GROUP) == 1

    await transport.ack([delivery], GROUP)
    assert await transport.pending_count(stream, GROUP) == 0
    assert await read_all(transport, stream) == []


async def test_publish_passes_encoded_bytes_through(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    data = encode(notice("pre-encoded"))
    await transport.publish(stream, data)
    [delivery] = await read_all(transport, stream)
    assert delivery.raw == data
    assert delivery.message is not None


async def test_publish_many_keeps_order_in_one_round_trip(
    transport: Transport, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = [keys.inbox("agent-a"), keys.inbox("agent-b")]
    for stream in streams:
        await transport.ensure_group(stream, GROUP)
    items: list[tuple[str, Envelope | bytes]] = [
        (streams[i % 2], notice(f"n{i}")) for i in range(300)
    ]

    client = transport._client
    commands: list[object] = []
    executions: list[int] = []
    real_pipeline = client.pipeline

    def counting_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        async def execute(*a: Any, **kw: Any) -> Any:
            executions.append(len(pipe))  # queued commands (a cluster pipeline too)
            return await real_execute(*a, **kw)

        setattr(pipe, "execute", execute)  # noqa: B010
        return pipe

    async def no_direct_command(*args: Any, **kwargs: Any) -> Any:
        commands.append(args)
        raise AssertionError(f"publish_many sent {args[0]} outside the pipeline")

    real_exchange = _wire._exchange  # the lean path's one write (a plain Redis client)

    async def counting_exchange(connection: Any, wire: Any) -> Any:
        executions.append(len(wire))
        return await real_exchange(connection, wire)

    monkeypatch.setattr(client, "pipeline", counting_pipeline)
    monkeypatch.setattr(client, "execute_command", no_direct_command)
    monkeypatch.setattr(_wire, "_exchange", counting_exchange)
    ids = await transport.publish_many(items)
    monkeypatch.undo()

    assert executions == [300]
    assert commands == []
    assert len(ids) == 300
    for stream in streams:
        got = await read_all(transport, stream)
        want = [(i, m) for (s, m), i in zip(items, ids, strict=True) if s == stream]
        assert [(d.entry_id, d.message) for d in got] == want
    assert await transport.publish_many([]) == []


async def test_an_atomic_write_lands_whole_and_queues_without_threads(
    real_transport: Transport, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A specialist's completion (XADD to its out stream, SET of a done-marker, DEL of the
    attempt's claim, XACK of its inbox: one slot) as one MULTI. On a cluster redis-py
    queued each command of a MULTI by starting a thread (and an event loop) and joining
    it; ours queue in place (the DEL too: found by review, a thread for each outcome)."""
    out, inbox, marker = keys.out("agent-a"), keys.inbox("agent-a"), keys.done("agent-a", "t1")
    claim = keys.done("agent-a", "t1:claim")
    await real_transport._client.set(claim, b"1-0")
    await real_transport.ensure_group(inbox, GROUP)
    await real_transport.publish(inbox, notice("work"))
    (work,) = await read_all(real_transport, inbox)

    def no_threads(self: threading.Thread) -> None:
        raise AssertionError("a thread was started to queue a command")

    monkeypatch.setattr(threading.Thread, "start", no_threads)
    ids = await real_transport.publish_many(
        [(out, notice("done"))], ack=[work], group=GROUP,
        then=[("SET", marker, b"1", "NX", "EX", 60), ("DEL", claim)], atomic=True,
    )  # fmt: skip
    monkeypatch.undo()
    assert len(ids) == 1 and await stream_ids(real_transport, out) == ids
    assert await real_transport._client.get(marker) == b"1"
    assert await real_transport._client.exists(claim) == 0
    assert await real_transport.pending_count(inbox, GROUP) == 0


async def test_a_write_ahead_of_a_read_lands_whole_and_is_told_before_the_read_returns(
    transport: Transport, keys: Keys
) -> None:
    """A replica's answers sent with its next read (`ahead`): on a plain Redis in the read's
    round trip, elsewhere on their own first; either way they land whole, acknowledging
    what they answer, and are told so while the read waits for new entries (test_wire
    checks it waits still)."""
    out, inbox, marker = keys.out("agent-a"), keys.inbox("agent-a"), keys.done("agent-a", "t1")
    await transport.ensure_group(inbox, GROUP)
    await transport.publish(inbox, notice("work"))
    (work,) = await read_all(transport, inbox)
    outcomes: list[Any] = []
    commands = transport.writes(
        [(out, notice("done"))], ack=[work], group=GROUP,
        then=[("SET", marker, b"1", "NX", "EX", 60)],
    )  # fmt: skip
    ahead = WriteAhead(commands, outcomes.append)
    reader = asyncio.create_task(
        transport.read_group([inbox], GROUP, "c1", block_ms=5000, ahead=ahead)
    )
    await eventually(lambda: outcomes, 5, message="told")
    [results] = outcomes
    assert len(results) == 3 and await stream_ids(transport, out) == [_text(results[0])]
    assert await transport._client.get(marker) == b"1"
    assert await transport.pending_count(inbox, GROUP) == 0
    await transport.publish(inbox, notice("more"))
    # the read goes on (fakeredis may end a blocked read early, empty: read again then)
    got = await asyncio.wait_for(reader, 5) or await eventually(lambda: read_all(transport, inbox))
    [more] = got
    assert more.message is not None and more.message.payload == p.BroadcastNotice(text="more")


async def test_read_group_many_streams_in_one_call(transport: Transport, keys: Keys) -> None:
    streams = [keys.out(f"agent-{i}") for i in range(300)]
    for stream in streams:
        await transport.ensure_group(stream, GROUP)
    await transport.publish_many([(s, notice(s)) for s in streams])
    got = await transport.read_group(streams, GROUP, "hub-1", count=10, block_ms=None)
    assert sorted(d.stream for d in got) == sorted(streams)
    assert all(d.error is None for d in got)


async def test_blocking_read_wakes_on_publish(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    reader = asyncio.create_task(transport.read_group([stream], GROUP, "c1", block_ms=5000))
    await transport.publish(stream, notice())
    got = await asyncio.wait_for(reader, 5)
    assert len(got) == 1


async def test_blocking_read_over_many_streams_loses_nothing(
    transport: Transport, keys: Keys
) -> None:
    """On a cluster, one blocking read per slot: a publish to any stream wakes the read,
    and a read still waiting when another answered is kept for the next call (its
    entries come then: none is lost, none delivered twice)."""
    streams = [keys.out(f"agent-{i}") for i in range(12)]
    for stream in streams:
        await transport.ensure_group(stream, GROUP)
    got: list[Delivery] = []
    for i, stream in enumerate(streams):
        reader = asyncio.create_task(transport.read_group(streams, GROUP, "c1", block_ms=3000))
        await transport.publish(stream, notice(f"n{i}"))
        got.extend(await asyncio.wait_for(reader, 5))
    got.extend(await transport.read_group(streams, GROUP, "c1", block_ms=100))
    assert sorted(d.stream for d in got) == sorted(streams)
    assert len({(d.stream, d.entry_id) for d in got}) == len(streams)
    assert [await transport.pending_count(s, GROUP) for s in streams] == [1] * len(streams)


# -- groups ---------------------------------------------------------------------------


async def test_ensure_group_is_idempotent(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    await transport.publish(stream, notice())
    await transport.ensure_group(stream, GROUP)  # BUSYGROUP: not an error, group untouched
    assert len(await read_all(transport, stream)) == 1
    assert await transport.stream_info(stream) is not None


async def test_ensure_group_does_not_swallow_other_errors(transport: Transport, keys: Keys) -> None:
    key = f"{keys.prefix}not-a-stream"
    await transport._client.set(key, b"x")
    with pytest.raises(TransportError, match="WRONGTYPE"):
        await transport.ensure_group(key, GROUP)
    with pytest.raises(TransportError, match="WRONGTYPE"):
        await transport.publish(key, notice())


async def test_group_destroyed_is_recreated_and_reported(
    transport: Transport, keys: Keys, lost: StateLostLog
) -> None:
    streams = [keys.out("agent-a"), keys.out("agent-b")]
    for stream in streams:
        await transport.ensure_group(stream, GROUP)
    await transport._client.xgroup_destroy(streams[1], GROUP)

    assert await transport.read_group(streams, GROUP, "c1", block_ms=None) == []
    assert lost.calls == [(streams[1], GROUP)]
    await transport.publish(streams[1], notice())
    assert len(await transport.read_group(streams, GROUP, "c1", block_ms=None)) == 1
    assert lost.calls == [(streams[1], GROUP)]  # once per recreation


async def test_stream_deleted_is_recreated_and_reported(
    real_transport: Transport, keys: Keys, lost: StateLostLog
) -> None:
    # real-only: fakeredis answers XREADGROUP on a missing key with a non-NOGROUP error.
    t = real_transport
    stream = keys.out("agent-a")
    await t.ensure_group(stream, GROUP)
    await t._client.delete(stream)
    assert await read_all(t, stream) == []
    assert lost.calls == [(stream, GROUP)]
    await t.publish(stream, notice())
    assert len(await read_all(t, stream)) == 1


async def test_stream_deleted_under_a_blocked_reader(
    real_transport: Transport, keys: Keys, lost: StateLostLog
) -> None:
    # real-only: fakeredis does not wake a blocked XREADGROUP when its key is deleted.
    t = real_transport
    stream = keys.out("agent-a")
    await t.ensure_group(stream, GROUP)
    reader = asyncio.create_task(t.read_group([stream], GROUP, "c1", block_ms=3000))
    await eventually(lambda: _blocked_clients(t))
    await t._client.delete(stream)
    await eventually(lambda: lost.calls == [(stream, GROUP)])
    await t.publish(stream, notice())
    assert len(await asyncio.wait_for(reader, 5)) == 1


async def _blocked_clients(t: Transport) -> bool:
    if t.is_cluster:  # every node's answer, by node
        client: Any = t._client
        per_node = await client.info("clients", target_nodes=client.ALL_NODES)
        return sum(int(info["blocked_clients"]) for info in per_node.values()) > 0
    info = await t._client.info("clients")
    return int(info["blocked_clients"]) > 0


# -- bad entries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "error", "reason"),
    [
        (b"not json at all", DecodeError, "not JSON"),
        (b"\xff\xfe\x00binary", DecodeError, "not JSON"),
        (b'{"message_type": "status.request"}', DecodeError, "bad field"),
        (b'{"message_type": "no.such.type", "payload": {}}', UnknownMessageType, "no.such"),
        (b"x" * (1024 * 1024), OversizedMessage, "over the"),
    ],
    ids=["not-json", "not-utf8", "wrong-schema", "unknown-type", "1MiB"],
)
async def test_garbage_comes_back_as_error_delivery(
    transport: Transport, keys: Keys, raw: bytes, error: type[Exception], reason: str
) -> None:
    stream = keys.out("agent-a")
    await transport.ensure_group(stream, GROUP)
    await transport.publish(stream, raw)
    [delivery] = await read_all(transport, stream)
    assert delivery.message is None
    assert isinstance(delivery.error, error)
    assert reason in delivery.error.reason
    assert delivery.raw == raw


@pytest.mark.parametrize(
    ("fields", "raw", "reason"),
    [
        ({"body": b"{}"}, b"body={}", "no 'm' field"),
        ({"m": b"{}", "x": b"1"}, b"{}", "unexpected fields ['x']"),
    ],
    ids=["missing-m", "extra-field"],
)
async def test_entry_with_wrong_fields_is_an_error_delivery(
    transport: Transport, keys: Keys, fields: dict[str, bytes], raw: bytes, reason: str
) -> None:
    stream = keys.out("agent-a")
    await transport.ensure_group(stream, GROUP)
    await transport._client.xadd(stream, fields)  # type: ignore[arg-type]
    [delivery] = await read_all(transport, stream)
    assert delivery.message is None
    assert isinstance(delivery.error, DecodeError)
    assert reason in delivery.error.reason
    assert delivery.raw == raw
    assert delivery.extra["fields"] == fields


@pytest.mark.redis
async def test_an_entry_naming_its_field_twice_is_an_error_delivery(
    redis_server: EmbeddedServer, keys: Keys, lost: StateLostLog
) -> None:
    """Read raw (a plain Redis), an entry's fields are all seen: one written with `m`
    twice is refused, not read as its last value (redis-py's parsed reply, on a cluster,
    keeps only that one)."""
    client = connect(redis_server.url)
    transport = Transport(client, keys, max_deliveries=3, on_state_lost=lost, retry_s=2.0)
    stream = keys.out("agent-a")
    try:
        await transport.ensure_group(stream, GROUP)
        await client.execute_command("XADD", stream, "*", "m", b"{}", "m", encode(notice()))
        [delivery] = await read_all(transport, stream)
        assert delivery.message is None
        assert isinstance(delivery.error, DecodeError)
        assert "unexpected fields ['m']" in delivery.error.reason
    finally:
        await transport.close()
        await _cleanup(client, keys.prefix)
        await client.aclose()


async def test_dead_letter_keeps_reason_and_raw_bytes(transport: Transport, keys: Keys) -> None:
    stream = keys.out("agent-a")
    await transport.ensure_group(stream, GROUP)
    raw = b"\xff\x00 not utf-8"
    await transport.publish(stream, raw)
    [delivery] = await read_all(transport, stream)

    dead_id = await transport.dead_letter(delivery, "not JSON", GROUP, sender="agent-a")
    assert await transport.pending_count(stream, GROUP) == 0  # acked with it

    rows: Any = await transport._client.xrange(keys.dead)
    [(entry_id, fields)] = rows
    assert entry_id.decode() == dead_id
    assert set(fields) == {
        b"reason",
        b"stream",
        b"entry_id",
        b"group",
        b"sender",
        b"deliveries",
        b"raw",
        b"raw_size",
        b"raw_sha256",
        b"at",
    }
    assert fields[b"raw"] == raw
    assert fields[b"sender"] == b"agent-a"
    assert fields[b"raw_size"] == str(len(raw)).encode()
    assert fields[b"stream"] == stream.encode()
    assert fields[b"entry_id"] == delivery.entry_id.encode()
    assert fields[b"group"] == GROUP.encode()
    assert fields[b"at"].endswith(b"Z")

    [letter] = await transport.dead_letters(10)
    assert letter["reason"] == "not JSON"
    assert letter["raw"] == raw
    assert letter["deliveries"] == 1
    assert letter["id"] == dead_id
    assert letter["raw_size"] == len(raw)
    assert letter["raw_sha256"] == hashlib.sha256(raw).hexdigest()


async def test_dead_letter_keeps_a_bounded_head_with_size_and_hash(
    transport: Transport, keys: Keys
) -> None:
    transport.deadletter_raw_bytes = 100
    raw = bytes(range(256)) * 40_000  # about 10 MiB
    big = Delivery(keys.inbox("agent-a"), "5-0", raw)
    await transport.dead_letter(big, "x" * 5000)
    [letter] = await transport.dead_letters()
    assert letter["raw"] == raw[:100]
    assert (letter["raw_size"], letter["raw_sha256"]) == (len(raw), hashlib.sha256(raw).hexdigest())
    assert len(letter["reason"]) == 1000  # a reason may quote the sender: cut, too


async def test_dead_letter_stream_is_capped(real_transport: Transport, keys: Keys) -> None:
    # real server: MAXLEN ~ trims whole macro nodes, which fakeredis does not model
    real_transport.deadletter_maxlen = 100
    letters = [(Delivery(keys.out("a"), f"{i}-0", b"x"), "junk", "a") for i in range(1, 1001)]
    for i in range(0, 1000, 100):
        await real_transport.dead_letter_many(letters[i : i + 100], None)
    length = await real_transport._client.xlen(keys.dead)
    assert 100 <= length < 300  # about the cap (a macro node of slack), not 1,000


async def test_dead_letters_are_paged_newest_first(transport: Transport, keys: Keys) -> None:
    items = [(Delivery(keys.out("a"), f"{i}-0", b"x"), f"n{i}", "a") for i in range(1, 8)]
    ids = await transport.dead_letter_many(items, None)
    first = await transport.dead_letters(3)
    assert [d["reason"] for d in first] == ["n7", "n6", "n5"]
    rest = await transport.dead_letters(10, before=first[-1]["id"])
    assert [d["reason"] for d in rest] == ["n4", "n3", "n2", "n1"]
    assert [d["id"] for d in first + rest] == ids[::-1]
    with pytest.raises(ValueError):
        await transport.dead_letters(3, before="+")


async def test_entries_by_id_reads_named_entries_only(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    first = await transport.publish(stream, notice("one"))
    await transport.publish(stream, b"{not json")
    found = await transport.entries_by_id(stream, [first, "99999999999999-0", "+", "0-0 junk"])
    assert list(found) == [first]
    assert found[first].message is not None
    assert found[first].message.body(p.BroadcastNotice).text == "one"


# -- at least once: reclaim, renew, poison ----------------------------------------------


async def test_reclaim_moves_idle_entries_to_a_live_consumer(
    transport: Transport, keys: Keys
) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    ids = await transport.publish_many([(stream, notice(str(i))) for i in range(3)])
    assert len(await read_all(transport, stream, "dead")) == 3  # never acked

    assert await transport.reclaim(stream, GROUP, "live", min_idle_ms=60_000) == []
    got = await reclaim_some(transport, stream, "live")
    assert [d.entry_id for d in got] == ids
    assert all(d.deliveries == 2 and d.message is not None for d in got)
    consumers = await transport.consumers(stream, GROUP)
    assert consumers["live"]["pending"] == 3
    assert consumers["dead"]["pending"] == 0
    assert set(consumers["live"]) == {"pending", "idle_ms", "inactive_ms", "idle_is_liveness"}


async def test_reclaim_respects_count(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    await transport.publish_many([(stream, notice(str(i))) for i in range(7)])
    await read_all(transport, stream, "dead")
    first = await eventually(
        lambda: transport.reclaim(stream, GROUP, "live", min_idle_ms=50, count=5)
    )
    assert len(first) == 5
    rest = await transport.reclaim(stream, GROUP, "live-2", min_idle_ms=50, count=5)
    assert len(rest) == 2


async def test_reclaim_acks_entries_deleted_while_pending(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    gone, kept = await transport.publish_many([(stream, notice("gone")), (stream, notice())])
    await read_all(transport, stream, "dead")
    await transport._client.xdel(stream, gone)
    got = await reclaim_some(transport, stream, "live")
    assert [d.entry_id for d in got] == [kept]
    assert await transport.pending_count(stream, GROUP) == 1


async def test_renew_keeps_a_slow_consumer_s_claim(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    entry_id = await transport.publish(stream, notice())
    await read_all(transport, stream, "slow")

    # While "slow" renews every 20 ms, entries idle past 150 ms are never found.
    loop = asyncio.get_running_loop()
    until = loop.time() + 0.5
    while loop.time() < until:
        await transport.renew(stream, GROUP, "slow", [entry_id])
        assert await transport.reclaim(stream, GROUP, "thief", min_idle_ms=150) == []
        await asyncio.sleep(0.02)  # pacing of the renew loop under test, not a wait

    # Once it stops renewing, the entry moves; renew did not count as a delivery.
    [got] = await eventually(lambda: transport.reclaim(stream, GROUP, "thief", min_idle_ms=150))
    assert got.entry_id == entry_id
    assert got.deliveries == 2


async def test_poison_entry_dead_lettered_after_max_deliveries(
    transport: Transport, keys: Keys
) -> None:
    assert transport.max_deliveries == 3
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    message = notice("poison")
    entry_id = await transport.publish(stream, message)

    [first] = await read_all(transport, stream, "c1")
    assert first.deliveries == 1
    for n, consumer in [(2, "c2"), (3, "c3")]:
        [again] = await reclaim_some(transport, stream, consumer)
        assert (again.entry_id, again.deliveries) == (entry_id, n)

    # The fourth claim finds it over the limit: dead-lettered and acked, not handed out.
    async def dead() -> list[Any]:
        assert await transport.reclaim(stream, GROUP, "c4", min_idle_ms=50) == []
        return await transport.dead_letters()

    [letter] = await eventually(dead)
    assert letter["reason"] == "poison: delivered 3 times"
    assert letter["deliveries"] == 3
    assert letter["raw"] == encode(message)
    assert (letter["stream"], letter["entry_id"], letter["group"]) == (stream, entry_id, GROUP)
    assert await transport.pending_count(stream, GROUP) == 0


async def test_a_forgiving_claim_does_not_count_what_the_claimer_held(
    transport: Transport, keys: Keys
) -> None:
    """`forgive` (the hub's term lost Redis, not the entry's fault): entries the claiming
    consumer held come back without counting a delivery, however often; entries another
    consumer held are counted as usual, and still become poison past the limit."""
    assert transport.max_deliveries == 3
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    mine = await transport.publish(stream, notice("mine"))
    [first] = await read_all(transport, stream, "hub")
    assert first.deliveries == 1
    for _ in range(5):  # five lost terms: past max_deliveries, yet not poison
        [again] = await transport.reclaim(stream, GROUP, "hub", min_idle_ms=0, forgive=True)
        assert (again.entry_id, again.deliveries) == (mine, 1)
    theirs = await transport.publish(stream, notice("theirs"))
    assert [d.entry_id for d in await read_all(transport, stream, "other")] == [theirs]
    got = await transport.reclaim(stream, GROUP, "hub", min_idle_ms=0, forgive=True)
    assert {d.entry_id: d.deliveries for d in got} == {mine: 1, theirs: 2}
    # Without forgiveness each claim counts; past the limit an entry is dead-lettered.
    for expected in ({mine: 2, theirs: 3}, {mine: 3}, {}):
        got = await transport.reclaim(stream, GROUP, "hub", min_idle_ms=0)
        assert {d.entry_id: d.deliveries for d in got} == expected
    letters = await transport.dead_letters()
    assert sorted(letter["entry_id"] for letter in letters) == sorted([mine, theirs])
    assert await transport.pending_count(stream, GROUP) == 0


async def test_poison_goes_to_the_callers_hook_when_given(transport: Transport, keys: Keys) -> None:
    """A specialist may not write the dead-letter stream: its poison goes to a hook."""
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    entry_id = await transport.publish(stream, notice("poison"))
    await read_all(transport, stream, "c1")
    for consumer in ("c2", "c3"):
        await reclaim_some(transport, stream, consumer)
    handed: list[tuple[str, int, str]] = []

    async def hook(items: list[tuple[Delivery, str]]) -> None:
        handed.extend((d.entry_id, d.deliveries, why) for d, why in items)

    async def poisoned() -> list[tuple[str, int, str]]:
        got = await transport.reclaim(stream, GROUP, "c4", min_idle_ms=50, on_poison=hook)
        assert got == []
        return handed

    assert await eventually(poisoned) == [(entry_id, 3, "poison: delivered 3 times")]
    assert await transport.dead_letters() == []  # nothing written: the hook decides
    assert await transport.pending_count(stream, GROUP) == 1  # nor acknowledged


# -- trim -----------------------------------------------------------------------------


async def test_trim_never_removes_pending_or_undelivered(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    ids = await transport.publish_many([(stream, notice(str(i))) for i in range(20)])

    # A group that has read nothing holds everything.
    assert await transport.trim(stream, maxlen=2) == 0

    got = await transport.read_group([stream], GROUP, "c1", count=10, block_ms=None)
    await transport.ack(got[:5], GROUP)
    # Entries 5..9 are pending: only 0..4 may go.
    assert await transport.trim(stream, maxlen=2) == 5
    remaining = await stream_ids(transport, stream)
    assert remaining == ids[5:]

    await transport.ack(got[5:], GROUP)
    # All delivered ones acked; 10..19 were never delivered. The last delivered stays.
    assert await transport.trim(stream, maxlen=2) == 4
    remaining = await stream_ids(transport, stream)
    assert remaining == ids[9:]


async def test_trim_to_maxlen_when_everything_is_handled(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    await transport.ensure_group(stream, GROUP)
    ids = await transport.publish_many([(stream, notice(str(i))) for i in range(10)])
    await transport.ack(await read_all(transport, stream), GROUP)
    assert await transport.trim(stream, maxlen=20) == 0
    assert await transport.trim(stream, maxlen=3) == 7
    remaining = await stream_ids(transport, stream)
    assert remaining == ids[7:]


async def test_trim_stream_without_groups(transport: Transport, keys: Keys) -> None:
    stream = keys.audit
    ids = await transport.publish_many([(stream, notice(str(i))) for i in range(10)])
    assert await transport.trim(stream, maxlen=8) == 2  # nearer the old end
    assert await transport.trim(stream, maxlen=2) == 6  # nearer the new end
    remaining = await stream_ids(transport, stream)
    assert remaining == ids[8:]
    assert await transport.trim(f"{keys.prefix}missing", maxlen=2) == 0


# -- broadcast and inspection ----------------------------------------------------------


async def test_read_broadcast_after_a_given_id(transport: Transport, keys: Keys) -> None:
    assert await transport.broadcast_tail() == "0-0"
    first = await transport.publish_many(
        [(keys.broadcast, notice("a")), (keys.broadcast, notice("b"))]
    )
    got = await transport.read_broadcast("0-0", block_ms=None)
    assert [d.entry_id for d in got] == first
    assert all(d.message is not None for d in got)

    tail = await transport.broadcast_tail()
    assert tail == first[-1]
    assert await transport.read_broadcast(tail, block_ms=None) == []
    reader = asyncio.create_task(transport.read_broadcast(tail, block_ms=5000))
    later = await transport.publish(keys.broadcast, notice("c"))
    assert [d.entry_id for d in await asyncio.wait_for(reader, 5)] == [later]


async def test_consumers_and_missing_groups(transport: Transport, keys: Keys) -> None:
    stream = keys.inbox("agent-a")
    assert await transport.consumers(stream, GROUP) == {}
    assert await transport.stream_info(stream) is None
    assert await transport.pending_count(stream, GROUP) == 0
    await transport.ensure_group(stream, GROUP)
    assert await transport.consumers(stream, GROUP) == {}
    await transport.publish(stream, notice())
    await read_all(transport, stream, "r1")
    info = (await transport.consumers(stream, GROUP))["r1"]
    assert info["pending"] == 1
    assert info["idle_ms"] >= 0 and info["inactive_ms"] >= 0
    stats = await transport.stream_info(stream)
    assert stats is not None and stats["length"] == 1 and stats["groups"] == 1
    missing_group, missing_stream = (stream, "other-group"), (keys.inbox("nobody"), GROUP)
    many = await transport.consumers_of([(stream, GROUP), missing_group, missing_stream])
    assert [sorted(c) for c in many] == [["r1"], [], []]  # one round trip for all three


async def test_blocking_reads_stay_under_the_client_read_timeout(
    redis_server: EmbeddedServer, keys: Keys
) -> None:
    # real-only: about redis-py's socket read timeout, which fakeredis has no socket for.
    assert connect(redis_server.url).connection_pool.connection_kwargs["socket_timeout"] is None
    client = connect(redis_server.url, socket_timeout=1.0)
    t = Transport(client, keys, retry_s=0)
    stream = keys.inbox("agent-a")
    await t.ensure_group(stream, GROUP)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await t.read_group([stream], GROUP, "c1", block_ms=3000) == []
    assert await t.read_broadcast("0-0", block_ms=0) == []  # 0 (forever) is capped too
    assert loop.time() - started < 2.0
    await client.delete(stream)
    await client.aclose()


@pytest.mark.redis
async def test_a_dead_letter_refused_out_of_memory_leaves_its_entry_pending(
    redis_server: EmbeddedServer, keys: Keys, lost: StateLostLog
) -> None:
    """Out of memory, Redis refuses the letter's XADD but would take the XACK: the XACK
    goes only once the letter is stored, so the entry is not acknowledged unrecorded."""
    admin = connect(redis_server.url)
    transport = Transport(admin, keys, on_state_lost=lost)
    stream = keys.out("agent-a")
    await transport.ensure_group(stream, GROUP)
    await transport.publish(stream, b"not JSON")
    [delivery] = await read_all(transport, stream)
    restore = await run_out_of_memory(admin)
    try:
        with pytest.raises(OutOfMemory):
            await transport.dead_letter(delivery, "not JSON", GROUP, sender="agent-a")
    finally:
        await restore()
    try:
        assert await transport.pending_count(stream, GROUP) == 1
        assert await transport.dead_letters(10) == []
        await transport.dead_letter(delivery, "not JSON", GROUP, sender="agent-a")
        assert await transport.pending_count(stream, GROUP) == 0
        assert len(await transport.dead_letters(10)) == 1
    finally:
        await transport.close()
        await _cleanup(admin, keys.prefix)
        await admin.aclose()
