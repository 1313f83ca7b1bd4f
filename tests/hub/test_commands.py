"""The API-to-leader RPC: typed commands and replies, refusals raised as typed errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from hub.commands import (
    Cancel,
    CancelReply,
    CommandClient,
    CommandServer,
    Go,
    GoReply,
    Handlers,
    LeaderUnavailable,
    RaiseCondition,
    StartRun,
    StartRunReply,
)
from hub.store import CommandStore
from hub.store import commands as commands_store
from protocols.errors import Conflict, EngineError, NotFound, TransportError
from protocols.keys import Keys
from protocols.transport import Storage
from tests.helpers import eventually, run_out_of_memory
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


def test_each_command_names_its_reply_model() -> None:
    assert StartRun.reply_model is StartRunReply
    assert Go.reply_model is GoReply
    reply = Go(run_id="r", cue_id="C").read_reply({"state": "go", "attempt": 2})
    assert reply == GoReply(state="go", attempt=2)


async def _go(cmd: Go, command_id: str) -> GoReply:
    if cmd.cue_id == "missing":
        raise NotFound(f"run {cmd.run_id} has no cue {cmd.cue_id}")
    if cmd.cue_id == "busy":
        raise Conflict(f"cue {cmd.cue_id} is not armed")
    return GoReply(state="go", attempt=1)


async def _cancel(cmd: Cancel, command_id: str) -> CancelReply:
    return CancelReply(status=f"cancelled: {cmd.reason}")


async def test_a_call_reaches_the_leader_and_its_refusals_come_back_typed(
    real_redis: Any, keys: Keys
) -> None:
    store = CommandStore(Storage(real_redis), keys)
    handlers = Handlers().on(Go, _go).on(Cancel, _cancel)
    stop = asyncio.Event()
    server = asyncio.create_task(CommandServer(store, "hub-a", handlers).run(stop))
    client = CommandClient(store)
    try:
        await store.ensure_group()  # as a leader has
        assert await client.call(Go(run_id="r1", cue_id="C"), 5) == GoReply(state="go", attempt=1)
        cancelled = await client.call(Cancel(run_id="r1", reason="bye"), 5)
        assert cancelled.status == "cancelled: bye"
        with pytest.raises(NotFound, match="has no cue missing"):
            await client.call(Go(run_id="r1", cue_id="missing"), 5)
        with pytest.raises(Conflict, match="not armed"):
            await client.call(Go(run_id="r1", cue_id="busy"), 5)
        with pytest.raises(NotFound, match="unknown command"):  # no handler on this leader
            await client.call(RaiseCondition(run_id="r1", name="x"), 5)
    finally:
        stop.set()
        await server


async def test_a_command_queued_before_any_leader_is_served_by_the_first(
    real_redis: Any, keys: Keys
) -> None:
    store = CommandStore(Storage(real_redis), keys)
    client = CommandClient(store)
    command_id = await client.send(Go(run_id="r1", cue_id="C"))  # the stream has no group yet
    stop = asyncio.Event()
    server = asyncio.create_task(CommandServer(store, "hub-a", Handlers().on(Go, _go)).run(stop))
    try:
        reply = await client.answer(Go(run_id="r1", cue_id="C"), command_id, 5)
        assert reply == GoReply(state="go", attempt=1)
    finally:
        stop.set()
        await server


async def test_no_leader_answers_in_time(real_redis: Any, keys: Keys) -> None:
    client = CommandClient(CommandStore(Storage(real_redis), keys))
    with pytest.raises(LeaderUnavailable, match="Go"):
        await client.call(Go(run_id="r1", cue_id="C"), 0.2)


async def test_a_command_that_ends_every_term_is_answered_failing_after_its_tries(
    real_redis: Any, keys: Keys
) -> None:
    """Each term's server dies serving it (a handler that crashes the term); the next term
    (another hub) claims it at once, and past max_tries it is answered, not served."""
    store = CommandStore(Storage(real_redis), keys)
    served: list[str] = []

    async def crash(cmd: Go, command_id: str) -> GoReply:
        served.append(cmd.run_id)
        raise RuntimeError("a bug that ends the term")

    await store.ensure_group()
    client = CommandClient(store)
    command_id = await client.send(Go(run_id="r1", cue_id="C"))
    for term in range(2):
        server = CommandServer(store, f"hub-{term}", Handlers().on(Go, crash), max_tries=2)
        with pytest.raises(RuntimeError, match="ends the term"):
            await server.run(asyncio.Event())
    assert len(served) == 2
    stop = asyncio.Event()
    third = CommandServer(store, "hub-2", Handlers().on(Go, crash), max_tries=2)
    task = asyncio.create_task(third.run(stop))
    try:
        with pytest.raises(EngineError, match="failed on 2 tries"):
            await client.answer(Go(run_id="r1", cue_id="C"), command_id, 5)
    finally:
        stop.set()
        await task
    assert len(served) == 2


async def test_commands_queued_at_once_go_in_one_round_trip_in_their_order(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API process's concurrent requests: their commands share one round trip (one
    script, which XADDs them all)."""
    db = Storage(real_redis)
    store = CommandStore(db, keys)
    trips: list[int] = []
    real_queue = store._queue

    async def queue(keys_: Any, args: Any, **kwargs: Any) -> Any:
        trips.append(len(args) - 2)  # the commands (after the two caps)
        return await real_queue(keys_, args, **kwargs)

    monkeypatch.setattr(store, "_queue", queue)
    bodies = [f'{{"n": {i}}}'.encode() for i in range(20)]
    await asyncio.gather(*(store.push(body) for body in bodies))
    assert trips == [20]
    entries = await real_redis.xrange(keys.commands(0))
    assert [fields[b"c"] for _, fields in entries] == bodies


