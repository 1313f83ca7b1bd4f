"""A command served again after its effect was written, its answer lost: answered as it
was the first time (from the answer its step filed), never done twice; one refused is
refused again. On a real hub, its answers failed for real (Redis out of memory, the
connection lost) between the engine's commit and the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from callboard.embedded_cluster import EmbeddedCluster
from hub import commands as c
from hub.engine.core import Engine
from hub.engine.escalations import Escalation
from hub.service import Hub
from protocols import payloads as p
from protocols.errors import Conflict, Unreachable
from protocols.ids import new_id_in
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from tests.helpers import eventually, run_out_of_memory
from tests.hub.armed import AGENT, armed_run, sent_to_agent
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
# how a test makes the hub's first answer fail, given the hub and what sends that answer
Fault = Callable[[Hub, Callable[[], Awaitable[None]]], Awaitable[None]]


async def _out_of_memory(hub: Hub, send: Callable[[], Awaitable[None]]) -> None:
    """Redis out of memory while the answer is sent: refused, the term ends; the next term
    (this hub, leading again) reads the command again."""
    restore = await run_out_of_memory(hub.transport._client)
    try:
        await send()
    finally:
        await restore()


async def _connection_lost(hub: Hub, send: Callable[[], Awaitable[None]]) -> None:
    """The answer never reaches Redis (the connection dropped): the same term's server
    reads the command again, its engine holding what the first serve did."""
    raise Unreachable("answer: connection lost")


def _first_answer_fails(hub: Hub, fault: Fault, partition: int = 0) -> list[int]:
    """The first answer of the hub's `partition` fails by `fault`; the list counts its
    answers."""
    store = hub.partitions[partition].own.commands
    answer, sent = store.answer, []

    async def failing(entry_ids: list[str], answers: list[Any], filed: Any = ()) -> None:
        sent.append(len(answers))
        if len(sent) > 1:
            return await answer(entry_ids, answers, filed)
        await fault(hub, lambda: answer(entry_ids, answers, filed))
        raise AssertionError("the fault let the answer through")

    store.answer = failing  # type: ignore[method-assign]
    return sent


@pytest.fixture
async def hub(settings: Settings) -> AsyncIterator[Hub]:
    """A hub leading on a short lease (a failed term is followed by the next at once)."""
    async with running_hub(settings, lease_ms=1500) as hub:
        yield hub


async def _events(hub: Hub, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in await hub.store.events(run_id) if e.data["type"] == kind]


async def _no_answers_kept(hub: Hub, keys: Keys) -> bool:
    client = hub.transport._client
    return not [k async for k in client.scan_iter(match=keys.served("*"))]


@pytest.mark.parametrize("fault", [_out_of_memory, _connection_lost], ids=["new-term", "same-term"])
async def test_a_go_served_again_after_its_answer_was_lost_is_answered_ok_and_done_once(
    hub: Hub, keys: Keys, fault: Fault
) -> None:
    """The GO is written (its WARNING sent), then its answer fails. Read again (by the next
    term, or by the same one), it was answered 409 `cue FIRST is not armed: it is warning`:
    the operator was told the GO failed when it had taken effect."""
    run_id = await armed_run(hub)
    sent = _first_answer_fails(hub, fault)
    reply = await hub.commands.call(c.Go(run_id=run_id, cue_id="FIRST"), 20)
    assert reply == c.GoReply(state="warning", attempt=1)
    assert sent[0] == 1 and len(sent) >= 2  # its first answer failed; it was answered again
    assert await sent_to_agent(hub, keys) == 1  # one WARNING: the GO was done once
    run = await hub.store.run(run_id)
    assert run is not None and run.cues["FIRST"].attempt == 1
    assert await _no_answers_kept(hub, keys)  # the kept answer went with the command


@pytest.mark.parametrize("fault", [_out_of_memory, _connection_lost], ids=["new-term", "same-term"])
async def test_a_keyed_go_served_again_is_answered_from_its_key_and_done_once(
    hub: Hub, keys: Keys, fault: Fault
) -> None:
    """A GO with an Idempotency-Key keeps its reply under the key, not under its command
    id: read again after its answer failed, it is answered from the key."""
    run_id = await armed_run(hub)
    sent = _first_answer_fails(hub, fault)
    go = c.Go(run_id=run_id, cue_id="FIRST", idempotency_key="served-key", request="r")
    assert await hub.commands.call(go, 20) == c.GoReply(state="warning", attempt=1)
    assert sent[0] == 1 and len(sent) >= 2
    assert await sent_to_agent(hub, keys) == 1
    assert await _no_answers_kept(hub, keys)
    assert await hub.transport._client.get(keys.command_idempotency("served-key")) is not None


@pytest.mark.parametrize("fault", [_out_of_memory, _connection_lost], ids=["new-term", "same-term"])
async def test_a_budget_raise_served_again_is_answered_as_it_was_and_applied_once(
    hub: Hub, keys: Keys, fault: Fault
) -> None:
    """Served again, the raise was applied a second time: a second `budget` event (and
    its timers) for one operator's request."""
    run_id = await armed_run(hub)
    sent = _first_answer_fails(hub, fault)
    reply = await hub.commands.call(c.ChangeBudget(run_id=run_id, changes={"tokens": 500}), 20)
    assert reply.budget["tokens"] == 500 and reply.status == "holding"  # on the GO of FIRST
    assert len(sent) >= 2
    assert [e["budget"]["tokens"] for e in await _events(hub, run_id, "budget")] == [500]
    assert await _no_answers_kept(hub, keys)


