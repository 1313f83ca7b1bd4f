"""Hub routing on a real server: authenticated senders, dead letters, dedup, forwards."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import pytest

from hub.service import Hub
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import Envelope, decode, encode, make
from protocols.errors import OutOfMemory
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType as T
from protocols.transport import WriteAhead
from protocols.validation import load_cuelist
from tests.helpers import count_commits, eventually, run_out_of_memory

pytestmark = pytest.mark.redis


async def _send(hub: Hub, agent: str, raw: bytes | Envelope, field: str = STREAM_FIELD) -> None:
    data = raw if isinstance(raw, bytes) else encode(raw)
    await hub.transport._client.xadd(hub.keys.out(agent), {field: data})


def _handoff(sender: str, to: str, **ctx: Any) -> Envelope:
    body = p.TaskHandoff(
        from_agent=sender, to_agent=to, task_id="T-1", handoff_context=p.HandoffContext(**ctx)
    )
    return make(T.TASK_HANDOFF, body, from_agent=sender, target_agents=(to,))


# who the handoffs outside a run below go to: a known agent (one that came online), or
# they are refused (a made-up name's inbox would be a key nothing reads, trims or expires)
RECEIVERS = ("receiver", "bob", "dave", "frank", "gina", "karl", "olga", "quin", "sven")


@pytest.fixture
async def receivers(hub: Hub) -> None:
    for agent in RECEIVERS:
        online = p.StatusOnline(replica=f"{agent}-1", kind="echo")
        await _send(hub, agent, make(T.STATUS_ONLINE, online, from_agent=agent))
    await eventually(lambda: set(RECEIVERS) <= set(hub.registry.agents), 10)
    # applied is not yet written: the batch's XACKs may ride the router's next read
    await eventually(lambda: _all_acknowledged(hub, RECEIVERS), 10)


async def _all_acknowledged(hub: Hub, agents: Iterable[str]) -> bool:
    counts = [await hub.transport.pending_count(hub.keys.out(a), "hub") for a in agents]
    return not any(counts)


async def _inbox(hub: Hub, agent: str) -> list[Envelope]:
    rows = await hub.transport._client.xrange(hub.keys.inbox(agent))
    return [decode(fields[STREAM_FIELD.encode()]) for _, fields in rows]


async def _dead(hub: Hub) -> list[dict[str, Any]]:
    rows = await hub.transport._client.xrange(hub.keys.dead)
    return [{"id": i.decode(), **{k.decode(): v for k, v in f.items()}} for i, f in rows]


async def _violations(hub: Hub) -> list[Any]:
    return [e for e in await hub.store.escalations() if e.type is T.ESCALATION_PROTOCOL_VIOLATION]


@pytest.mark.usefixtures("receivers")
async def test_garbage_is_dead_lettered_and_routing_goes_on(hub: Hub, keys: Keys) -> None:
    garbage = [
        b"\xff\xfe not json",
        json.dumps({"message_type": "coord.nope", "payload": {}}).encode(),
        json.dumps({"message_type": T.STATUS_FAILED.value, "payload": {}}).encode(),
        b'{"x": "' + b"a" * (1024 * 1024) + b'"}',
    ]
    for raw in garbage:
        await _send(hub, "sender", raw)
    await _send(hub, "sender", _handoff("sender", "receiver", note="after the garbage"))
    assert await eventually(lambda: _inbox(hub, "receiver"), 10)
    dead = await eventually(lambda: _has(_dead(hub), 4), 10)
    reasons = [d["reason"].decode() for d in dead]
    assert any("not JSON" in r for r in reasons)
    assert any("unknown message_type" in r for r in reasons)
    assert any("bad field payload.error" in r for r in reasons)
    assert any("limit" in r for r in reasons)
    # the original bytes, untouched: whole when small, the first 4 KiB with size and hash
    assert {d["raw"] for d in dead} == {g[:4096] for g in garbage}
    assert {(int(d["raw_size"]), d["raw_sha256"].decode()) for d in dead} == {
        (len(g), hashlib.sha256(g).hexdigest()) for g in garbage
    }
    violations = await eventually(lambda: _violations(hub), 10)
    assert len(violations) == 1 and violations[0].count == 4  # raised once, counted
    assert await hub.transport.pending_count(keys.out("sender"), "hub") == 0


async def _has(rows_coro: Any, n: int) -> Any:
    rows = await rows_coro
    return rows if len(rows) >= n else None


@pytest.mark.usefixtures("receivers")
async def test_spoofed_sender_is_refused(hub: Hub) -> None:
    await _send(hub, "mallory", _handoff("alice", "bob", secret="x"))
    dead = await eventually(lambda: _dead(hub), 10)
    assert "spoofed_sender" in dead[0]["reason"].decode()
    assert "alice" in dead[0]["reason"].decode()
    assert await _inbox(hub, "bob") == []
    (violation,) = await eventually(lambda: _violations(hub), 10)
    assert violation.payload["sender"] == "mallory"


async def test_a_specialist_may_not_send_hub_commands(hub: Hub) -> None:
    go = make(T.COORD_GO, p.CoordGo(cue_id="C", target_agents=["victim"]), from_agent="rogue")
    await _send(hub, "rogue", go)
    dead = await eventually(lambda: _dead(hub), 10)
    assert "not_allowed" in dead[0]["reason"].decode()
    assert await _inbox(hub, "victim") == []


@pytest.mark.usefixtures("receivers")
async def test_from_agent_is_stamped_from_the_stream(hub: Hub) -> None:
    unsigned = make(T.TASK_HANDOFF, _handoff("carol", "dave").payload)  # body names no sender
    await _send(hub, "carol", unsigned)
    (forwarded,) = await eventually(lambda: _inbox(hub, "dave"), 10)
    assert forwarded.from_agent == "carol"
    assert forwarded.message_id == unsigned.message_id


@pytest.mark.usefixtures("receivers")
async def test_a_message_seen_twice_is_handled_once(hub: Hub) -> None:
    message = _handoff("erin", "frank", n=1)
    await _send(hub, "erin", message)
    await _send(hub, "erin", message)
    await _send(hub, "erin", _handoff("erin", "frank", n=2))
    # n=2 was written after the duplicate, so once it is through the duplicate was handled
    inbox = await eventually(lambda: _has(_inbox(hub, "frank"), 2), 10)
    assert [m.payload.handoff_context.model_extra["n"] for m in inbox] == [1, 2]  # type: ignore[attr-defined]


@pytest.mark.usefixtures("receivers")
async def test_another_agent_reusing_a_message_id_does_not_get_it_skipped(hub: Hub) -> None:
    """Duplicates are told apart per sender: a hostile agent that sends a message under
    an honest one's id first (or at the same time) gets nothing of it dropped."""
    honest = _handoff("gail", "frank", n=1)
    copy = _handoff("hugo", "frank", n=2).model_copy(update={"message_id": honest.message_id})
    await _send(hub, "hugo", copy)
    await _send(hub, "gail", honest)
    inbox = await eventually(lambda: _has(_inbox(hub, "frank"), 2), 10)
    assert sorted(m.payload.handoff_context.model_extra["n"] for m in inbox) == [1, 2]  # type: ignore[attr-defined]


