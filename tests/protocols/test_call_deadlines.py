"""Every Redis call ends when its reply never comes (a half-dead link: the server ran the
command, its answer is lost, the socket stays open): after REPLY_GRACE_S, as Unreachable,
and the next call works on a fresh connection. Before, only blocking reads had a deadline:
a command, a script, a pipeline or a transaction whose reply was lost waited for ever, and
so did whatever waited on it (a lease renewal, a specialist's marker check, a claim).

The deadline is not a timer per call but one sweep (protocols.transport._deadlines); these
tests also hold it to what asyncio.timeout promises: a cancellation from outside stays a
cancellation, the task's cancel count is left as it was, and time the process was frozen
does not count against a reply that came meanwhile."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from protocols.errors import Unreachable
from protocols.keys import Keys
from protocols.transport import Storage, Transport, _deadlines, _gateway, connect
from tests.lossy_proxy import lossy_clients

Call = Callable[[Transport, Storage, Keys], Awaitable[Any]]
CALLS: dict[str, tuple[bytes, Call]] = {  # the words that mark the swallowed write, the call
    "GET": (b"GET", lambda t, db, k: db.get(k.leader(0))),
    "EVALSHA": (b"EVALSHA", lambda t, db, k: db.script("return 1")([k.leader(0)], [])),
    "pipeline": (b"HSET", lambda t, db, k: db.commands("HSET", [("HSET", k.run("r"), "a", "1")])),
    "MULTI": (
        b"MULTI",
        lambda t, db, k: db.commands("HSET", [("HSET", k.run("r"), "a", "1")], transaction=True),
    ),
    "XADD": (b"XADD", lambda t, db, k: t.publish(k.broadcast, b"{}")),
    "redis-py pipeline": (
        b"HGET",
        lambda t, db, k: db.pipeline("HGET", lambda pipe: pipe.hget(k.run("r"), "a")),
    ),
}


@pytest.mark.redis
@pytest.mark.parametrize("name", list(CALLS))
async def test_a_call_whose_reply_never_comes_ends_and_the_next_one_works(
    redis_server: EmbeddedServer, keys: Keys, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    words, call = CALLS[name]
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, _direct):
        transport, db = Transport(lossy, keys, retry_s=0), Storage(lossy, retry_s=0)
        proxy.arm(words, "swallow")
        async with asyncio.timeout(10):  # the test's own bound: before, the call never ended
            with pytest.raises(Unreachable, match=r"no reply within 0\.5 s"):
                await call(transport, db, keys)
        assert proxy.fired == ["swallow"]
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        async with asyncio.timeout(10):
            await call(transport, db, keys)


@pytest.mark.redis
async def test_a_call_retried_on_a_lost_link_is_bounded_on_each_try(
    redis_server: EmbeddedServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With retries on (the gateways' default), the swallowed try ends at its deadline and
    is not sent again: its outcome is unknown, as after a reset, and the caller decides."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, _direct):
        db = Storage(lossy, retry_s=10)
        proxy.arm(b"INCR", "swallow")
        async with asyncio.timeout(10):
            with pytest.raises(Unreachable):
                await db.incr(keys.fence(0))
        assert await db.incr(keys.fence(0)) == 2  # the first ran once, its reply lost


async def _forever() -> None:
    await asyncio.Event().wait()


def _gateway_alone() -> Storage:
    """A gateway whose calls here never reach its client: `_call` runs the given function."""
    return Storage(connect("redis://127.0.0.1:1/0"), retry_s=0)


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    call = asyncio.create_task(_gateway_alone()._call("GET", _forever))
    await asyncio.sleep(0)  # let it start waiting
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_an_expired_call_leaves_the_tasks_cancel_count_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outer asyncio.timeout still fires after the deadline ended an inner call: the
    sweep's cancellation was taken back (uncancel), as asyncio.timeout's own is."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.2)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            with pytest.raises(Unreachable, match=r"no reply within 0\.2 s"):
                await _gateway_alone()._call("GET", _forever)
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
            await _forever()


async def test_both_cancelled_at_once_the_outer_cancellation_wins() -> None:
    gateway = _gateway_alone()
    deadlines = gateway._deadlines
    task = asyncio.current_task()
    assert task is not None

    def both() -> None:  # the outer cancel, and a sweep finding the call past due
        task.cancel()
        for call in deadlines._calls:
            call.due = 0.0
        deadlines._swept()

    asyncio.get_running_loop().call_later(0.05, both)
    with pytest.raises(asyncio.CancelledError):
        await gateway._call("GET", _forever)
    assert task.uncancel() == 0  # the sweep's was taken back; the outer one was left


async def test_time_the_process_was_frozen_does_not_count_against_a_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply arrives while the process is frozen (SIGSTOP, a long pause of the loop)
    past the deadline: the sweep that runs late, in the same turn as the reply, moves the
    deadline on rather than ending a call whose answer is there to read."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.3)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader, writer = await asyncio.open_connection(sock=ours)
        try:

            def freeze_then_reply() -> None:
                time.sleep(0.6)  # the process frozen past the 0.3 s deadline (not a wait)
                theirs.send(b"+OK\r\n")

            asyncio.get_running_loop().call_later(0.05, freeze_then_reply)
            assert await _gateway_alone()._call("PING", reader.readline) == b"+OK\r\n"
        finally:
            writer.close()


def test_the_sweep_runs_often_enough_for_a_short_deadline() -> None:
    assert _deadlines.SWEEP_S <= _gateway.REPLY_GRACE_S / 4


@pytest.mark.redis
async def test_the_consumer_listing_off_the_loop_ends_too(
    redis_server: EmbeddedServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upkeep lists an inbox's consumers in a worker thread on a connection of its own (the
    list may be huge): its reply is due within REPLY_GRACE_S as well, and the listing (a
    read) is sent again once on a fresh connection, as redis-py does after a read timeout.
    Before, a lost reply held the thread and upkeep's task for ever."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, lossy, _direct):
        transport = Transport(lossy, keys, retry_s=0)
        inbox = keys.inbox("a")
        await transport.ensure_group(inbox, "a")
        proxy.arm(b"CONSUMERS", "swallow")
        async with asyncio.timeout(10):  # before, it never ended
            listed = await transport.idle_consumers(inbox, "a", keep=(), min_idle_ms=0, most=9)
        assert listed == [] and proxy.fired == ["swallow"]


async def test_each_try_of_a_retried_call_has_the_whole_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A try lost to a broken connection late in its deadline, then a slower second try:
    the second inherited what was left of the first's deadline and was cut short (found
    by review: a blackholed connect takes about 10 s, leaving its retry nothing)."""
    monkeypatch.setattr(_gateway, "REPLY_GRACE_S", 0.5)
    tries: list[float] = []

    async def flaky() -> str:
        tries.append(time.monotonic())
        await asyncio.sleep(0.35)  # the reply's time on the wire (not a wait for an event)
        if len(tries) == 1:
            raise ConnectionError("connection reset")
        return "ok"

    gateway = Storage(connect("redis://127.0.0.1:1/0"), retry_s=5)
    async with asyncio.timeout(10):
        assert await gateway._call("GET", flaky) == "ok"
    assert len(tries) == 2