@pytest.mark.parametrize("fault", [_out_of_memory, _connection_lost], ids=["new-term", "same-term"])
async def test_a_refused_command_served_again_is_refused_again(
    hub: Hub, keys: Keys, fault: Fault
) -> None:
    """A GO refused (its cue waits for another) has no effect and files no answer: read
    again, it is served again and refused again."""
    run_id = await armed_run(hub)
    sent = _first_answer_fails(hub, fault)
    with pytest.raises(Conflict, match="SECOND is not armed"):
        await hub.commands.call(c.Go(run_id=run_id, cue_id="SECOND"), 20)
    assert len(sent) >= 2
    assert await sent_to_agent(hub, keys) == 0
    assert await _no_answers_kept(hub, keys)


async def test_on_a_cluster_a_go_served_again_is_answered_ok_and_done_once(
    settings: Settings, redis_cluster: EmbeddedCluster, cluster_redis: Any, keys: Keys
) -> None:
    """The GO's step is journaled and applied slot by slot; its answer, filed in the
    partition's slot (beside the commands stream and the journal), is read by the next
    term after the journal's replay, and deleted with the command's XACK there."""
    on_cluster = Settings(**{**settings.model_dump(), "redis_url": redis_cluster.url})
    async with running_hub(on_cluster, lease_ms=1500) as hub:
        assert hub.partitions[0].store.db.is_cluster  # steps go through the journaled commit
        run_id = await armed_run(hub)
        sent = _first_answer_fails(hub, _out_of_memory_on(cluster_redis, keys))
        reply = await hub.commands.call(c.Go(run_id=run_id, cue_id="FIRST"), 20)
        assert reply == c.GoReply(state="warning", attempt=1)
        assert len(sent) >= 2
        assert await cluster_redis.xlen(keys.inbox(AGENT)) == 1
        assert not [k async for k in cluster_redis.scan_iter(match=keys.served("*"))]


def _out_of_memory_on(cluster: Any, keys: Keys) -> Fault:
    """Out of memory on the node of the commands stream's slot (where the answer's XACK
    and XDEL go, and the asker's answers may)."""

    async def fault(hub: Hub, send: Callable[[], Awaitable[None]]) -> None:
        await cluster.initialize()
        node = cluster.get_node_from_key(keys.commands())
        restore = await run_out_of_memory(cluster.get_redis_connection(node))
        try:
            await send()
        finally:
            await restore()

    return fault


async def test_with_partitions_each_partition_answers_from_its_own_filed_answers(
    settings: Settings, keys: Keys
) -> None:
    """A resolve served by partition 1 (its run's), its answer lost: answered `resolved`
    again (it was 409 `already resolved`). Then a pause, sent to both partitions as two
    commands, partition 0's answer refused: each partition answers its own, and the
    agents are told once."""
    async with running_hub(settings, lease_ms=1500, partitions=2) as hub:
        await eventually(lambda: len(hub.led()) == 2, 10, message="leads both partitions")
        run_id = await armed_run(hub, new_id_in(1, 2))

        def escalate(e: Engine) -> Escalation:
            cause = p.EscalationError(cause="stuck")
            return e.escalate(e.runs[run_id], "FIRST", T.ESCALATION_ERROR, cause)

        esc = await hub.partitions[1].driver.step(escalate)
        sent = _first_answer_fails(hub, _connection_lost, partition=1)
        reply = await hub.commands.call(c.Resolve(id=esc.id, note="fine"), 20)
        assert reply == c.ResolveReply(id=esc.id, status="resolved")
        assert len(sent) >= 2
        stored = await hub.store.escalation(esc.id)
        assert stored is not None and stored.resolution is not None
        assert stored.resolution["note"] == "fine"

        sent = _first_answer_fails(hub, _out_of_memory, partition=0)
        pause = c.Broadcast(message_type=T.BROADCAST_PAUSE.value, payload={"reason": "x"})
        assert await hub.commands.call(pause, 20) == c.BroadcastReply(sent="broadcast.pause")
        assert len(sent) >= 2
        assert all(p.driver.engine.paused == "x" for p in hub.partitions)
        client: Any = hub.transport._client
        told = [m[b"m"] for _, m in await client.xrange(keys.broadcast)]
        assert len([m for m in told if b"broadcast.pause" in m]) == 1
        assert await _no_answers_kept(hub, keys)


@pytest.mark.parametrize(
    "command",
    [
        lambda run_id: c.Cancel(run_id=run_id),
        lambda run_id: c.Go(run_id=run_id, cue_id="FIRST"),
        lambda run_id: c.RaiseCondition(run_id=run_id, name="approval"),
        lambda run_id: c.ChangeBudget(run_id=run_id, changes={"tokens": 5}),
    ],
    ids=["cancel", "go", "condition", "budget"],
)
async def test_a_command_for_a_run_that_ended_meanwhile_is_refused_as_ended(
    hub: Hub, command: Callable[[str], c.Command[Any]]
) -> None:
    """The API looked at the run while it was live; by the time the leader served the
    command it had ended and left the engine: the answer was 404 "no active run" for a run
    that GET shows, where one sent a moment later gets 409 "already cancelled"."""
    run_id = await armed_run(hub)
    await hub.commands.call(c.Cancel(run_id=run_id), 20)
    assert run_id not in hub.driver.engine.runs
    with pytest.raises(Conflict, match=f"run {run_id} is already cancelled"):
        await hub.commands.call(command(run_id), 20)