@pytest.mark.usefixtures("receivers")
async def test_handoff_against_registered_contracts(hub: Hub) -> None:
    from protocols.contracts import Contract

    online = p.StatusOnline(replica="r1", contract=Contract(requires=("build_id",)))
    await _send(hub, "gina", make(T.STATUS_ONLINE, online, from_agent="gina"))
    await eventually(lambda: _registered(hub, "gina"), 10)
    await _send(hub, "henk", _handoff("henk", "gina", other="x"))  # misses build_id
    await _send(hub, "henk", _handoff("henk", "gina", build_id="b-1"))
    (forwarded,) = await eventually(lambda: _inbox(hub, "gina"), 10)
    assert forwarded.payload.handoff_context.model_extra == {"build_id": "b-1"}  # type: ignore[attr-defined]
    dead = await eventually(lambda: _dead(hub), 10)
    assert "handoff_rejected" in dead[0]["reason"].decode()


@pytest.mark.usefixtures("receivers")
async def test_a_handoff_to_what_is_not_an_agent_id_is_dead_lettered(hub: Hub) -> None:
    """The hub forwards a handoff to its receiver's inbox, a key named after it: a sender
    with no contract (which limits its receivers) cannot have it make a key of any name."""
    bad = encode(_handoff("henk", "gina", build_id="b-1")).replace(
        b'"to_agent":"gina"', b'"to_agent":"Gina}:x"'
    )
    assert b"Gina}:x" in bad
    await _send(hub, "henk", bad)
    await _send(hub, "henk", _handoff("henk", "gina", build_id="b-2"))  # routing goes on
    (forwarded,) = await eventually(lambda: _inbox(hub, "gina"), 10)
    assert forwarded.payload.handoff_context.model_extra == {"build_id": "b-2"}  # type: ignore[attr-defined]
    (dead,) = await eventually(lambda: _dead(hub), 10)
    assert "to_agent" in dead["reason"].decode() and dead["raw"] == bad
    assert not await hub.transport._client.keys(f"{hub.keys.prefix}*Gina*")