async def test_many_waits_share_one_connection_and_the_answer_stream_is_emptied(
    redis_server: Any, keys: Keys
) -> None:
    """300 commands waiting at once through a pool of 8 connections: one task reads every
    answer (a blocking pop per command held a connection each: the 9th waited for one, and
    the server's own reads with it). What was read is deleted from the stream."""
    from protocols.transport import connect

    tight = connect(redis_server.url, max_connections=8, timeout=2.0)
    store = CommandStore(Storage(tight), keys)
    client = CommandClient(store)
    try:
        async with serving(store):
            replies = await asyncio.gather(
                *(client.call(Go(run_id=f"r{i}", cue_id="C"), 10) for i in range(300))
            )
            assert replies == [GoReply(state="go", attempt=1)] * 300
            # each round deletes what the one before read: after one more call, at most
            # its own answer is left of the 301
            await client.call(Go(run_id="last", cue_id="C"), 10)
            stream = keys.answers(store.answers.asker)
            assert await tight.xlen(stream) <= 1
            assert 0 < await tight.ttl(stream) <= 60  # and the stream expires unread
    finally:
        async for key in tight.scan_iter(match=f"{keys.prefix}*"):
            await tight.delete(key)
        await tight.aclose()


async def test_an_answer_that_comes_before_its_wait_is_kept_and_one_never_asked_for_is_not(
    real_redis: Any, keys: Keys
) -> None:
    store = CommandStore(Storage(real_redis), keys)
    client = CommandClient(store)
    async with serving(store):
        early = await client.send(Go(run_id="r1", cue_id="C"))
        await eventually(lambda: _read_all(store, early), 10)  # answered, not yet asked for
        assert await client.answer(Go(run_id="r1", cue_id="C"), early, 5) == GoReply(
            state="go", attempt=1
        )
        store.answers.keep_s = 0.0
        for i in range(5):  # sent, never asked for: forgotten by the next round
            await client.send(Go(run_id=f"x{i}", cue_id="C"))
        await eventually(lambda: _none_waiting(store), 10)


async def test_a_request_that_does_not_validate_is_refused_on_its_askers_stream(
    real_redis: Any, keys: Keys
) -> None:
    store = CommandStore(Storage(real_redis), keys)
    async with serving(store):
        store.answers.expect("bad-1")
        body = {"id": "bad-1", "reply_to": store.answers.asker, "command": {"op": "explode"}}
        await store.push(json.dumps(body).encode())
        raw = await store.wait_answer("bad-1", 5)
        assert raw is not None and b"unknown command" in raw
        # a reply_to that is not a name (a key of someone else's, a glob): no answer there
        store.answers.expect("bad-2")
        evil = {"id": "bad-2", "reply_to": "x:*", "command": {"op": "explode"}}
        await store.push(json.dumps(evil).encode())
        assert await store.wait_answer("bad-2", 0.5) is None
        assert await real_redis.lpop(keys.reply("bad-2")) is not None  # on its own list
        assert not [k async for k in real_redis.scan_iter(match=f"{keys.prefix}hub:answers:x*")]


