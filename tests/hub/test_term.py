"""A leader's term on a real server: an exception in a leader task ends it cleanly (lease
released, state dropped), the next term handles again what was read and not acknowledged,
and an input that crashes every term is dead-lettered after max_deliveries, no crash-loop."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from hub.engine import guard, inputs
from hub.engine.state import RunState
from hub.service import Hub
from hub.store.state import StateStore
from protocols import payloads as p
from protocols.codec import Envelope, encode, make
from protocols.errors import StaleLeader, Unreachable
from protocols.keys import HUB_GROUP, STREAM_FIELD, Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import RunStatus
from protocols.transport import Transport
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis


def _escalation(agent: str, cause: str) -> Envelope:
    return make(T.ESCALATION_ERROR, p.EscalationError(cause=cause), from_agent=agent)


def _leading(settings: Settings, **overrides: Any) -> AbstractAsyncContextManager[Hub]:
    """A hub on a short lease that dead-letters an entry after 2 deliveries, once it leads."""
    short = {"max_deliveries": 2, "min_idle_ms": 30_000, "lease_ms": 600}
    return running_hub(settings, **{**short, **overrides})


async def test_an_input_that_crashes_every_term_is_dead_lettered_and_the_hub_goes_on(
    settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashes: list[str] = []
    handled: list[str] = []
    real = guard.specialist_escalation

    def buggy(engine: Any, msg: Envelope, max_severity: Any) -> None:
        cause = msg.body(p.EscalationError).cause
        if cause == "boom":
            crashes.append(cause)
            raise RuntimeError("a bug this input hits every time")
        handled.append(cause)
        real(engine, msg, max_severity)

    monkeypatch.setattr(guard, "specialist_escalation", buggy)
    async with _leading(settings) as hub:
        client = hub.transport._client
        first_token = hub.leadership.token
        await client.xadd(keys.out("buggy"), {STREAM_FIELD: encode(_escalation("buggy", "boom"))})
        # read once, then claimed at once by each next term (not after the 30 s idle
        # limit): past max_deliveries it is a dead letter, and nothing is pending
        letters = await eventually(lambda: client.xrange(keys.dead), 15, message="dead letter")
        assert b"poison" in letters[0][1][b"reason"]
        assert len(crashes) == 2
        await client.xadd(keys.out("buggy"), {STREAM_FIELD: encode(_escalation("buggy", "fine"))})
        await eventually(lambda: "fine" in handled, 10, message="the hub goes on")

        async def nothing_pending() -> bool:
            return (await client.xpending(keys.out("buggy"), HUB_GROUP))["pending"] == 0

        await eventually(nothing_pending, 10)
        # each crash ended a term that released its lease: new terms, new fencing tokens
        assert hub.leadership.token is not None and first_token is not None
        assert hub.leadership.token >= first_token + 2
        assert hub.leading.is_set()


async def test_terms_that_lose_redis_do_not_make_their_input_poison(
    settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input read by terms that each lost Redis (the term's fault, not the input's) is
    claimed back by the next term without counting a delivery: handled in the end, even
    after more such terms than max_deliveries, and never dead-lettered as poison."""
    lost: list[str] = []
    handled: list[str] = []
    real, real_commit = guard.specialist_escalation, StateStore.commit

    def flaky(engine: Any, msg: Envelope, max_severity: Any) -> None:
        cause = msg.body(p.EscalationError).cause
        if len(lost) < 4:  # max_deliveries is 2: four such terms would make it poison
            lost.append(cause)  # ...and the write of what it caused loses Redis
        else:
            handled.append(cause)
        real(engine, msg, max_severity)

    async def commit(store: StateStore, *args: Any) -> None:
        if len(lost) > len(handled) + len(failed_writes):
            failed_writes.append(1)
            raise Unreachable("Redis went away mid-write")
        await real_commit(store, *args)

    failed_writes: list[int] = []
    monkeypatch.setattr(guard, "specialist_escalation", flaky)
    monkeypatch.setattr(StateStore, "commit", commit)
    async with _leading(settings) as hub:
        client = hub.transport._client
        await client.xadd(keys.out("flaky"), {STREAM_FIELD: encode(_escalation("flaky", "x"))})
        await eventually(lambda: handled == ["x"], 15, message="handled after the lost terms")
        assert lost == ["x"] * 4 and len(failed_writes) == 4
        assert await client.xrange(keys.dead) == []

        async def nothing_pending() -> bool:
            return (await client.xpending(keys.out("flaky"), HUB_GROUP))["pending"] == 0

        await eventually(nothing_pending, 10)