async def test_a_handoff_outside_a_run_to_no_known_agent_is_refused(hub: Hub) -> None:
    """A sender with no contract may hand off to anyone; the forward made the receiver's
    inbox, a key of its own: one for each made-up name, up to a message's size each, that
    nothing read, trimmed or expired. Only an agent that came online receives one now."""
    for n in range(5):
        await _send(hub, "mallory", _handoff("mallory", f"ghost-{n}", blob="x" * 10_000))
    dead = await eventually(lambda: _letters(hub, 5), 10)
    assert all("no agent 'ghost-" in letter["reason"].decode() for letter in dead)
    assert not await hub.transport._client.keys(f"{hub.keys.prefix}*ghost*")


async def test_a_handoff_outside_a_run_to_an_agent_gone_offline_is_refused(hub: Hub) -> None:
    """What an offline agent has not read is never trimmed: handoffs outside a run to an
    agent that came online once and left filled its inbox without end (found by review:
    XLEN 200 past a maxlen of 50). Only an agent online now receives one."""
    await _send(hub, "otto", make(T.STATUS_ONLINE, p.StatusOnline(replica="o1"), from_agent="otto"))
    await eventually(lambda: "otto" in hub.registry.agents, 10)
    await _send(
        hub, "otto", make(T.STATUS_OFFLINE, p.StatusOffline(replica="o1"), from_agent="otto")
    )
    await eventually(lambda: not hub.registry.agents["otto"].replicas["o1"].online, 10)
    for _ in range(3):
        await _send(hub, "mallory", _handoff("mallory", "otto", blob="x" * 10_000))
    dead = await eventually(lambda: _letters(hub, 3), 10)
    assert all("agent 'otto' is offline" in letter["reason"].decode() for letter in dead)
    assert not await hub.transport._client.exists(hub.keys.inbox("otto"))


async def _letters(hub: Hub, n: int) -> list[dict[str, Any]]:
    found = await _dead(hub)
    return found if len(found) >= n else []


async def _registered(hub: Hub, agent: str) -> bool:
    return any(a["agent"] == agent for a in await hub.registry.describe())


async def test_registry_tracks_online_and_offline(hub: Hub) -> None:
    await _send(hub, "ivan", make(T.STATUS_ONLINE, p.StatusOnline(replica="r1", kind="echo")))
    await eventually(lambda: _registered(hub, "ivan"), 10)
    await _send(hub, "ivan", make(T.STATUS_OFFLINE, p.StatusOffline(replica="r1")))

    async def offline() -> bool:
        (ivan,) = [a for a in await hub.registry.describe() if a["agent"] == "ivan"]
        return ivan["online"] is False and ivan["kind"] == "echo"

    assert await eventually(offline, 10)


def _rejected(agent: str, entry_id: str, reason: str, deliveries: int = 1) -> Envelope:
    body = p.StatusRejected(entry_id=entry_id, reason=reason, deliveries=deliveries)
    return make(T.STATUS_REJECTED, body, from_agent=agent)


