"""What a specialist reports against a run's budget cannot stall a real hub: reports past
the caps are refused, totals stop at the caps, and the hub goes on serving the run."""

from __future__ import annotations

from typing import Any

import pytest

from hub.commands import Resolve
from hub.engine import driver as driver_module
from hub.engine.escalations import Escalation
from hub.service import Hub
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import Envelope, decode, encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import Severity
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
GREEDY = "cuelist: greedy\ncues:\n  - {id: ONLY, target_agents: [mallory], coordination: direct}\n"


async def test_usage_past_a_float_or_the_caps_leaves_the_hub_serving(hub: Hub) -> None:
    """mallory, the cue's one target, writes the context twice reporting a cost of 1e308,
    then completes reporting the most a report may hold, twice over in tokens. The sum of
    two such costs once went past a float's range inside the engine step: the step raised,
    the term ended, and the next term handled the same write again, so the run never
    finished. Now the writes past the cap are protocol violations, the completion counts,
    and the run succeeds with its totals at the caps."""
    client, keys = hub.transport._client, hub.keys
    parsed, version = load_cuelist(GREEDY)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), GREEDY)
    await hub.driver.start_run("greedy", version, "run-greedy", {}, False)

    async def assigned() -> list[object]:
        entries = await client.xrange(keys.inbox("mallory"))
        return [decode(f[STREAM_FIELD.encode()]) for _, f in entries]

    (task,) = await eventually(assigned, 10)
    huge = {"usage": {"cost": 1e308}}
    writes = [
        task.reply(T.TASK_CONTEXT, p.TaskContext(key=f"k{n}", value=n, metadata=huge))
        for n in range(2)
    ]
    most = p.Usage(tokens=p.USAGE_MAX, cost=p.COST_MAX, counters={"calls": p.USAGE_MAX})
    done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, usage=most))
    for message in (*writes, done):
        body = message.model_copy(update={"from_agent": "mallory"})
        await client.xadd(keys.out("mallory"), {STREAM_FIELD: encode(body)})

    run = await _finished(hub, "run-greedy")
    assert run.status.value == "success"
    assert run.usage == most
    causes = {e.cause for e in await hub.store.escalations(limit=100)}
    assert "bad_usage:mallory" in causes, causes
    assert hub.leading.is_set() and hub.driver.failed is None


PAIR = "cuelist: pair\ncues:\n  - {id: BOTH, target_agents: [ann, bob], coordination: direct}\n"


async def test_a_completion_read_again_by_the_next_leader_is_not_counted_twice(
    settings: Settings, real_redis: Any
) -> None:
    """ann completes reporting 60 tokens; her SDK's XADD is sent again (its reply was
    lost), and the hub that handled the first is gone: the next leader has not seen the
    message, and bob has not completed, so the cue is still in GO. The copy once counted
    again (120 tokens for one report, and a third message against the run's `messages`);
    a target that completed its attempt completes it once, so its usage and the message
    count once."""
    parsed, version = load_cuelist(PAIR)
    keys, client = settings.keys, real_redis
    async with running_hub(settings, lease_ms=1000) as first:
        await first.cuelists.put(parsed, version, canonical_json(parsed), PAIR)
        await first.driver.start_run("pair", version, "run-pair", {}, False)

        async def assigned(agent: str) -> list[Envelope]:
            entries = await client.xrange(keys.inbox(agent))
            return [decode(f[STREAM_FIELD.encode()]) for _, f in entries]

        (ann_task,) = await eventually(lambda: assigned("ann"), 10)
        (bob_task,) = await eventually(lambda: assigned("bob"), 10)
        done = ann_task.reply(
            T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, usage=p.Usage(tokens=60))
        ).model_copy(update={"from_agent": "ann"})
        raw = encode(done)
        await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})

        async def counted() -> object:
            run = await first.store.run("run-pair")
            return run is not None and run.usage.tokens == 60

        await eventually(counted, 10)
    await client.xadd(keys.out("ann"), {STREAM_FIELD: raw})  # the same message again
    async with running_hub(settings, lease_ms=1000) as second:
        bob = bob_task.reply(
            T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, usage=p.Usage(tokens=5))
        ).model_copy(update={"from_agent": "bob"})
        await client.xadd(keys.out("bob"), {STREAM_FIELD: encode(bob)})

        run = await _finished(second, "run-pair")
        assert run.status.value == "success"
        assert run.usage.tokens == 65
        assert run.cues["BOTH"].usage.tokens == 65
        assert run.record.late_replies == 1
        assert run.record.messages_in == 2  # the copy is not a message taken: once 3


SPENT = """
cuelist: spent
budget: {tokens: 10}
cues:
  - {id: A, target_agents: [ann], coordination: direct, auto_follow: B}
  - {id: B, target_agents: [bob], coordination: direct}
"""