async def test_what_another_hub_reads_during_this_term_is_claimed_at_once(
    settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub that no longer leads (woken from a freeze) reads an entry before it notices:
    the leader takes it at its next claim, not after the idle limit (30 s here)."""
    handled: list[str] = []
    real = guard.specialist_escalation

    def seen(engine: Any, msg: Envelope, max_severity: Any) -> None:
        handled.append(msg.body(p.EscalationError).cause)
        real(engine, msg, max_severity)

    monkeypatch.setattr(guard, "specialist_escalation", seen)
    async with running_hub(settings, min_idle_ms=30_000, lease_ms=2000) as hub:
        client = hub.transport._client
        stream = keys.out("agent")
        await client.xadd(stream, {STREAM_FIELD: encode(_escalation("agent", "first"))})
        await eventually(lambda: "first" in handled, 10)
        async with client.pipeline(transaction=True) as pipe:  # one MULTI: the other hub
            # reads the entry before the leader's blocked read can be served it
            pipe.xadd(stream, {STREAM_FIELD: encode(_escalation("agent", "stolen"))})
            pipe.xreadgroup(HUB_GROUP, "hub-that-froze", {stream: ">"})
            _, read = await pipe.execute()
        assert read and read[0][1], "the other hub holds the entry"
        await eventually(lambda: "stolen" in handled, 5, message="claimed from the other hub")

        async def nothing_pending() -> bool:
            return (await client.xpending(stream, HUB_GROUP))["pending"] == 0

        await eventually(nothing_pending, 5)


async def test_a_reply_whose_lingering_write_is_refused_is_handled_again_not_dropped(
    settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late reply's step sends nothing, so its write lingers. A reclaim reads the reply
    again while that write is out, and then the write is refused: the lease was lost. The
    reply is not acknowledged unwritten (once it was skipped as seen and acknowledged, and
    lost), and the refusal ends the term at once: the next term handles it again."""
    handled: list[str] = []
    reclaimed: list[str] = []
    refused: list[str] = []
    real_handle, real_commit, real_reclaim = inputs.handle, StateStore.commit, Transport.reclaim

    def handle(engine: Any, msg: Envelope) -> None:
        handled.append(msg.message_id)
        real_handle(engine, msg)

    async def reclaim(transport: Transport, stream: str, *args: Any, **kwargs: Any) -> Any:
        got = await real_reclaim(transport, stream, *args, **kwargs)
        if stream == keys.out("late"):
            reclaimed.extend(d.entry_id for d in got)
        return got

    async def commit(store: StateStore, out: Any, engine: Any, lease: str) -> None:
        acks = [c for c in out.raw if c[0] == "XACK" and c[1] == keys.out("late")]
        if acks and not refused:  # the reply's write: held until a reclaim read it again
            await eventually(lambda: reclaimed, 10, message="read again while written")
            refused.append(lease)
            raise StaleLeader("STALE leader lease lost: state write refused")
        await real_commit(store, out, engine, lease)

    monkeypatch.setattr(inputs, "handle", handle)
    monkeypatch.setattr(StateStore, "commit", commit)
    monkeypatch.setattr(Transport, "reclaim", reclaim)
    fast_claims = {"min_idle_ms": 100, "claim_interval_ms": 50, "max_deliveries": 5}
    async with _leading(settings, lease_ms=5000, **fast_claims) as hub:
        client = hub.transport._client
        ended = RunState(run_id="done-before", cuelist="c", version="v",
                         status=RunStatus.SUCCESS, created_at=1.0, completed_at=2.0)  # fmt: skip
        await hub.store.save_run(ended)
        reply = make(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1), from_agent="late",
                     run_id="done-before", cue_id="C")  # fmt: skip
        await client.xadd(keys.out("late"), {STREAM_FIELD: encode(reply)})
        await eventually(lambda: len(handled) == 2, 15, message="handled again by a new term")
        assert handled == [reply.message_id] * 2 and len(refused) == 1

        async def nothing_pending() -> bool:
            return (await client.xpending(keys.out("late"), HUB_GROUP))["pending"] == 0

        await eventually(nothing_pending, 10, message="acknowledged by the second write")
        assert await client.xrange(keys.dead) == []


async def test_a_hub_that_loses_redis_says_so_once_not_each_tick(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis gone in mid-life: the hub keeps looking every third of a lease, but says it
    cannot share the partitions out once (then each minute), and once that it can again."""
    ticks: list[int] = []
    real_tick = Hub._tick

    async def counted(hub: Hub, *args: Any) -> set[int]:
        ticks.append(1)
        return await real_tick(hub, *args)

    monkeypatch.setattr(Hub, "_tick", counted)
    caplog.set_level("INFO", logger="hub.service")
    with EmbeddedServer() as server:  # its own server: this test stops it
        mine = settings.model_copy(update={"redis_url": server.url})
        async with running_hub(mine, lease_ms=300) as hub:
            server.stop()
            after = len(ticks)
            await eventually(lambda: len(ticks) >= after + 6, 20, message="six ticks without Redis")
            said = [r for r in caplog.records if "cannot share the partitions out" in r.message]
            assert len(said) == 1, [r.message for r in said]
            await eventually(lambda: not hub.leading.is_set(), 20, message="its term ended")
            server.start()
            await eventually(lambda: hub.leading.is_set(), 20, message="leads again")
            await eventually(
                lambda: any("shares the partitions out again" in r.message for r in caplog.records),
                10,
            )