@pytest.mark.usefixtures("receivers")
async def test_status_rejected_dead_letters_the_entry_of_the_senders_own_inbox(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = hub.keys.inbox("kim")
    poison = b'{"not": "a message"}'
    entry_id = (await hub.transport._client.xadd(inbox, {STREAM_FIELD: poison})).decode()
    # Another agent's inbox holds an entry too: nobody may have it dead-lettered but its own.
    other = (await hub.transport._client.xadd(hub.keys.inbox("lou"), {STREAM_FIELD: b"x"})).decode()
    await _send(hub, "kim", _rejected("kim", entry_id, "not JSON: ...", deliveries=3))
    await _send(hub, "kim", _rejected("kim", entry_id, "again"))  # once is enough
    await _send(hub, "kim", _rejected("kim", other, "not mine"))  # names lou's entry id
    await _send(hub, "kim", _rejected("kim", "9999999999999-0", "made up"))
    await _send(hub, "kim", _rejected("kim", "+", "not an id"))
    violations = await eventually(lambda: _has(_violations(hub), 2), 10)
    (letter,) = await _dead(hub)
    assert letter["reason"] == b"rejected by kim: not JSON: ..."
    assert (letter["stream"], letter["entry_id"]) == (inbox.encode(), entry_id.encode())
    assert (letter["sender"], letter["deliveries"], letter["raw"]) == (b"kim", b"3", poison)
    assert sorted((v.cause, v.count) for v in violations) == [
        ("rejected_bad_id:kim", 1),
        ("rejected_unknown_entry:kim", 1 if other == entry_id else 2),
    ]
    assert await hub.transport.pending_count(hub.keys.out("kim"), "hub") == 0
    assert await _audited(hub, T.STATUS_REJECTED.value)
    await _send(hub, "kim", _handoff("kim", "karl", note="after the rejections"))
    assert await eventually(lambda: _inbox(hub, "karl"), 10)  # routing goes on behind them
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_one_senders_flood_of_dead_letters_is_held_to_its_budget(hub: Hub) -> None:
    hub.router.dead.budgets.burst, hub.router.dead.budgets.per_s = 5, 0.001
    await _send(hub, "early", b"{honest garbage")
    await eventually(lambda: _dead(hub), 10)
    for i in range(50):
        await _send(hub, "flood", b"{junk %d" % i)
    await eventually(lambda: _counted(_violations(hub), "bad_message:flood", 50), 10)
    dead = await _dead(hub)
    assert [d["sender"] for d in dead] == [b"early"] + [b"flood"] * 5
    over = hub.metrics.registry.get_sample_value(
        "callboard_dead_letters_over_budget_total", {"reason": "bad_message"}
    )
    assert over == 45  # counted, acknowledged, not copied
    assert await hub.transport.pending_count(hub.keys.out("flood"), "hub") == 0  # all acked


async def _counted(found: Any, cause: str, n: int) -> list[Any] | None:
    hits = [v for v in await found if v.cause == cause and v.count >= n]
    return hits or None


async def test_a_refused_reply_is_linked_to_its_cue(hub: Hub) -> None:
    cuelist = "cuelist: linked\ncues:\n  - {id: ONLY, target_agents: [mia], ack_timeout_s: 30}\n"
    parsed, version = load_cuelist(cuelist)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), cuelist)
    run = await hub.driver.start_run("linked", version, "run-linked", {}, False)
    bad = {"message_type": "ack.warning", "run_id": run.run_id, "cue_id": "ONLY",
           "payload": {"attempt": "first"}}  # fmt: skip
    await _send(hub, "mia", json.dumps(bad).encode())

    async def reason() -> str | None:
        stored = await hub.store.run(run.run_id)
        text = stored.cues["ONLY"].reason if stored else None
        return text if text and "dead-lettered" in text else None

    text = await eventually(reason, 10)
    (letter,) = await _dead(hub)
    assert f"a reply from mia was dead-lettered (dead letter {letter['id']})" in text
    events = [e.data for e in await hub.store.events(run.run_id)]
    assert any(e["type"] == "dead_letter" and e["cue"] == "ONLY" for e in events)
    await hub.driver.step(lambda e: e.cancel(run.run_id))


@pytest.mark.usefixtures("receivers")
async def test_handoffs_outside_a_run_are_held_to_a_budget_per_sender(hub: Hub) -> None:
    hub.router.runless_handoffs.burst, hub.router.runless_handoffs.per_s = 3, 0.001
    for n in range(10):
        await _send(hub, "noel", _handoff("noel", "olga", n=n))
    violation = await eventually(
        lambda: _counted(_violations(hub), "handoff_over_budget:noel", 7), 10
    )
    assert violation
    assert len(await _inbox(hub, "olga")) == 3


async def _audited(hub: Hub, message_type: str) -> bool:
    rows = await hub.transport._client.xrange(hub.keys.audit)
    return any(m["type"] == message_type for _, f in rows for m in json.loads(f[b"m"]))


