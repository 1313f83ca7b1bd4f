"""The engine's driver on a real server: resuming as a new leader, big runs starting in
chunks, and steps that send nothing sharing the next fenced write."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.engine import driver as driver_module
from hub.engine import guard, inputs
from hub.engine.driver import BACKLOG_CHUNK, Driver
from hub.engine.escalations import Escalation
from hub.engine.resources import Claim, ResourceBook
from hub.store import CuelistStore, StateStore
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import make
from protocols.errors import OutOfMemory, StaleLeader
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.states import ConflictStrategy, Severity
from protocols.transport import Storage, connect
from protocols.validation import load_cuelist
from tests.helpers import count_commits, eventually

pytestmark = pytest.mark.redis
LEASE = "hub-a:1"


async def _leading(real_redis: Any, keys: Keys, cuelist: dict[str, Any] | None = None) -> Driver:
    """A driver that holds the lease on `keys`, with `cuelist` stored."""
    store = StateStore(Storage(real_redis), keys)
    await real_redis.set(store.keys.leader(), LEASE)
    cuelists = CuelistStore(Storage(real_redis), keys)
    if cuelist is not None:
        model, version = load_cuelist(cuelist)
        await cuelists.put(model, version, canonical_json(model), None)
    return Driver(store, cuelists, keys, lambda: LEASE)


def test_a_go_rewrites_the_book_only_when_it_marks_a_claim() -> None:
    """A GO writes the resource book when the cue holds a claim not yet marked GO'd (it
    may then never be pre-empted, after a restart too), and never for a cue holding none."""
    book = ResourceBook()
    book.claim(Claim("run", "HOLDS", ("runner",), 5, ConflictStrategy.PRIORITY))
    assert book.mark_go(("run", "HOLDS")) is True
    assert book.dump().held["runner"].went is True
    assert book.mark_go(("run", "HOLDS")) is False  # a retry's GO: nothing new to write
    assert book.mark_go(("run", "FREE")) is False


async def test_a_new_leader_drops_leases_of_runs_no_longer_running(
    real_redis: Any, keys: Keys
) -> None:
    book = ResourceBook()
    book.claim(Claim("gone-run", "CUE-1", ("runner",), 5, ConflictStrategy.PRIORITY))
    driver = await _leading(real_redis, keys)
    await real_redis.set(driver.store.keys.resources(), book.dump().model_dump_json())
    await driver.load()
    assert driver.engine.book.holder_of("runner") is None
    saved = json.loads(await real_redis.get(driver.store.keys.resources()))
    assert saved["held"] == {}  # and the release is written, fenced like any state


async def test_a_dry_runs_events_follow_it_in_bounded_writes_all_of_them_in_order(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk's events go in writes of at most DRY_EVENTS_PER_WRITE (7 here), after the
    run: every one lands, in the walk's order, and the run is stored whole."""
    monkeypatch.setattr(driver_module, "DRY_EVENTS_PER_WRITE", 7)
    cues = [{"id": f"D{i}", "target_agents": ["w"], "coordination": "direct"} for i in range(10)]
    driver = await _leading(real_redis, keys, {"cuelist": "walk", "cues": cues})
    commits: list[int] = []
    real_commit = driver.store.commit

    async def commit(out: Any, *args: Any) -> None:
        commits.append(len(out.events))
        await real_commit(out, *args)

    monkeypatch.setattr(driver.store, "commit", commit)
    walked: list[Any] = []
    real_walk = driver_module.dry_run

    def walk(*args: Any) -> Any:
        run, out = real_walk(*args)
        walked.extend(event for _, event in out.events)
        return run, out

    monkeypatch.setattr(driver_module, "dry_run", walk)
    run = await driver.start_run("walk", None, "r1", {}, True)
    assert len(walked) > 14  # enough for three writes
    assert max(commits) <= 7 and len(commits) == -(-len(walked) // 7)
    stored = [json.loads(f[b"e"]) for _, f in await real_redis.xrange(keys.run_events("r1"))]
    assert stored == json.loads(json.dumps(walked))
    assert (await driver.store.run("r1")) == run


async def test_a_big_run_starts_in_committed_chunks_between_other_steps(
    real_redis: Any, keys: Keys
) -> None:
    """A run of 600 entry cues: its start commits the first chunk of assigns; the backlog
    loop commits the rest, a chunk per fenced write, and each cue is assigned once."""
    n = 600
    cues = [{"id": f"J{i:03d}", "target_agents": ["w"], "coordination": "direct"} for i in range(n)]
    starts = [c["id"] for c in cues]
    driver = await _leading(real_redis, keys, {"cuelist": "big", "start": starts, "cues": cues})
    await driver.start_run("big", None, "r1", {}, False)
    assert await real_redis.xlen(keys.inbox("w")) == BACKLOG_CHUNK  # the first chunk, at once
    stop = asyncio.Event()
    loop = asyncio.create_task(driver.run_backlog(stop))
    try:
        await eventually(lambda: _inbox_holds(real_redis, keys, n), 10, message="all assigned")
    finally:
        stop.set()
        await loop
    entries = await real_redis.xrange(keys.inbox("w"))
    assert sorted(json.loads(fields[b"m"])["cue_id"] for _, fields in entries) == starts
    (run,) = await driver.store.runs(["r1"])
    assert all(cr.state.value == "go" for cr in run.cues.values())


async def _inbox_holds(client: Any, keys: Keys, n: int) -> bool:
    return bool(await client.xlen(keys.inbox("w")) >= n)


THREE = {"cuelist": "three", "cues": [{"id": "C", "target_agents": ["a", "b", "c"]}]}


def _ack(agent: str, standby: bool = False) -> Any:
    mt, body = (T.ACK_STANDBY, p.AckStandby()) if standby else (T.ACK_WARNING, p.AckWarning())
    msg = make(mt, body, from_agent=agent, run_id="r1", cue_id="C")
    return lambda e: inputs.handle(e, msg)


async def _target(store: StateStore, agent: str, state: str) -> bool:
    (run,) = await store.runs(["r1"])
    return run.cues["C"].targets.get(agent) == state


async def test_a_step_that_sends_nothing_shares_the_next_write(real_redis: Any, keys: Keys) -> None:
    """An ack that leaves its cue waiting returns before any write (the router's XACK rides
    later); it is written within LINGER_S, or with the next step that sends something."""
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    commits = count_commits(driver.store)
    await driver.step(_ack("a"), quiet_may_wait=True)
    assert commits == []  # returned at once: nothing to send
    await eventually(lambda: _target(driver.store, "a", "prepared"), 5, message="lingered")
    assert len(commits) == 1
    await driver.step(_ack("b"), quiet_may_wait=True)
    await driver.step(_ack("c"), quiet_may_wait=True)  # completes the phase: STANDBY goes out
    assert len(commits) == 2  # b's ack went with c's
    assert await real_redis.xlen(keys.inbox("c")) == 2  # WARNING, then STANDBY, written


async def test_a_quiet_step_during_the_lingering_write_is_written_too(
    real_redis: Any, keys: Keys
) -> None:
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    gate = asyncio.Event()
    commits = count_commits(driver.store, gate)
    await driver.step(_ack("a"), quiet_may_wait=True)
    await eventually(lambda: len(commits) == 1, 5, message="the linger's write started")
    await driver.step(_ack("b"), quiet_may_wait=True)  # lands while that write is held
    gate.set()
    # b's step (its XACK, its events) needs a write of its own once the held one is done
    await eventually(lambda: len(commits) == 2, 5, message="a second write")
    await eventually(lambda: _target(driver.store, "b", "prepared"), 5, message="b written")


async def test_a_write_that_took_the_quiet_steps_ends_their_wait(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The linger counts from the oldest quiet step no write has taken: once the phase's
    last ack wrote a's ack along with STANDBY, the next phase's first ack waits its own
    LINGER_S, not what was left of a's (which would split that phase's writes)."""
    monkeypatch.setattr(driver_module, "LINGER_S", 0.2)
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    commits = count_commits(driver.store)
    await driver.step(_ack("a"), quiet_may_wait=True)  # a's linger would end at t0 + 0.2
    await driver.step(_ack("b"), quiet_may_wait=True)
    await driver.step(_ack("c"), quiet_may_wait=True)  # STANDBY: one write, a's ack in it
    assert len(commits) == 1
    await asyncio.sleep(0.15)  # the scenario: the first ack.standby comes 150 ms later
    asked = time.monotonic()
    await driver.step(_ack("a", standby=True), quiet_may_wait=True)
    await eventually(lambda: _target(driver.store, "a", "ready"), 5, message="written")
    assert len(commits) == 2
    assert commits[1] - asked >= 0.2 - 0.01  # its own wait, not the 50 ms left of a's


async def test_a_phase_is_one_message_with_a_copy_in_each_targets_inbox(
    real_redis: Any, keys: Keys
) -> None:
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    copies = [(await real_redis.xrange(keys.inbox(a)))[0][1][b"m"] for a in ("a", "b", "c")]
    assert copies[0] == copies[1] == copies[2]  # built and encoded once
    warning = json.loads(copies[0])
    assert (warning["message_type"], warning["target_agents"]) == ("coord.warning", ["a", "b", "c"])


async def test_an_agent_changing_its_contract_on_every_batch_costs_a_few_rechecks(
    real_redis: Any, keys: Keys
) -> None:
    """An agent saying a new contract on each of 300 batches: the waiting cues are looked at
    once, then once a RECHECK_S with the newest agents, not 300 times (each look visits
    every waiting cue: 8 ms at 1,000 waiting runs). The agent that then comes online is
    seen within a RECHECK_S. On the code before, every change was a re-check."""
    from protocols.targeting import Candidate

    cuelist = {"cuelist": "cap", "cues": [{"id": "R", "target": {"provides": ["review"]}}]}
    driver = await _leading(real_redis, keys, cuelist)
    await driver.start_run("cap", None, "r1", {}, False)
    rechecks = 0
    look = driver.engine.agents_online

    def counted(agents: Any) -> None:
        nonlocal rechecks
        rechecks += 1
        look(agents)

    driver.engine.agents_online = counted  # type: ignore[method-assign]
    began = time.monotonic()
    for n in range(300):
        flipping = Candidate("flip", provides=("other",), labels={"n": n})
        await driver.agents_changed({"flip": flipping})
    reviewer = Candidate("rev-1", provides=("review",))
    await driver.agents_changed({"flip": flipping, "rev-1": reviewer})
    await eventually(lambda: real_redis.xlen(keys.inbox("rev-1")), 5, message="its WARNING")
    took = time.monotonic() - began
    assert rechecks <= 2 + took / driver_module.RECHECK_S, (rechecks, took)
    assert rechecks < 30


async def test_a_cue_waiting_for_an_agent_fires_when_one_comes_online_or_a_term_starts(
    real_redis: Any, keys: Keys
) -> None:
    from protocols.targeting import Candidate

    cuelist = {"cuelist": "cap", "cues": [{"id": "R", "target": {"provides": ["review"]}}]}
    driver = await _leading(real_redis, keys, cuelist)
    await driver.start_run("cap", None, "r1", {}, False)
    (run,) = await driver.store.runs(["r1"])
    assert run.cues["R"].state.value == "waiting"
    assert (run.cues["R"].reason or "").startswith("no online agent matches target")
    reviewer = Candidate("rev-1", provides=("review",))
    await driver.agents_changed({"rev-1": reviewer})  # the router's input
    assert await real_redis.xlen(keys.inbox("rev-1")) == 1  # its WARNING, committed
    await driver.start_run("cap", None, "r2", {}, False)  # now rev-1 is online
    assert await real_redis.xlen(keys.inbox("rev-1")) == 2
    # a new term: the registry's online agents are read when the engine loads
    driver.online = dict  # nobody online when the next term starts
    await driver.load()
    await driver.start_run("cap", None, "r3", {}, False)
    assert (await driver.store.runs(["r3"]))[0].cues["R"].state.value == "waiting"
    driver.online = lambda: {"rev-1": reviewer}
    await driver.load()
    assert (await driver.store.runs(["r3"]))[0].cues["R"].state.value == "warning"


ONE = {"cuelist": "one", "cues": [{"id": "A", "target_agents": ["a"], "coordination": "direct"}]}


@pytest.fixture(params=["server", "cluster"])
async def server_or_cluster(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Any]:
    """A client on the real server, then on the session's Redis Cluster; deletes this
    test's keys afterwards."""
    name = "redis_cluster" if request.param == "cluster" else "redis_server"
    client: Any = connect(request.getfixturevalue(name).url)
    yield client
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        await client.delete(key)
    await client.aclose()


async def test_a_cause_again_after_a_failover_past_the_newest_loaded_counts_on_its_escalation(
    server_or_cluster: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target escalates about its cue, and a message naming no run it knows makes a
    violation of no run; then 5 newer escalations, and a new leader that loads the newest
    5 (1,000 outside this test). Its book lacked both, so the same causes again raised a
    second escalation each. They count on the first now: the run's hash names its
    escalations, and a set the open ones of no run (one slot or many, on a cluster)."""
    redis = server_or_cluster
    monkeypatch.setattr(driver_module, "ESCALATIONS_LOADED", 5)
    cuelists = CuelistStore(Storage(redis), keys)
    model, version = load_cuelist(ONE)
    await cuelists.put(model, version, canonical_json(model), None)

    def leader(value: str) -> Driver:
        return Driver(StateStore(Storage(redis), keys), cuelists, keys, lambda: value)

    def causes(driver: Driver) -> Any:
        """A step: the target escalates again, and the stray message comes again."""
        body = p.EscalationError(severity=Severity.MEDIUM, cause="disk full", detail="full")
        said = make(T.ESCALATION_ERROR, body, from_agent="a", run_id="r1", cue_id="A")
        stray = make(T.ACK_WARNING, p.AckWarning(attempt=1), from_agent="a", run_id="gone")

        def both(e: Any) -> None:
            guard.specialist_escalation(e, said, Severity.HIGH)
            inputs.handle(e, stray)

        return driver.step(both)

    await redis.set(keys.leader(), "hub-a:1")
    old = leader("hub-a:1")
    await old.load()
    await old.start_run("one", None, "r1", {}, False)
    await causes(old)
    first = {(e.run_id, e.cause): e for e in await old.store.escalations(10)}
    assert set(first) == {("r1", "escalation.error:a"), (None, "unknown_run:a")}
    for n in range(5):  # newer ones, of other runs
        later = time.time() + 1 + n
        other = Escalation(type=T.ESCALATION_ERROR, severity=Severity.MEDIUM, run_id=f"o{n}",
                           cause="elsewhere", created_at=later, updated_at=later)  # fmt: skip
        await redis.set(keys.escalation(other.id), other.model_dump_json())
        await redis.zadd(keys.escalations, {other.id: other.created_at})

    await redis.set(keys.leader(), "hub-b:2")
    new = leader("hub-b:2")
    await new.load()
    await causes(new)
    found = [e for e in await new.store.escalations(20) if e.cause != "elsewhere"]
    assert sorted((e.id, e.count) for e in found) == sorted((e.id, 2) for e in first.values())


async def test_a_step_left_behind_returns_as_its_write_starts_and_one_at_most_is_behind(
    real_redis: Any, keys: Keys
) -> None:
    """The router's steps (`behind`): one returns once its write has started, so the next
    input is read while Redis writes; the next such step returns only once that write has
    landed, so the engine is never more than one write ahead of Redis."""
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    await driver.step(_ack("a"))
    await driver.step(_ack("b"))
    gate = asyncio.Event()
    commits = count_commits(driver.store, gate)
    # completes the phase: STANDBY goes out. Awaited as the router does (no task of its
    # own, which would give the loop turns): its write has started when it returns, so it
    # goes out before the router's next read; here the write is held
    await driver.step(_ack("c"), behind=True)
    assert len(commits) == 1
    assert driver.durable < driver.applied
    assert not await _target(driver.store, "c", "prepared")
    second = asyncio.create_task(driver.step(_ack("a", standby=True), behind=True))
    for _ in range(20):  # the step is applied at once, then waits for the write before it
        await asyncio.sleep(0)
    assert driver.engine.runs["r1"].cues["C"].targets["a"] == "ready"
    assert not second.done() and len(commits) == 1
    gate.set()
    await second
    await driver.caught_up()
    assert driver.durable == driver.applied and len(commits) == 2
    assert await _target(driver.store, "c", "prepared")
    assert await _target(driver.store, "a", "ready")
    assert await real_redis.xlen(keys.inbox("c")) == 2  # WARNING, then STANDBY


async def test_a_write_left_behind_that_fails_ends_the_term(real_redis: Any, keys: Keys) -> None:
    """Nobody awaits a write left behind as it fails: it ends the term (`broken`), the
    next catch-up raises its error, and no later step builds on the engine it left."""
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)

    async def refused(*args: Any) -> None:
        raise OutOfMemory("OOM command not allowed when used memory > 'maxmemory'")

    driver.store.commit = refused  # type: ignore[method-assign]
    await driver.step(_ack("a"), behind=True)
    await eventually(driver.broken.is_set, 5, message="the term ends")
    with pytest.raises(OutOfMemory):
        await driver.caught_up()
    with pytest.raises(StaleLeader):
        await driver.step(_ack("b"), behind=True)
    assert not await _target(driver.store, "a", "prepared")


async def test_steps_made_ready_together_share_one_write(real_redis: Any, keys: Keys) -> None:
    """A batch of commands is served at once (hub.commands.server): their steps, ready in
    the same turn of the event loop, go in one fenced write, not the first step in a write
    of its own and the rest in the next."""
    driver = await _leading(real_redis, keys, THREE)
    await driver.start_run("three", None, "r1", {}, False)
    commits = count_commits(driver.store)
    await asyncio.gather(*(driver.step(_ack(agent)) for agent in ("a", "b", "c")))
    assert len(commits) == 1
    assert await _target(driver.store, "a", "prepared")
    assert await real_redis.xlen(keys.inbox("c")) == 2  # the phase complete: STANDBY sent