@contextlib.asynccontextmanager
async def serving(store: CommandStore) -> AsyncIterator[None]:
    """A leader serving `store`'s commands (Go, by `_go`) while the block runs."""
    await store.ensure_group()
    stop = asyncio.Event()
    server = asyncio.create_task(CommandServer(store, "hub-a", Handlers().on(Go, _go)).run(stop))
    try:
        yield
    finally:
        stop.set()
        await server
        await store.answers.close()


async def _read_all(store: CommandStore, command_id: str) -> bool:
    waiting = store.answers._waiting.get(command_id)
    return waiting is not None and waiting[1].done()


async def _none_waiting(store: CommandStore) -> bool:
    return not store.answers._waiting


async def test_an_answer_read_that_fails_is_tried_again(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis fails the reader's XREAD once, and its XDEL with the next XREAD once: the
    reader logs, waits, reads again, and each command still gets its answer, once."""
    db = Storage(real_redis)
    store = CommandStore(db, keys)
    client = CommandClient(store)
    failures = {"read": 1, "delete and read": 1}
    real = db.xdel_then_xread

    async def failing(stream: str, done: Any, *args: Any) -> Any:
        kind = "delete and read" if done else "read"
        if failures[kind]:
            failures[kind] -= 1
            raise TransportError(f"{kind}: connection lost")
        return await real(stream, done, *args)

    monkeypatch.setattr(db, "xdel_then_xread", failing)
    monkeypatch.setattr("hub.store.answers.ANSWERS_BLOCK_MS", 100)
    async with serving(store):
        first = await client.call(Go(run_id="r1", cue_id="C"), 10)
        second = await client.call(Go(run_id="r2", cue_id="C"), 10)  # its round deletes
    assert first == second == GoReply(state="go", attempt=1)
    assert failures == {"read": 0, "delete and read": 0}


async def test_answers_refused_out_of_memory_leave_their_commands_to_be_served_again(
    real_redis: Any, keys: Keys
) -> None:
    """Redis runs out of memory between serving a command and answering it: the answer
    and the command's XACK and XDEL go in one transaction, refused whole (out of memory
    Redis refuses an XADD, not an XACK or XDEL: pipelined, the command was taken off its
    stream and its answer lost). The term's server fails; the next serves it again, and
    the asker gets its answer."""
    store = CommandStore(Storage(real_redis), keys)
    served, handlers = _counting_gos()
    _answer_first_out_of_memory(store, real_redis)
    await store.ensure_group()
    client = CommandClient(store)
    asked = asyncio.create_task(client.call(Go(run_id="r1", cue_id="C"), 15))
    stop = asyncio.Event()
    with pytest.raises(TransportError, match="out of memory"):  # the first term's server
        await CommandServer(store, "hub-a", handlers).run(stop)
    server = asyncio.create_task(CommandServer(store, "hub-b", handlers).run(stop))
    try:
        assert await asyncio.wait_for(asked, 15) == GoReply(state="go", attempt=2)
        assert served == ["C", "C"]
    finally:
        stop.set()
        await server


async def test_on_a_cluster_commands_are_done_only_once_every_answer_landed(
    cluster_redis: Any, keys: Keys
) -> None:
    """On a Redis Cluster no transaction spans slots, so a batch's answers go one MULTI per
    slot. Two askers' commands are served in one batch: the first asker's answers share
    the commands stream's slot, the second's live on another node, which runs out of
    memory. The entries stay pending until every answer landed: the next term serves both
    again and the second asker gets its answer (when the XACK and XDEL rode with the
    first slot's answers, its command was taken off the stream and never answered)."""
    from redis.crc import key_slot

    from protocols.ids import new_id
    from protocols.transport import connect

    def slot(key: str) -> int:
        return int(key_slot(key.encode()))

    def port_of(key: str) -> int:
        return int(cluster_redis.nodes_manager.get_node_from_slot(slot(key)).port)

    await cluster_redis.initialize()  # the slots' nodes, known
    commands = keys.commands()
    near = next(a for a in iter(new_id, None) if slot(keys.answers(a)) == slot(commands))
    far = next(a for a in iter(new_id, None) if port_of(keys.answers(a)) != port_of(commands))
    stores = {}
    for name, asker in (("near", near), ("far", far)):
        stores[name] = store = CommandStore(Storage(cluster_redis), keys)
        store.answers.asker, store.answers.stream = asker, keys.answers(asker)
    server_store = stores["near"]
    served, handlers = _counting_gos()
    far_node = connect(f"redis://127.0.0.1:{port_of(keys.answers(far))}")
    _answer_first_out_of_memory(server_store, far_node)
    await server_store.ensure_group()
    try:
        asked = {}
        # queued in this order, so the near answer comes first in the batch
        for count, name in enumerate(("near", "far"), 1):
            call = CommandClient(stores[name]).call(Go(run_id="r", cue_id=name), 20)
            asked[name] = asyncio.create_task(call)
            await eventually(partial(_queued, cluster_redis, commands, count), 5)
        stop = asyncio.Event()
        with pytest.raises(TransportError, match="out of memory"):  # the first term's server
            await CommandServer(server_store, "hub-a", handlers).run(stop)
        assert served == ["near", "far"]
        server = asyncio.create_task(CommandServer(server_store, "hub-b", handlers).run(stop))
        try:
            assert await asyncio.wait_for(asked["far"], 20) == GoReply(state="go", attempt=4)
            assert await asyncio.wait_for(asked["near"], 5) == GoReply(state="go", attempt=1)
            assert sorted(served[2:]) == ["far", "near"]  # the whole batch, served again
        finally:
            stop.set()
            await server
    finally:
        await far_node.aclose()


async def _queued(client: Any, stream: str, count: int) -> bool:
    return int(await client.xlen(stream)) >= count


def _counting_gos() -> tuple[list[str], Handlers]:
    """Handlers that answer each Go with its count so far, and the cue ids served."""
    served: list[str] = []

    async def go(cmd: Go, command_id: str) -> GoReply:
        served.append(cmd.cue_id)
        return GoReply(state="go", attempt=len(served))

    return served, Handlers().on(Go, go)


def _answer_first_out_of_memory(store: CommandStore, server: Any) -> None:
    """`store`'s first `answer` runs with `server` out of memory (set back after it)."""
    answer = store.answer

    async def out_of_memory_first(*args: Any) -> None:
        store.answer = answer  # type: ignore[method-assign]
        restore = await run_out_of_memory(server)
        try:
            await answer(*args)
        finally:
            await restore()

    store.answer = out_of_memory_first  # type: ignore[method-assign]


async def test_a_command_queued_twice_by_a_lost_reply_is_served_once(
    redis_server: EmbeddedServer, keys: Keys
) -> None:
    """The push's reply is lost and redis-py sends its script (the XADDs) again: two entries of one
    command. The second gets the first's answer and is not served again."""
    served, handlers = _counting_gos()
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, direct):
        store = CommandStore(Storage(direct), keys)
        await store.ensure_group()
        stop = asyncio.Event()
        server = asyncio.create_task(CommandServer(store, "hub-a", handlers).run(stop))
        try:
            await direct.script_load(commands_store._QUEUE)  # its EVALSHA runs at once
            proxy.arm(b"EVALSHA", "reset")
            asking = CommandClient(CommandStore(Storage(lossy), keys))
            reply = await asking.call(Go(run_id="r1", cue_id="C"), 5)
            assert proxy.fired == ["reset"] and reply == GoReply(state="go", attempt=1)
            await eventually(lambda: _all_done(direct, keys), 10)
            assert served == ["C"]
        finally:
            stop.set()
            await server


async def _all_done(redis: Any, keys: Keys) -> bool:
    """Both entries read and acknowledged (answered commands are deleted)."""
    return bool(await redis.xlen(keys.commands(0)) == 0)