async def test_a_budget_warning_is_resolved_after_a_failover_past_1000_newer_escalations(
    settings: Settings, real_redis: Any
) -> None:
    """A running run's budget warning (an open escalation in the operator queue), then
    1,000 escalations of other runs, then a new leader: it loads the newest 1,000, so the
    warning was not in its book, and resolving it was refused ("no open escalation", a
    404) for as long as the run ran. The leader takes it from Redis and resolves it."""
    parsed, version = load_cuelist(SPENT)
    keys, client = settings.keys, real_redis
    async with running_hub(settings, lease_ms=1000) as first:
        await first.cuelists.put(parsed, version, canonical_json(parsed), SPENT)
        await first.driver.start_run("spent", version, "run-spent", {}, False)
        entries = await eventually(lambda: client.xrange(keys.inbox("ann")), 10)
        task = decode(entries[0][1][STREAM_FIELD.encode()])
        done = task.reply(
            T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, usage=p.Usage(tokens=9))
        ).model_copy(update={"from_agent": "ann"})
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(done)})

        async def warned() -> list[Escalation]:
            found = await first.store.escalations(limit=10)
            return [e for e in found if e.cause == "budget:tokens@10"]

        (warning,) = await eventually(warned, 10)
    later = warning.created_at + 1
    others = [
        Escalation(type=T.ESCALATION_ERROR, severity=Severity.MEDIUM, run_id=f"other-{n}",
                   cause="elsewhere", created_at=later + n, updated_at=later + n)
        for n in range(1000)
    ]  # fmt: skip
    async with client.pipeline(transaction=False) as pipe:
        for esc in others:
            pipe.set(keys.escalation(esc.id), esc.model_dump_json())
            pipe.zadd(keys.escalations, {esc.id: esc.created_at})
        await pipe.execute()
    async with running_hub(settings, lease_ms=1000) as second:
        run = await second.store.run("run-spent")
        assert run is not None and not run.status.done
        reply = await second.commands.call(Resolve(id=warning.id, note="seen"), timeout_s=10)
        assert reply.status == "resolved"
        stored = await second.store.escalation(warning.id)
        assert stored is not None and stored.status == "resolved"


async def test_a_cause_again_after_a_failover_past_the_newest_loaded_is_not_a_second_escalation(
    settings: Settings, real_redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ann escalates about her cue, then 5 escalations of other runs, then a new leader
    that loads the newest 5 (1,000 outside this test), then ann escalates again. Her first
    escalation was not in the new leader's book, so a second one was raised for the same
    cause; it is counted on the first now (two real hubs, one after the other)."""
    monkeypatch.setattr(driver_module, "ESCALATIONS_LOADED", 5)
    parsed, version = load_cuelist(PAIR)
    keys, client = settings.keys, real_redis
    body = p.EscalationError(severity=Severity.MEDIUM, cause="disk full", detail="full")

    async def escalate(task: Envelope) -> None:
        said = task.reply(T.ESCALATION_ERROR, body).model_copy(update={"from_agent": "ann"})
        await client.xadd(keys.out("ann"), {STREAM_FIELD: encode(said)})

    async def hers(hub: Hub) -> list[Escalation]:
        return [e for e in await hub.store.escalations(limit=20) if e.raised_by == "ann"]

    async with running_hub(settings, lease_ms=1000) as first:
        await first.cuelists.put(parsed, version, canonical_json(parsed), PAIR)
        await first.driver.start_run("pair", version, "run-pair", {}, False)
        entries = await eventually(lambda: client.xrange(keys.inbox("ann")), 10)
        task = decode(entries[0][1][STREAM_FIELD.encode()])
        await escalate(task)
        (raised,) = await eventually(lambda: hers(first), 10)
    for n in range(5):
        later = raised.created_at + 1 + n
        other = Escalation(type=T.ESCALATION_ERROR, severity=Severity.MEDIUM, run_id=f"o{n}",
                           cause="elsewhere", created_at=later, updated_at=later)  # fmt: skip
        await client.set(keys.escalation(other.id), other.model_dump_json())
        await client.zadd(keys.escalations, {other.id: other.created_at})
    async with running_hub(settings, lease_ms=1000) as second:
        await escalate(task)

        async def counted() -> list[Escalation]:
            found = await hers(second)
            return found if len(found) > 1 or found[0].count > 1 else []

        found = await eventually(counted, 10)
        assert [(e.id, e.count) for e in found] == [(raised.id, 2)]


async def _finished(hub: Hub, run_id: str) -> Any:
    """The run once it has ended, as the hub's store reads it (20 s at most)."""

    async def ended() -> object:
        run = await hub.store.run(run_id)
        return run if run is not None and run.status.done else None

    return await eventually(ended, 20)
