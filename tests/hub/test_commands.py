"""The API-to-leader RPC: typed commands and replies, refusals raised as typed errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

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
from protocols.errors import Conflict, EngineError, NotFound
from protocols.keys import Keys
from protocols.transport import Storage

pytestmark = pytest.mark.redis


def test_each_command_names_its_reply_model() -> None:
    assert StartRun.reply_model is StartRunReply
    assert Go.reply_model is GoReply
    reply = Go(run_id="r", cue_id="C").read_reply({"state": "go", "attempt": 2})
    assert reply == GoReply(state="go", attempt=2)


async def _go(cmd: Go) -> GoReply:
    if cmd.cue_id == "missing":
        raise NotFound(f"run {cmd.run_id} has no cue {cmd.cue_id}")
    if cmd.cue_id == "busy":
        raise Conflict(f"cue {cmd.cue_id} is not armed")
    return GoReply(state="go", attempt=1)


async def _cancel(cmd: Cancel) -> CancelReply:
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

    async def crash(cmd: Go) -> GoReply:
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
    """An API process's concurrent requests: their commands share one XADD pipeline."""
    db = Storage(real_redis)
    store = CommandStore(db, keys)
    trips: list[str] = []
    real_pipeline = db.pipeline

    async def pipeline(op: str, *args: Any, **kwargs: Any) -> list[Any]:
        trips.append(op)
        return await real_pipeline(op, *args, **kwargs)

    monkeypatch.setattr(db, "pipeline", pipeline)
    bodies = [f'{{"n": {i}}}'.encode() for i in range(20)]
    await asyncio.gather(*(store.push(body) for body in bodies))
    assert trips == ["QUEUE COMMANDS"]
    entries = await real_redis.xrange(keys.commands(0))
    assert [fields[b"c"] for _, fields in entries] == bodies