async def test_what_a_sender_names_as_recipients_does_not_grow_the_audit(hub: Hub) -> None:
    """`target_agents` of a specialist's message is its own claim, of any length: copied
    whole into the audit, 200 reports naming 2,400 recipients each (240 KB) grew the audit
    stream by 50 MB, as much as the sender's own out stream, and the audit keeps them
    for `CALLBOARD_AUDIT_MAXLEN` batches. The audit keeps a few names, each an id's length."""
    names = tuple(f"x{i:06d}" + "y" * 90 for i in range(2_400))
    report = p.StatusReport(replica="r", state="ok")
    sent = [
        make(T.STATUS_REPORT, report, from_agent="mallory", target_agents=names) for _ in range(20)
    ]
    for message in sent:
        await _send(hub, "mallory", message)
    rows = await eventually(lambda: _audit_rows(hub, len(sent)), 10)
    audited = [m for _, f in rows for m in json.loads(f[b"m"])]
    assert {m["id"] for m in audited} == {m.message_id for m in sent}
    assert all(m["to"] == [name[:64] for name in names[:8]] for m in audited)
    assert sum(len(f[b"m"]) for _, f in rows) < 20 * 2_000


async def _audit_rows(hub: Hub, messages: int) -> list[Any]:
    rows = await hub.transport._client.xrange(hub.keys.audit)
    return rows if sum(len(json.loads(f[b"m"])) for _, f in rows) >= messages else []


async def test_a_reply_for_a_run_that_ended_before_this_term_is_late_not_a_violation(
    hub: Hub,
) -> None:
    """The engine forgot the run (it ended before the hub restarted); Redis still has it:
    the router asks, and the reply is counted as late, not escalated."""
    from hub.engine.state import RunState
    from protocols.states import RunStatus

    ended = RunState(run_id="long-done", cuelist="c", version="v", status=RunStatus.SUCCESS,
                     created_at=1.0, completed_at=2.0)  # fmt: skip
    await hub.store.save_run(ended)
    completed = p.StatusCompleted(attempt=1)
    await _send(hub, "zoe", make(T.STATUS_COMPLETED, completed, from_agent="zoe",
                                 run_id="long-done", cue_id="C"))  # fmt: skip
    await _send(hub, "zoe", make(T.STATUS_COMPLETED, completed, from_agent="zoe",
                                 run_id="never-was", cue_id="C"))  # fmt: skip
    found = await eventually(lambda: _counted(_violations(hub), "unknown_run:zoe", 1), 10)
    assert found[0].detail.endswith("unknown run never-was")  # the made-up one only
    assert hub.metrics.late_replies._value.get() == 1
    assert "long-done" in hub.driver.engine.ended


def _spy_on_reads(hub: Hub) -> list[Any]:
    """Record every write the router sends ahead of a read, with its outcome."""
    told: list[Any] = []
    read_group = hub.transport.read_group

    async def spied(*args: Any, ahead: WriteAhead | None = None, **kw: Any) -> Any:
        if ahead is None:
            return await read_group(*args, **kw)
        original = ahead

        def tell(outcome: Any) -> None:
            told.append((original.commands, outcome))
            original.tell(outcome)

        spy = WriteAhead(original.commands, tell)
        return await read_group(*args, ahead=spy, **kw)

    hub.transport.read_group = spied  # type: ignore[method-assign]
    return told


@pytest.mark.usefixtures("receivers")
async def test_a_batch_that_only_forwards_is_written_in_the_next_reads_round_trip(
    hub: Hub,
) -> None:
    assert hub.transport.writes_ride_reads  # a plain Redis on callboard's pool
    told = _spy_on_reads(hub)
    await _send(hub, "pia", _handoff("pia", "quin", n=1))
    (forwarded,) = await eventually(lambda: _inbox(hub, "quin"), 10)
    assert forwarded.from_agent == "pia"
    commands, outcome = await eventually(lambda: told and told[0], 10)
    assert not isinstance(outcome, BaseException)
    words = [(c[0], c[1]) for c in commands]  # the forward, the audit, then the XACK
    assert words == [
        ("XADD", hub.keys.inbox("quin")), ("XADD", hub.keys.audit), ("XACK", hub.keys.out("pia"))
    ]  # fmt: skip
    assert await hub.transport.pending_count(hub.keys.out("pia"), "hub") == 0
    await _send(hub, "pia", _handoff("pia", "quin", n=1).model_copy(
        update={"message_id": forwarded.message_id}
    ))  # fmt: skip
    await eventually(lambda: _pending_is(hub, "pia", 0, after=2), 10)
    assert len(await _inbox(hub, "quin")) == 1  # the same message again: forwarded once


async def _pending_is(hub: Hub, agent: str, pending: int, after: int) -> bool:
    """`pending` entries of `after` read from the agent's out stream by the hub group."""
    groups = await hub.transport._client.xinfo_groups(hub.keys.out(agent))
    (group,) = [g for g in groups if g["name"] == b"hub"]
    return bool(group["entries-read"] == after and group["pending"] == pending)


@pytest.mark.usefixtures("receivers")
async def test_forwards_refused_out_of_memory_are_not_acknowledged(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis runs out of memory between the router's read of a handoff and its write: the
    forward and the XACK go in one transaction, refused whole (XACK alone is not refused
    out of memory: pipelined, the entry was acknowledged and its forward lost). The term
    ends, and the next one reclaims the entry and forwards it, once."""
    told = _spy_on_reads(hub)
    restores = _out_of_memory_at_next_batch(hub)
    await _send(hub, "rosa", _handoff("rosa", "sven", n=1))
    try:
        await eventually(lambda: "the term ends" in caplog.text, 10)
    finally:
        for restore in restores:
            await restore()
    (forwarded,) = await eventually(lambda: _inbox(hub, "sven"), 15)
    assert forwarded.payload.handoff_context.model_extra == {"n": 1}  # type: ignore[attr-defined]
    await eventually(lambda: _pending_is(hub, "rosa", 0, after=1), 10)
    assert len(await _inbox(hub, "sven")) == 1
    assert isinstance(told[0][1], OutOfMemory)  # refused as it went ahead of a read


async def test_a_rejection_whose_dead_letter_is_refused_out_of_memory_is_written_next_term(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """The specialist acknowledged its inbox entry with its status.rejected: the dead letter
    is the entry's only record. Refused out of memory, it ends the term, and the next term
    reads the rejection again and writes it, once (before, the rejection was marked done
    before its letter was written, and the next term skipped it: the entry was lost)."""
    inbox = hub.keys.inbox("tove")
    entry_id = (await hub.transport._client.xadd(inbox, {STREAM_FIELD: b"not json"})).decode()
    restores = _out_of_memory_at_next_batch(hub)
    await _send(hub, "tove", _rejected("tove", entry_id, "not JSON"))
    try:
        await eventually(lambda: "the term ends" in caplog.text, 10)
    finally:
        for restore in restores:
            await restore()
    (letter,) = await eventually(lambda: _dead(hub), 15)
    assert (letter["entry_id"], letter["reason"]) == (
        entry_id.encode(),
        b"rejected by tove: not JSON",
    )
    await eventually(lambda: _pending_is(hub, "tove", 0, after=1), 10)
    assert len(await _dead(hub)) == 1


def _out_of_memory_at_next_batch(hub: Hub) -> list[Callable[[], Awaitable[None]]]:
    """Redis runs out of memory as the router starts on its next batch; what sets it back
    is added to the list returned."""
    process = hub.router.process
    restores: list[Callable[[], Awaitable[None]]] = []

    async def out_of_memory_first(*args: Any, **kw: Any) -> None:
        hub.router.process = process  # type: ignore[method-assign]
        restores.append(await run_out_of_memory(hub.transport._client))
        await process(*args, **kw)

    hub.router.process = out_of_memory_first  # type: ignore[method-assign]
    return restores


async def _two_agent_cue(hub: Hub) -> tuple[str, Callable[[str, T], Envelope], Any]:
    """A run whose one cue targets ana and ben (its WARNING sent): the run's id, a maker of
    their acks, and whether Redis holds an agent in a state."""
    cuelist = "cuelist: behind\ncues:\n  - {id: C, target_agents: [ana, ben], ack_timeout_s: 30}\n"
    parsed, version = load_cuelist(cuelist)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), cuelist)
    run_id = (await hub.driver.start_run("behind", version, "run-behind", {}, False)).run_id

    def ack(agent: str, mt: T) -> Envelope:
        body = p.AckWarning() if mt is T.ACK_WARNING else p.AckStandby()
        return make(mt, body, from_agent=agent, run_id=run_id, cue_id="C")

    async def stored(agent: str, state: str) -> bool:
        found = await hub.store.run(run_id)
        return found is not None and found.cues["C"].targets.get(agent) == state

    return run_id, ack, stored


async def test_the_next_batch_is_handled_while_the_last_ones_write_is_out(hub: Hub) -> None:
    """The router reads and handles the next batch while Redis writes the last one; what a
    batch caused is acknowledged in its own write, so an entry stays pending until its
    effects are stored, and every effect lands once the write does."""
    run_id, ack, stored = await _two_agent_cue(hub)
    await _send(hub, "ana", ack("ana", T.ACK_WARNING))
    await eventually(lambda: stored("ana", "prepared"), 10)
    gate = asyncio.Event()
    writes = count_commits(hub.driver.store, gate)
    await _send(hub, "ben", ack("ben", T.ACK_WARNING))  # the phase is complete: STANDBY
    await eventually(lambda: len(writes) == 1, 10, message="the STANDBY write is out")
    await _send(hub, "ana", ack("ana", T.ACK_STANDBY))
    cue = hub.driver.engine.runs[run_id].cues["C"]
    await eventually(lambda: cue.targets["ana"] == "ready", 10, message="handled meanwhile")
    assert await _pending_is(hub, "ben", 1, after=1)  # not acknowledged before it is stored
    assert not await stored("ben", "prepared")
    gate.set()
    await eventually(lambda: _pending_is(hub, "ben", 0, after=1), 10)
    await eventually(lambda: _pending_is(hub, "ana", 0, after=2), 10)
    assert await stored("ben", "prepared") and await stored("ana", "ready")
    standby = [m for m in await _inbox(hub, "ana") if m.message_type is T.COORD_STANDBY]
    assert len(standby) == 1  # sent once
    await hub.driver.step(lambda e: e.cancel(run_id))


async def test_a_write_left_behind_refused_out_of_memory_loses_nothing(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis runs out of memory as the write of a batch the router has moved past goes
    out: nobody awaits it, yet the term ends, and the next one reclaims the entry and
    handles it once (the STANDBY it causes sent once, the ack stored and acknowledged)."""
    run_id, ack, stored = await _two_agent_cue(hub)
    await _send(hub, "ana", ack("ana", T.ACK_WARNING))
    await eventually(lambda: stored("ana", "prepared"), 10)
    restores: list[Callable[[], Awaitable[None]]] = []
    commit = hub.driver.store.commit

    async def out_of_memory_first(*args: Any) -> None:
        hub.driver.store.commit = commit  # type: ignore[method-assign]
        restores.append(await run_out_of_memory(hub.transport._client))
        await commit(*args)

    hub.driver.store.commit = out_of_memory_first  # type: ignore[method-assign]
    await _send(hub, "ben", ack("ben", T.ACK_WARNING))
    try:
        await eventually(lambda: "a state write failed" in caplog.text, 10)
    finally:
        for restore in restores:
            await restore()
    await eventually(lambda: stored("ben", "prepared"), 15)
    await eventually(lambda: _pending_is(hub, "ben", 0, after=1), 10)
    standby = [m for m in await _inbox(hub, "ana") if m.message_type is T.COORD_STANDBY]
    assert len(standby) == 1
    await hub.driver.step(lambda e: e.cancel(run_id))


async def test_a_sender_replaying_its_message_while_the_write_is_out_is_handled_once(
    hub: Hub,
) -> None:
    """A hostile (or retrying) specialist sends its ack again, same message id, while the
    write of the first is still out: the copy is neither handled again nor acknowledged
    before the first one's effects are stored; then it is acknowledged, and the STANDBY
    the ack caused goes out once."""
    run_id, ack, stored = await _two_agent_cue(hub)
    await _send(hub, "ana", ack("ana", T.ACK_WARNING))
    await eventually(lambda: stored("ana", "prepared"), 10)
    gate = asyncio.Event()
    writes = count_commits(hub.driver.store, gate)
    first = ack("ben", T.ACK_WARNING)
    await _send(hub, "ben", first)
    await eventually(lambda: len(writes) == 1, 10, message="the first one's write is out")
    await _send(hub, "ben", first)  # the same message again, in an entry of its own
    await eventually(lambda: _pending_is(hub, "ben", 2, after=2), 10, message="copy read")
    gate.set()
    await eventually(lambda: stored("ben", "prepared"), 10)
    await eventually(lambda: _pending_is(hub, "ben", 0, after=2), 15, message="copy acked")
    standby = [m for m in await _inbox(hub, "ben") if m.message_type is T.COORD_STANDBY]
    assert len(standby) == 1
    await hub.driver.step(lambda e: e.cancel(run_id))
